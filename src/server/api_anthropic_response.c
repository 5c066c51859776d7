/* Anthropic's message, stream events and error object (api_anthropic.h). */
#include "server/api_anthropic.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

enum { ANTHROPIC_BLOCK_TEXT = 1, ANTHROPIC_BLOCK_THINKING, ANTHROPIC_BLOCK_TOOL };

const char *sp_anthropic_error_type(int status) {
    switch (status) {
    case 400: case 405: case 409: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
    }
}

static cJSON *error_object(const sp_api_error *e) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "type", "error");
    cJSON *o = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(o, "type", sp_anthropic_error_type(e->http_status));
    cJSON_AddStringToObject(o, "message", e->message);
    return root;
}

static char *print_and_free(cJSON *o) {
    char *json = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return json;
}

char *sp_anthropic_error_json(const sp_api_error *e) { return print_and_free(error_object(e)); }

/* `event: NAME\ndata: {...}\n\n`. */
static void add_event(sp_strbuf *out, const char *name, cJSON *o) {
    char *json = print_and_free(o);
    if (!json) {
        out->oom = true;
        return;
    }
    sp_strbuf_printf(out, "event: %s\ndata: %s\n\n", name, json);
    free(json);
}

void sp_anthropic_error_event(sp_strbuf *out, const sp_api_error *e) {
    add_event(out, "error", error_object(e));
}

static void add_span(cJSON *o, const char *key, const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return;
    if (n) memcpy(s, p, n);
    s[n] = '\0';
    cJSON_AddStringToObject(o, key, s);
    free(s);
}

/* Anthropic counts input_tokens without the tokens read from the cache. */
static cJSON *usage_object(const sp_api_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", u->prompt_tokens - u->cached_tokens);
    cJSON_AddNumberToObject(o, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(o, "cache_read_input_tokens", u->cached_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", u->completion_tokens);
    return o;
}

static void add_stop(cJSON *o, sp_anthropic_stop stop) {
    if (stop.reason) cJSON_AddStringToObject(o, "stop_reason", stop.reason);
    else cJSON_AddNullToObject(o, "stop_reason");
    if (stop.sequence) cJSON_AddStringToObject(o, "stop_sequence", stop.sequence);
    else cJSON_AddNullToObject(o, "stop_sequence");
}

static cJSON *message_object(const sp_api_head *h, const sp_api_usage *u,
                             sp_anthropic_stop stop) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", h->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddStringToObject(m, "model", h->model);
    add_stop(m, stop);
    cJSON_AddItemToObject(m, "usage", usage_object(u));
    return m;
}

/* A tool_use block; its input is the arguments' JSON object (a call whose
 * arguments are not one gets an empty input). */
static cJSON *tool_use_block(const sp_tool_delta *t, const char *args, bool whole) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", t->id ? t->id : "");
    cJSON_AddStringToObject(b, "name", t->name ? t->name : "");
    cJSON *input = whole && args ? cJSON_Parse(args) : NULL;
    if (!cJSON_IsObject(input)) {
        cJSON_Delete(input);
        input = cJSON_CreateObject();
    }
    cJSON_AddItemToObject(b, "input", input);
    return b;
}

static void add_tool_blocks(cJSON *content, const sp_tool_delta *t, int n) {
    sp_strbuf args = {0};
    for (int k = 0; k < n; k++) {
        sp_strbuf_add(&args, t[k].arguments, t[k].arguments_len);
        if (k + 1 < n && !t[k + 1].name) continue;   /* more of this call */
        int first = k;
        while (first > 0 && !t[first].name) first--;
        sp_strbuf_add(&args, "", 1);   /* NUL-terminate */
        cJSON_AddItemToArray(content, tool_use_block(&t[first], args.p, true));
        args.len = 0;
    }
    sp_strbuf_free(&args);
}

char *sp_anthropic_message_json(const sp_api_head *h, const sp_api_delta *d,
                                const sp_api_usage *u, sp_anthropic_stop stop) {
    cJSON *m = message_object(h, u, stop);
    cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (d->reasoning_len) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        add_span(b, "thinking", d->reasoning, d->reasoning_len);
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if (d->len || !d->n_tool_calls) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        add_span(b, "text", d->text, d->len);
        cJSON_AddItemToArray(content, b);
    }
    add_tool_blocks(content, d->tool_calls, d->n_tool_calls);
    return print_and_free(m);
}

