/* OpenAI's response, streaming chunk, usage, logprobs and error objects
 * (api_response.h). */
#include "server/api_response.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

char *sp_api_error_json(const sp_api_error *e) {
    cJSON *root = cJSON_CreateObject();
    cJSON *o = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (e->code[0]) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNullToObject(o, "code");
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return json;
}

/* A token's text (special tokens spelled out) and its UTF-8 bytes. */
static char *token_text(const spindle_tokenizer *tok, int32_t id) {
    char *text = NULL;
    size_t len = 0;
    if (spindle_tokenizer_decode(tok, &id, 1, false, &text, &len, NULL) != SPINDLE_OK)
        return NULL;
    return text;
}

static cJSON *bytes_array(const char *s) {
    cJSON *a = cJSON_CreateArray();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(*p));
    return a;
}

/* {"token", "logprob", "bytes"} of one id. */
static cJSON *chat_token(const spindle_tokenizer *tok, int32_t id, float logprob) {
    char *text = token_text(tok, id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", text ? text : "");
    cJSON_AddNumberToObject(o, "logprob", logprob);
    cJSON_AddItemToObject(o, "bytes", bytes_array(text ? text : ""));
    spindle_free(text);
    return o;
}

/* chat: {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null} */
static cJSON *chat_logprobs(const sp_api_delta *d, const spindle_tokenizer *tok) {
    cJSON *root = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(root, "content");
    for (int i = 0; i < d->n_logprobs; i++) {
        const sp_api_logprob *lp = &d->logprobs[i];
        cJSON *o = chat_token(tok, lp->token, lp->logprob);
        cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int k = 0; k < lp->n_top; k++)
            cJSON_AddItemToArray(top, chat_token(tok, lp->top[k].token, lp->top[k].logprob));
        cJSON_AddItemToArray(content, o);
    }
    cJSON_AddNullToObject(root, "refusal");
    return root;
}

/* completions: {"tokens", "token_logprobs", "top_logprobs": [{text: lp}],
 * "text_offset"} (offsets from the start of the completion text). */
static cJSON *completion_logprobs(const sp_api_delta *d, const spindle_tokenizer *tok) {
    cJSON *root = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(root, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(root, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(root, "top_logprobs");
    cJSON *offsets = cJSON_AddArrayToObject(root, "text_offset");
    size_t offset = 0;
    for (int i = 0; i < d->n_logprobs; i++) {
        const sp_api_logprob *lp = &d->logprobs[i];
        char *text = token_text(tok, lp->token);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(text ? text : ""));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp->logprob));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)offset));
        offset += text ? strlen(text) : 0;
        spindle_free(text);
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < lp->n_top; k++) {
            char *alt = token_text(tok, lp->top[k].token);
            if (alt && !cJSON_GetObjectItemCaseSensitive(top, alt))
                cJSON_AddNumberToObject(top, alt, lp->top[k].logprob);
            spindle_free(alt);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return root;
}

static cJSON *head_object(const sp_api_head *h, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", h->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)h->created);
    cJSON_AddStringToObject(o, "model", h->model);
    cJSON_AddStringToObject(o, "system_fingerprint", SP_API_FINGERPRINT);
    return o;
}

static void add_span(cJSON *o, const char *key, const char *text, size_t len) {
    char *s = malloc(len + 1);
    if (!s) return;
    if (len) memcpy(s, text, len);
    s[len] = '\0';
    cJSON_AddStringToObject(o, key, s);
    free(s);
}

static void add_text(cJSON *o, const char *key, const sp_api_delta *d) {
    add_span(o, key, d->text, d->len);
}

/* delta.tool_calls (each entry as it is) or message.tool_calls (the entries
 * of one index joined: id, type, name and the whole arguments). */
