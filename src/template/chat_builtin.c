/* Built-in chat templates by llama.cpp's names (llama-server's
 * --chat-template NAME), and replacing a tokenizer's template with one of
 * them or with a Jinja file.
 *
 * Each built-in renders exactly the text llama.cpp's llm_chat_apply_template
 * writes for that name; llama.cpp then tokenizes it with the vocabulary's
 * BOS added, so a built-in starts with {{ bos_token }} when the tokenizer
 * adds one (Spindle tokenizes a rendered chat with no special tokens added,
 * as transformers does, because real templates write their own BOS). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mapped_file.h"
#include "template/jinja.h"
#include "tokenizer/tokenizer.h"

#define GEN_PROMPT(text) "{%- if add_generation_prompt -%}{{ '" text "' }}{%- endif -%}"
#define EACH(body) "{%- for message in messages -%}" body "{%- endfor -%}"

/* <|im_start|>ROLE SEP CONTENT <|im_end|> END: chatml and phi4. */
#define IM_TURNS(sep, end)                                                       \
    EACH("{{ '<|im_start|>' + message.role + '" sep "' + message.content + "    \
         "'<|im_end|>" end "' }}")                                               \
    GEN_PROMPT("<|im_start|>assistant" sep)

/* <|ROLE|>\nCONTENT END: phi3, zephyr, falcon3. */
#define BAR_TURNS(end)                                                           \
    EACH("{{ '<|' + message.role + '|>\\n' + message.content + '" end "' }}")    \
    GEN_PROMPT("<|assistant|>\\n")

/* Mistral v7: [SYSTEM_PROMPT] / [INST] markers, SP after each opening. */
#define MISTRAL_V7(sp)                                                           \
    EACH("{%- if message.role == 'system' -%}"                                   \
         "{{ '[SYSTEM_PROMPT]" sp "' + message.content + '[/SYSTEM_PROMPT]' }}"  \
         "{%- elif message.role == 'user' -%}"                                   \
         "{{ '[INST]" sp "' + message.content + '[/INST]' }}"                    \
         "{%- else -%}{{ '" sp "' + message.content + '</s>' }}{%- endif -%}")

/* Mistral v1/v3: one [INST] per turn, the system text inside it. LEAD before
 * [INST] and [/INST], TRAIL after [INST] and before the answer, ANSWER the
 * assistant content expression. */
#define MISTRAL_V1_V3(lead, trail, answer)                                       \
    "{%- set ns = namespace(inside=false) -%}"                                   \
    EACH("{%- if not ns.inside -%}{{ '" lead "[INST]" trail "' }}"               \
         "{%- set ns.inside = true -%}{%- endif -%}"                             \
         "{%- if message.role == 'system' -%}{{ message.content + '\\n\\n' }}"   \
         "{%- elif message.role == 'user' -%}"                                   \
         "{{ message.content + '" lead "[/INST]' }}"                             \
         "{%- else -%}{{ '" trail "' + " answer " + '</s>' }}"                   \
         "{%- set ns.inside = false -%}{%- endif -%}")

/* Llama 2: CONTENT the content expression, SYS how a system message is
 * written, REOPEN what opens each later turn. */
#define LLAMA2(content, sys, reopen)                                             \
    "{%- set ns = namespace(inside=true) -%}{{ '[INST] ' }}"                     \
    EACH("{%- set c = " content " -%}"                                           \
         "{%- if not ns.inside -%}{%- set ns.inside = true -%}"                  \
         "{{ '" reopen "' }}{%- endif -%}"                                       \
         "{%- if message.role == 'system' -%}{{ " sys " }}"                      \
         "{%- elif message.role == 'user' -%}{{ c + ' [/INST]' }}"               \
         "{%- else -%}{{ c + '</s>' }}{%- set ns.inside = false -%}{%- endif -%}")
#define LLAMA2_SYS "'<<SYS>>\\n' + c + '\\n<</SYS>>\\n\\n'"

