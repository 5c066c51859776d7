/* spindle_chat_render: the tokenizer's chat template rendered with the
 * variables apply_chat_template would give it (see chat_context.c). */
#include <string.h>

#include "base/error.h"
#include "template/jinja.h"
#include "tokenizer/tokenizer.h"

static cJSON *parse_arg(const char *json, const char *what, spindle_error *err) {
    if (!json) return NULL;
    cJSON *j = sp_json_parse(json);
    if (!j) sp_fail(err, SPINDLE_ERR_ARGUMENT, "%s is not valid JSON", what);
    return j;
}

spindle_status spindle_chat_render(const spindle_tokenizer *tok, const char *messages_json,
                                   const char *tools_json, bool add_generation_prompt,
                                   const char *extra_vars_json, const char *template_name,
                                   char **out, spindle_error *err) {
    if (out) *out = NULL;
    if (!tok || !messages_json || !out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "spindle_chat_render: missing argument");
    const char *source = sp_tokenizer_chat_template(tok, template_name);
    if (!source) {
        if (template_name)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT, "the tokenizer has no chat template named '%s'",
                           template_name);
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "the tokenizer has no chat template");
    }
    cJSON *messages = parse_arg(messages_json, "messages", err);
    if (!messages) return SPINDLE_ERR_ARGUMENT;
    cJSON *tools = NULL, *extra = NULL;
    if (tools_json && !(tools = parse_arg(tools_json, "tools", err))) {
        cJSON_Delete(messages);
        return SPINDLE_ERR_ARGUMENT;
    }
    if (extra_vars_json && !(extra = parse_arg(extra_vars_json, "extra template variables", err))) {
        cJSON_Delete(messages);
        cJSON_Delete(tools);
        return SPINDLE_ERR_ARGUMENT;
    }
    sp_chat_special_tokens special = {
        .bos = sp_tokenizer_config_string(tok, "bos_token"),
        .eos = sp_tokenizer_config_string(tok, "eos_token"),
        .unk = sp_tokenizer_config_string(tok, "unk_token"),
        .sep = sp_tokenizer_config_string(tok, "sep_token"),
        .pad = sp_tokenizer_config_string(tok, "pad_token"),
        .cls = sp_tokenizer_config_string(tok, "cls_token"),
        .mask = sp_tokenizer_config_string(tok, "mask_token"),
    };
    cJSON *ctx = sp_chat_build_context(messages, tools, NULL, add_generation_prompt, extra,
                                       &special, err);
    cJSON_Delete(messages);
    cJSON_Delete(tools);
    cJSON_Delete(extra);
    if (!ctx) return err ? err->status : SPINDLE_ERR_ARGUMENT;
    sp_jinja_template *tpl = NULL;
    spindle_status st = sp_jinja_parse(source, strlen(source), &tpl, err);
    if (st == SPINDLE_OK) st = sp_jinja_render(tpl, ctx, NULL, out, NULL, err);
    sp_jinja_free(tpl);
    cJSON_Delete(ctx);
    return st;
}