static void sp_api_add_tool_calls(cJSON *m, const sp_tool_delta *t, int n, bool chunk) {
    cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
    cJSON *args = NULL;
    sp_strbuf joined = {0};
    for (int k = 0; k < n; k++) {
        if (chunk || t[k].name) {
            if (args) cJSON_SetValuestring(args, joined.p ? joined.p : "");
            joined.len = 0;
            if (joined.p) joined.p[0] = '\0';
            cJSON *c = cJSON_CreateObject();
            if (chunk) cJSON_AddNumberToObject(c, "index", t[k].index);
            if (t[k].name) {
                cJSON_AddStringToObject(c, "id", t[k].id);
                cJSON_AddStringToObject(c, "type", "function");
            }
            cJSON *f = cJSON_AddObjectToObject(c, "function");
            if (t[k].name) cJSON_AddStringToObject(f, "name", t[k].name);
            if (chunk) add_span(f, "arguments", t[k].arguments, t[k].arguments_len);
            else args = cJSON_AddStringToObject(f, "arguments", "");
            cJSON_AddItemToArray(calls, c);
        }
        if (!chunk) sp_strbuf_add(&joined, t[k].arguments, t[k].arguments_len);
    }
    if (args) cJSON_SetValuestring(args, joined.p ? joined.p : "");
    sp_strbuf_free(&joined);
}

/* One entry of a response's (message) or a chunk's (delta) choices. */
static cJSON *choice(const sp_api_head *h, const sp_api_delta *d, bool chunk, bool role,
                     const spindle_tokenizer *tok) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", d->index);
    if (h->kind == SP_API_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (!chunk || role) cJSON_AddStringToObject(m, "role", "assistant");
        if (!chunk && d->n_tool_calls && !d->len) cJSON_AddNullToObject(m, "content");
        else if (!chunk || role || d->len) add_text(m, "content", d);
        if (d->reasoning_len) add_span(m, "reasoning_content", d->reasoning, d->reasoning_len);
        if (d->n_tool_calls) sp_api_add_tool_calls(m, d->tool_calls, d->n_tool_calls, chunk);
    } else {
        add_text(c, "text", d);
    }
    if (d->want_logprobs && (d->n_logprobs || !chunk))
        cJSON_AddItemToObject(c, "logprobs", h->kind == SP_API_CHAT
                                                 ? chat_logprobs(d, tok)
                                                 : completion_logprobs(d, tok));
    else
        cJSON_AddNullToObject(c, "logprobs");
    if (d->finish_reason) cJSON_AddStringToObject(c, "finish_reason", d->finish_reason);
    else cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

static cJSON *usage_object(const sp_api_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *details = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(details, "cached_tokens", u->cached_tokens);
    return o;
}

char *sp_api_response_json(const sp_api_head *h, const sp_api_delta *d, int n,
                           const sp_api_usage *u, const spindle_tokenizer *tok) {
    cJSON *o = head_object(h, h->kind == SP_API_CHAT ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(choices, choice(h, &d[i], false, false, tok));
    cJSON_AddItemToObject(o, "usage", usage_object(u));
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return json;
}

static void add_event(sp_strbuf *out, cJSON *o) {
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!json) {
        out->oom = true;
        return;
    }
    sp_strbuf_printf(out, "data: %s\n\n", json);
    free(json);
}

static const char *chunk_object(const sp_api_head *h) {
    return h->kind == SP_API_CHAT ? "chat.completion.chunk" : "text_completion";
}

void sp_api_chunk_event(sp_strbuf *out, const sp_api_head *h, const sp_api_delta *d,
                        bool role, bool usage_field, const spindle_tokenizer *tok) {
    cJSON *o = head_object(h, chunk_object(h));
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToArray(choices, choice(h, d, true, role, tok));
    if (usage_field) cJSON_AddNullToObject(o, "usage");
    add_event(out, o);
}

void sp_api_usage_event(sp_strbuf *out, const sp_api_head *h, const sp_api_usage *u) {
    cJSON *o = head_object(h, chunk_object(h));
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_object(u));
    add_event(out, o);
}

void sp_api_error_event(sp_strbuf *out, const sp_api_error *e) {
    char *json = sp_api_error_json(e);
    if (!json) {
        out->oom = true;
        return;
    }
    sp_strbuf_printf(out, "data: %s\n\n", json);
    free(json);
}