/* ------------------------------------------------------------ streaming */

/* Anthropic sends its ping after the first content_block_start (or
 * before message_delta when there is no block). */
static void ping_once(sp_strbuf *out, sp_anthropic_stream *st) {
    if (st->pinged) return;
    st->pinged = true;
    cJSON *ping = cJSON_CreateObject();
    cJSON_AddStringToObject(ping, "type", "ping");
    add_event(out, "ping", ping);
}

static void close_block(sp_strbuf *out, sp_anthropic_stream *st) {
    if (!st->open) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "content_block_stop");
    cJSON_AddNumberToObject(o, "index", st->n_blocks - 1);
    add_event(out, "content_block_stop", o);
    st->open = 0;
}

/* content_block_start of a new block of `kind` (`block` its initial
 * object), the open one closed first. */
static void open_block(sp_strbuf *out, sp_anthropic_stream *st, int kind, cJSON *block) {
    close_block(out, st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "content_block_start");
    cJSON_AddNumberToObject(o, "index", st->n_blocks++);
    cJSON_AddItemToObject(o, "content_block", block);
    add_event(out, "content_block_start", o);
    st->open = kind;
    ping_once(out, st);
}

static void open_text_like(sp_strbuf *out, sp_anthropic_stream *st, int kind) {
    if (st->open == kind) return;
    cJSON *b = cJSON_CreateObject();
    bool text = kind == ANTHROPIC_BLOCK_TEXT;
    cJSON_AddStringToObject(b, "type", text ? "text" : "thinking");
    cJSON_AddStringToObject(b, text ? "text" : "thinking", "");
    if (!text) cJSON_AddStringToObject(b, "signature", "");
    open_block(out, st, kind, b);
}

static void block_delta(sp_strbuf *out, const sp_anthropic_stream *st, const char *type,
                        const char *key, const char *p, size_t n) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "content_block_delta");
    cJSON_AddNumberToObject(o, "index", st->n_blocks - 1);
    cJSON *d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", type);
    add_span(d, key, p, n);
    add_event(out, "content_block_delta", o);
}

void sp_anthropic_start_events(sp_strbuf *out, sp_anthropic_stream *st, const sp_api_head *h,
                               const sp_api_usage *u, bool text_block) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "message_start");
    cJSON_AddItemToObject(o, "message", message_object(h, u, (sp_anthropic_stop){0}));
    add_event(out, "message_start", o);
    if (text_block) open_text_like(out, st, ANTHROPIC_BLOCK_TEXT);
}

void sp_anthropic_delta_events(sp_strbuf *out, sp_anthropic_stream *st, const sp_api_delta *d) {
    if (d->reasoning_len) {
        open_text_like(out, st, ANTHROPIC_BLOCK_THINKING);
        block_delta(out, st, "thinking_delta", "thinking", d->reasoning, d->reasoning_len);
    }
    if (d->len) {
        open_text_like(out, st, ANTHROPIC_BLOCK_TEXT);
        block_delta(out, st, "text_delta", "text", d->text, d->len);
    }
    for (int k = 0; k < d->n_tool_calls; k++) {
        const sp_tool_delta *t = &d->tool_calls[k];
        if (t->name || st->open != ANTHROPIC_BLOCK_TOOL || st->tool_index != t->index) {
            open_block(out, st, ANTHROPIC_BLOCK_TOOL, tool_use_block(t, NULL, false));
            st->tool_index = t->index;
        }
        if (t->arguments_len)
            block_delta(out, st, "input_json_delta", "partial_json", t->arguments,
                        t->arguments_len);
    }
}

void sp_anthropic_end_events(sp_strbuf *out, sp_anthropic_stream *st, sp_anthropic_stop stop,
                             const sp_api_usage *u) {
    close_block(out, st);
    ping_once(out, st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "message_delta");
    add_stop(cJSON_AddObjectToObject(o, "delta"), stop);
    cJSON_AddItemToObject(o, "usage", usage_object(u));
    add_event(out, "message_delta", o);
    cJSON *end = cJSON_CreateObject();
    cJSON_AddStringToObject(end, "type", "message_stop");
    add_event(out, "message_stop", end);
}