static const struct {
    const char *name, *source;
} builtins[] = {
    {"chatml", IM_TURNS("\\n", "\\n")},
    {"llama2", LLAMA2("message.content", "c + '\\n'", "[INST] ")},
    {"llama2-sys", LLAMA2("message.content", LLAMA2_SYS, "[INST] ")},
    {"llama2-sys-bos", LLAMA2("message.content", LLAMA2_SYS, "<s>[INST] ")},
    {"llama2-sys-strip", LLAMA2("message.content | trim", LLAMA2_SYS, "[INST] ")},
    {"mistral-v1", MISTRAL_V1_V3(" ", " ", "message.content")},
    {"mistral-v3", MISTRAL_V1_V3("", " ", "message.content | trim")},
    {"mistral-v3-tekken", MISTRAL_V1_V3("", "", "message.content")},
    {"mistral-v7", MISTRAL_V7(" ")},
    {"mistral-v7-tekken", MISTRAL_V7("")},
    {"phi3", BAR_TURNS("<|end|>\\n")},
    {"phi4", IM_TURNS("<|im_sep|>", "")},
    {"falcon3", BAR_TURNS("\\n")},
    {"zephyr", BAR_TURNS("<|endoftext|>\\n")},
    {"gemma",
     /* System messages (trimmed, joined) open the next user turn. */
     "{%- set ns = namespace(system='') -%}"
     EACH("{%- if message.role == 'system' -%}"
          "{%- set ns.system = ns.system + message.content | trim -%}"
          "{%- else -%}"
          "{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
          "{{ '<start_of_turn>' + role + '\\n' }}"
          "{%- if ns.system and role != 'model' -%}{{ ns.system + '\\n\\n' }}"
          "{%- set ns.system = '' -%}{%- endif -%}"
          "{{ message.content | trim + '<end_of_turn>\\n' }}{%- endif -%}")
     GEN_PROMPT("<start_of_turn>model\\n")},
    {"llama3",
     EACH("{{ '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + "
          "message.content | trim + '<|eot_id|>' }}")
     GEN_PROMPT("<|start_header_id|>assistant<|end_header_id|>\\n\\n")},
    {"deepseek3",
     EACH("{%- if message.role == 'system' -%}{{ message.content + '\\n\\n' }}"
          "{%- elif message.role == 'user' -%}{{ '<\xef\xbd\x9cUser\xef\xbd\x9c>' + message.content }}"
          "{%- elif message.role == 'assistant' -%}{{ '<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>' + "
          "message.content + '<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>' }}"
          "{%- endif -%}")
     GEN_PROMPT("<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>")},
};

#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

const char *spindle_chat_template_builtin(const char *name) {
    for (size_t i = 0; name && i < N_BUILTINS; i++)
        if (!strcmp(builtins[i].name, name)) return builtins[i].source;
    return NULL;
}

const char *spindle_chat_template_builtin_name(size_t i) {
    return i < N_BUILTINS ? builtins[i].name : NULL;
}

/* Whether encoding with special tokens puts the BOS first. */
static bool adds_bos(const spindle_tokenizer *tok) {
    int32_t bos = spindle_tokenizer_bos_id(tok), *ids = NULL;
    size_t n = 0;
    bool adds = bos >= 0 && !spindle_tokenizer_encode(tok, "", 0, true, &ids, &n, NULL) &&
                n > 0 && ids[0] == bos;
    spindle_free(ids);
    return adds;
}

static void builtin_names(char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < N_BUILTINS && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s", i ? ", " : "",
                                 builtins[i].name);
}

spindle_status spindle_tokenizer_set_chat_template(spindle_tokenizer *tok,
                                                   const char *name_or_path,
                                                   spindle_error *err) {
    if (!tok || !name_or_path || !*name_or_path)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "chat template: missing argument");
    const char *builtin = spindle_chat_template_builtin(name_or_path);
    char *source = NULL;
    if (builtin) {
        const char *bos = adds_bos(tok) ? "{{ bos_token }}" : "";
        size_t n = strlen(bos) + strlen(builtin) + 1;
        if (!(source = malloc(n))) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        snprintf(source, n, "%s%s", bos, builtin);
    } else if (sp_file_exists(name_or_path)) {
        size_t len;
        spindle_status st = sp_read_text_file(name_or_path, &source, &len, err);
        if (st) return st;
    } else {
        char names[512];
        builtin_names(names, sizeof names);
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "chat template '%s' is neither a file nor a built-in template (%s)",
                       name_or_path, names);
    }
    /* Parse now, so that a broken file fails at start, not on a request. */
    sp_jinja_template *tpl = NULL;
    spindle_status st = sp_jinja_parse(source, strlen(source), &tpl, err);
    sp_jinja_free(tpl);
    if (st) {
        free(source);
        return st;
    }
    sp_tokenizer_set_chat_template_source(tok, source);
    return SPINDLE_OK;
}

bool spindle_tokenizer_has_chat_template(const spindle_tokenizer *tok) {
    return sp_tokenizer_chat_template(tok, NULL) != NULL;
}
