/* spindle/tokenizer.h: tokenizers, streaming detokenizers and chat
 * templates. Part of the public API: include "spindle.h", whose opening
 * comment states the conventions every call here follows. */
#ifndef SPINDLE_TOKENIZER_H
#define SPINDLE_TOKENIZER_H

#include "spindle/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- tokenizer */

typedef struct spindle_tokenizer spindle_tokenizer;

/* `path`: a directory holding tokenizer.json (+ tokenizer_config.json,
 * optionally chat_template.jinja), or a model directory / repo id; or a
 * .gguf file (or a directory with one .gguf and no tokenizer.json), whose
 * tokenizer.ggml.* metadata gives llama.cpp's tokenizer: encode is
 * llama_tokenize with parse_special=true and add_special as given, decode
 * llama_detokenize (skip_special: remove_special and no unparse_special). */
spindle_status spindle_tokenizer_load(const char *path,
                                      spindle_tokenizer **out,
                                      spindle_error *err);
/* Thread-safety: every call below that takes a `const spindle_tokenizer *`
 * may run concurrently on one tokenizer (its caches are locked);
 * spindle_tokenizer_free must not overlap any of them, nor outlive a
 * detokenizer made from the tokenizer. */
void spindle_tokenizer_free(spindle_tokenizer *tok);

/* Encode UTF-8 text. add_special: add BOS/EOS etc. per the post-processor
 * (HF `add_special_tokens=True`). */
spindle_status spindle_tokenizer_encode(const spindle_tokenizer *tok,
                                        const char *text, size_t len,
                                        bool add_special, int32_t **ids,
                                        size_t *n_ids, spindle_error *err);
/* Decode ids to UTF-8 text (NUL-terminated). */
spindle_status spindle_tokenizer_decode(const spindle_tokenizer *tok,
                                        const int32_t *ids, size_t n_ids,
                                        bool skip_special, char **text,
                                        size_t *len, spindle_error *err);
int spindle_tokenizer_vocab_size(const spindle_tokenizer *tok);
/* -1 when the tokenizer has none. */
int32_t spindle_tokenizer_bos_id(const spindle_tokenizer *tok);
int32_t spindle_tokenizer_eos_id(const spindle_tokenizer *tok);
/* The text of a token id (raw vocabulary form), or NULL when the id is out
 * of range or tok is NULL. Owned by the tokenizer, valid until it is
 * freed. */
const char *spindle_tokenizer_id_to_token(const spindle_tokenizer *tok,
                                          int32_t id);

/* Streaming detokenizer: feed ids one at a time, receive the text that is
 * now final. Pieces never split a UTF-8 sequence and concatenate to exactly
 * the full decode. It borrows the tokenizer (free it first); one thread at
 * a time per detokenizer. */
typedef struct spindle_detokenizer spindle_detokenizer;

spindle_status spindle_detokenizer_new(const spindle_tokenizer *tok,
                                       bool skip_special,
                                       spindle_detokenizer **out,
                                       spindle_error *err);
void spindle_detokenizer_free(spindle_detokenizer *detok);
/* `*piece` (NUL-terminated, possibly empty) is owned by the detokenizer and
 * stays valid until its next push, flush or free. */
spindle_status spindle_detokenizer_push(spindle_detokenizer *detok,
                                        int32_t id, const char **piece,
                                        spindle_error *err);
/* Text still held back at the end of the stream; *piece as for push. */
spindle_status spindle_detokenizer_flush(spindle_detokenizer *detok,
                                         const char **piece,
                                         spindle_error *err);

/* Byte length of the piece last returned by spindle_detokenizer_push or
 * spindle_detokenizer_flush on `detok`: a decoded U+0000 ends the
 * NUL-terminated view early, this length does not. 0 for NULL. Same thread
 * rules as the detokenizer itself (one thread at a time per handle). */
size_t spindle_detokenizer_piece_len(const spindle_detokenizer *detok);

/* ------------------------------------------------------------ chat template */

/* Render the tokenizer's chat template. JSON arguments are UTF-8 JSON text:
 * messages (array), tools (array or NULL), extra_vars (object of extra
 * template variables such as {"enable_thinking": false}, or NULL).
 * `template_name` selects one of several named templates (NULL: default).
 * The text goes to *out (free with spindle_free). Thread-safe on a shared
 * tokenizer. */
spindle_status spindle_chat_render(const spindle_tokenizer *tok,
                                   const char *messages_json,
                                   const char *tools_json,
                                   bool add_generation_prompt,
                                   const char *extra_vars_json,
                                   const char *template_name, char **out,
                                   spindle_error *err);

/* Replace the tokenizer's default chat template (the one
 * spindle_chat_render uses when `template_name` is NULL): `name_or_path`
 * is the name of a built-in template (llama.cpp's names, as llama-server's
 * --chat-template takes them: "chatml", "llama3", "gemma", "mistral-v7",
 * "phi3", "zephyr", ...; each renders the text llama.cpp's formatter of that
 * name writes, after the BOS when the tokenizer adds one), else the path of
 * a Jinja file. The template is parsed here, so a broken one fails now.
 * Not thread-safe: call it before the tokenizer is shared or rendered
 * from. */
spindle_status spindle_tokenizer_set_chat_template(spindle_tokenizer *tok,
                                                   const char *name_or_path,
                                                   spindle_error *err);
/* The Jinja source of built-in template `name`, or NULL (no BOS: see
 * above). Thread-safe. */
const char *spindle_chat_template_builtin(const char *name);
/* The i-th built-in template's name, NULL past the last. Thread-safe. */
const char *spindle_chat_template_builtin_name(size_t i);
/* Whether spindle_chat_render has a default template to render. Same
 * thread rules as spindle_chat_render. */
bool spindle_tokenizer_has_chat_template(const spindle_tokenizer *tok);



#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_TOKENIZER_H */
