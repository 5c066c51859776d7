/* --chat-template FILE|NAME and --chat-template-kwargs JSON, shared by
 * `spindle run`, `spindle chat` and `spindle serve`. */
#ifndef SP_CLI_CHAT_TEMPLATE_ARGS_H
#define SP_CLI_CHAT_TEMPLATE_ARGS_H

#include "spindle.h"

#define SP_ARG_CHAT_TEMPLATE_HELP \
    "  --chat-template FILE|NAME  chat template in place of the model's: a\n" \
    "                          built-in by llama.cpp's name (chatml, llama3,\n" \
    "                          gemma, mistral-v7, phi3, zephyr, ...), else a\n" \
    "                          Jinja file\n" \
    "  --chat-template-kwargs JSON  template variables, a JSON object (e.g.\n" \
    "                          '{\"enable_thinking\": false}')\n"

typedef struct sp_chat_template_args {
    const char *name_or_path;   /* NULL: the model's template */
    const char *kwargs;         /* JSON object text, checked; NULL: none */
} sp_chat_template_args;

/* Parse argv[*i] when it is one of the two options (advancing *i): 1
 * parsed, 0 not one of them, -1 a usage error (printed: a value missing,
 * or kwargs that are not a JSON object). */
int sp_arg_chat_template(int argc, char **argv, int *i, sp_chat_template_args *t);

/* Put --chat-template's template on `tok` (a no-op without one); when
 * `needed`, fail if `tok` then has none, naming the option. */
spindle_status sp_chat_template_use(const sp_chat_template_args *t, spindle_tokenizer *tok,
                                    bool needed, spindle_error *err);
/* That failure: SPINDLE_ERR_UNSUPPORTED with the message in *err. */
spindle_status sp_chat_template_missing(spindle_error *err);

#endif
