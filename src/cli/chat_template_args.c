#include "cli/chat_template_args.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"

int sp_arg_chat_template(int argc, char **argv, int *i, sp_chat_template_args *t) {
    const char *a = argv[*i], *v;
    const bool kwargs = !strcmp(a, "--chat-template-kwargs");
    if (!kwargs && strcmp(a, "--chat-template") != 0) return 0;
    if (!(v = sp_arg_value(argc, argv, i))) return -1;
    if (!kwargs) {
        t->name_or_path = v;
        return 1;
    }
    cJSON *j = cJSON_Parse(v);
    bool object = cJSON_IsObject(j);
    cJSON_Delete(j);
    if (!object) {
        fprintf(stderr, "spindle: --chat-template-kwargs expects a JSON object, got '%s'\n", v);
        return -1;
    }
    t->kwargs = v;
    return 1;
}

spindle_status sp_chat_template_missing(spindle_error *err) {
    if (err) {
        err->status = SPINDLE_ERR_UNSUPPORTED;
        snprintf(err->message, sizeof err->message,
                 "the model has no chat template: give one with --chat-template FILE|NAME "
                 "(a Jinja file, or a built-in name such as chatml)");
    }
    return SPINDLE_ERR_UNSUPPORTED;
}

spindle_status sp_chat_template_use(const sp_chat_template_args *t, spindle_tokenizer *tok,
                                    bool needed, spindle_error *err) {
    spindle_status st = t->name_or_path
                            ? spindle_tokenizer_set_chat_template(tok, t->name_or_path, err)
                            : SPINDLE_OK;
    if (!st && needed && !spindle_tokenizer_has_chat_template(tok))
        st = sp_chat_template_missing(err);
    return st;
}
