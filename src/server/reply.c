/* A chat job's structured reply (reply.h). */
#include "server/reply.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

void sp_reply_detect_format(sp_server *s) {
    char *text = NULL;
    spindle_error err = {0};
    if (spindle_chat_render(s->tok, sp_tool_probe_messages, sp_tool_probe_tools, false, NULL,
                            NULL, &text, &err) != SPINDLE_OK)
        text = NULL;
    s->tool_format = sp_tool_format_detect(text);
    spindle_free(text);
    int32_t *ids = NULL;
    size_t n = 0;
    s->think_token = spindle_tokenizer_encode(s->tok, "<think>", 7, false, &ids, &n, NULL) ==
                         SPINDLE_OK && n == 1;
    spindle_free(ids);
}

/* The server's kwargs with the request's laid over them, as JSON text
 * (malloc'd), or NULL when neither has any; *oom on failure. */
static char *merged_kwargs(const char *server, const char *request, bool *oom) {
    *oom = false;
    if (!server || !request) {
        const char *only = server ? server : request;
        char *copy = only ? strdup(only) : NULL;
        *oom = only && !copy;
        return copy;
    }
    cJSON *base = cJSON_Parse(server), *over = cJSON_Parse(request), *it;
    char *out = NULL;
    if (cJSON_IsObject(base) && cJSON_IsObject(over)) {
        cJSON_ArrayForEach(it, over) {
            cJSON *copy = cJSON_Duplicate(it, true);
            if (!copy) break;
            cJSON_DeleteItemFromObjectCaseSensitive(base, it->string);
            cJSON_AddItemToObject(base, it->string, copy);
        }
        out = cJSON_PrintUnformatted(base);
    }
    cJSON_Delete(base);
    cJSON_Delete(over);
    *oom = !out;
    return out;
}

bool sp_reply_render_chat(const sp_server *s, const sp_api_request *r, char **text,
                          sp_api_error *e) {
    *text = NULL;
    if (!spindle_tokenizer_has_chat_template(s->tok))
        return sp_api_bad(e, "messages", "the model has no chat template: start the server "
                          "with --chat-template FILE|NAME (a Jinja file, or a built-in "
                          "name such as chatml)");
    bool oom;
    char *kwargs = merged_kwargs(s->opts.chat_template_kwargs, r->template_kwargs_json, &oom);
    if (oom) return sp_api_fail(e, 503, "server_error", NULL, NULL, "out of memory");
    spindle_error err = {0};
    spindle_status st = spindle_chat_render(s->tok, r->messages_json, r->tools_json, true,
                                            kwargs, NULL, text, &err);
    free(kwargs);
    if (st) sp_api_error_from_status(e, st, "messages", err.message);
    return st == SPINDLE_OK;
}

bool sp_reply_opens_think(const char *prompt) {
    size_t n = prompt ? strlen(prompt) : 0;
    while (n && strchr(" \n\r\t", prompt[n - 1])) n--;
    return n >= 7 && memcmp(prompt + n - 7, "<think>", 7) == 0;
}

void sp_job_reply_plan(const sp_server *s, const sp_api_request *r, const char *prompt,
                       uint64_t seed, sp_job_reply *jr) {
    memset(jr, 0, sizeof *jr);
    if (r->kind != SP_API_CHAT) return;
    const sp_api_tool_choice *c = &r->tool_choice;
    bool harmony = s->tool_format == SP_TOOLS_HARMONY;
    bool tools = r->tools_json && strcmp(r->tools_json, "[]") != 0 &&
                 c->kind != SP_TOOL_CHOICE_NONE;
    bool reasoning = !c->no_reasoning && (harmony || s->think_token);
    sp_reply_options opt = {.format = s->tool_format, .tools = tools, .reasoning = reasoning,
                            .starts_in_reasoning = reasoning && sp_reply_opens_think(prompt),
                            .single_call = c->single_call,
                            .calls_only = sp_server_tool_grammar_applies(s, r),
                            .call_id_prefix =
                                r->dialect == SP_API_ANTHROPIC ? "toolu_" : NULL};
    jr->structured = tools || reasoning;
    jr->keep_special = jr->structured && sp_tool_format_needs_special(s->tool_format) &&
                       (tools || harmony);
    sp_reply_cursor_init(&jr->stream, &opt, seed);
    const char *script = sp_server_scripted_reply(prompt);
    size_t n = 0;
    if (script && spindle_tokenizer_encode(s->tok, script, strlen(script), false, &jr->script,
                                           &n, NULL) == SPINDLE_OK)
        jr->n_script = (int)n;
}

__attribute__((weak)) const char *sp_server_scripted_reply(const char *prompt) {
    (void)prompt;
    return NULL;
}

int32_t sp_job_reply_token(sp_job_reply *jr, int32_t id, bool *last) {
    *last = false;
    if (!jr->script || jr->script_at >= jr->n_script) return id;
    *last = jr->script_at + 1 == jr->n_script;
    return jr->script[jr->script_at++];
}

bool sp_job_reply_hides(const sp_server *s, const sp_job_reply *jr, int32_t id) {
    return jr->keep_special && sp_server_is_end_token(s, id);
}

bool sp_server_is_end_token(const sp_server *s, int32_t id) {
    for (int k = 0; k < s->n_stop_ids; k++)
        if (s->stop_ids[k] == id) return true;
    const int32_t *eos = NULL;
    int n = spindle_model_eos_ids(s->model, &eos);
    for (int k = 0; k < n; k++)
        if (eos[k] == id) return true;
    return false;
}

bool sp_job_reply_next(sp_job_reply *jr, const char *text, size_t len, bool final,
                       sp_reply_delta *rd, sp_api_delta *d) {
    if (!sp_reply_cursor_next(&jr->stream, text, len, final, rd)) return false;
    d->text = rd->content;
    d->len = rd->content_len;
    d->reasoning = rd->reasoning;
    d->reasoning_len = rd->reasoning_len;
    d->tool_calls = rd->tools;
    d->n_tool_calls = rd->n_tools;
    if (rd->n_tools) jr->any_call = true;
    return true;
}

void sp_job_reply_free(sp_job_reply *jr) {
    sp_reply_cursor_free(&jr->stream);
    spindle_free(jr->script);
}
