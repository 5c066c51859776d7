/* A Jinja2 interpreter for chat templates. It follows the environment that
 * transformers' apply_chat_template uses (trim_blocks, lstrip_blocks, the
 * loopcontrols extension, an immutable sandbox, its own tojson filter and
 * the raise_exception / strftime_now globals), so that rendering a Hugging
 * Face chat template here gives the same bytes as Python does.
 *
 * A template is parsed once into an AST and may be rendered any number of
 * times. Every failure is reported as SPINDLE_ERR_TEMPLATE (or
 * SPINDLE_ERR_LIMIT / SPINDLE_ERR_MEMORY) with a message starting
 * "template line L, column C: ". Nothing here touches files or the
 * environment. */
#ifndef SP_INPUT_JINJA_H
#define SP_INPUT_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "spindle.h"

typedef struct sp_jinja_template sp_jinja_template;

typedef struct sp_jinja_limits {
    int max_depth;            /* nesting of expressions, macro calls */
    int64_t max_iterations;   /* loop iterations over the whole render */
    size_t max_output;        /* bytes of rendered text, and of any one
                                 string value */
    size_t max_value_bytes;   /* bytes that the render's values (strings,
                                 list and dict slots) hold at once */
    int64_t now;              /* strftime_now's clock (epoch seconds, local
                                 time); < 0: the real clock */
} sp_jinja_limits;

sp_jinja_limits sp_jinja_default_limits(void);

/* Parse `len` bytes of template source. */
spindle_status sp_jinja_parse(const char *source, size_t len,
                              sp_jinja_template **out, spindle_error *err);
void sp_jinja_free(sp_jinja_template *tpl);

/* Render with the top-level variables of `context` (a JSON object; NULL for
 * none). `limits` may be NULL for the defaults. `*out` is NUL-terminated
 * and released with free(); `out_len` may be NULL. */
spindle_status sp_jinja_render(const sp_jinja_template *tpl,
                               const cJSON *context,
                               const sp_jinja_limits *limits, char **out,
                               size_t *out_len, spindle_error *err);

/* cJSON keeps no difference between 1 and 1.0, which Python prints
 * differently; numbers written with a fraction or exponent carry this bit
 * in their cJSON type when parsed with sp_json_parse (cJSON's own type tests
 * ignore it, cJSON_Duplicate keeps it). Other numbers are ints when
 * integral. */
#define SP_JSON_FLOAT_FLAG (1 << 12)

/* cJSON_Parse plus SP_JSON_FLOAT_FLAG marks. NULL when invalid. */
cJSON *sp_json_parse(const char *text);

/* Build the variables apply_chat_template passes for one conversation:
 * special tokens (may be NULL), messages normalized as transformers does
 * (keys whose value is null dropped, reasoning fields aliased), tools,
 * documents, add_generation_prompt, then `extra` (an object or NULL) whose
 * keys override everything else. Returns a new cJSON object or NULL with
 * `err` filled. */
typedef struct sp_chat_special_tokens {
    const char *bos, *eos, *unk, *sep, *pad, *cls, *mask;
} sp_chat_special_tokens;

cJSON *sp_chat_build_context(const cJSON *messages, const cJSON *tools,
                             const cJSON *documents,
                             bool add_generation_prompt,
                             const cJSON *extra,
                             const sp_chat_special_tokens *special,
                             spindle_error *err);

#endif
