/* The Responses API's response object and stream events (api_responses.h). */
#include "server/api_responses.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RESPONSES_ITEM_REASONING = 1, RESPONSES_ITEM_MESSAGE, RESPONSES_ITEM_CALL };

static void add_span(cJSON *o, const char *key, const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return;
    if (n) memcpy(s, p, n);
    s[n] = '\0';
    cJSON_AddStringToObject(o, key, s);
    free(s);
}

static const char *open_text(const sp_responses_stream *st) {
    return st->text.p ? st->text.p : "";
}

/* `event: TYPE\ndata: {"type", "sequence_number", ...}\n\n` (o freed);
 * nothing without an event buffer. */
static void add_event(sp_strbuf *out, sp_responses_stream *st, const char *type, cJSON *o) {
    if (!out || !o) {
        cJSON_Delete(o);
        if (out && !o) out->oom = true;
        return;
    }
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", (double)st->sequence++);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!json) {
        out->oom = true;
        return;
    }
    sp_strbuf_printf(out, "event: %s\ndata: %s\n\n", type, json);
    free(json);
}

/* {"item_id", "output_index"} of the open item (more added by the caller). */
static cJSON *item_event(const sp_responses_stream *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON *output = cJSON_GetObjectItemCaseSensitive(st->response, "output");
    cJSON_AddStringToObject(o, "item_id", st->item_id);
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(output));
    return o;
}

static cJSON *output_text_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    return p;
}

/* The open item as it stands (its text so far), with `status`. */
static cJSON *open_item(const sp_responses_stream *st, const char *status) {
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "id", st->item_id);
    const char *text = open_text(st);
    if (st->open == RESPONSES_ITEM_REASONING) {
        cJSON_AddStringToObject(item, "type", "reasoning");
        cJSON_AddArrayToObject(item, "summary");
        cJSON *content = cJSON_AddArrayToObject(item, "content");
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "reasoning_text");
        cJSON_AddStringToObject(part, "text", text);
        cJSON_AddItemToArray(content, part);
    } else if (st->open == RESPONSES_ITEM_MESSAGE) {
        cJSON_AddStringToObject(item, "type", "message");
        cJSON_AddStringToObject(item, "role", "assistant");
        cJSON *content = cJSON_AddArrayToObject(item, "content");
        if (strcmp(status, "in_progress")) cJSON_AddItemToArray(content, output_text_part(text));
    } else {
        cJSON_AddStringToObject(item, "type", "function_call");
        cJSON_AddStringToObject(item, "call_id", st->call_id);
        cJSON_AddStringToObject(item, "name", st->call_name ? st->call_name : "");
        cJSON_AddStringToObject(item, "arguments", text);
    }
    cJSON_AddStringToObject(item, "status", status);
    return item;
}

/* The open item's done events, and the item onto the response's output. */
static void close_item(sp_strbuf *out, sp_responses_stream *st) {
    if (!st->open) return;
    if (st->text.oom) st->oom = true;
    const char *text = open_text(st);
    cJSON *o;
    if (st->open == RESPONSES_ITEM_MESSAGE) {
        o = item_event(st);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "text", text);
        cJSON_AddArrayToObject(o, "logprobs");
        add_event(out, st, "response.output_text.done", o);
        o = item_event(st);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddItemToObject(o, "part", output_text_part(text));
        add_event(out, st, "response.content_part.done", o);
    } else if (st->open == RESPONSES_ITEM_REASONING) {
        o = item_event(st);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "text", text);
        add_event(out, st, "response.reasoning_text.done", o);
    } else {
        o = item_event(st);
        cJSON_AddStringToObject(o, "name", st->call_name ? st->call_name : "");
        cJSON_AddStringToObject(o, "arguments", text);
        add_event(out, st, "response.function_call_arguments.done", o);
    }
    cJSON *output = cJSON_GetObjectItemCaseSensitive(st->response, "output");
    o = item_event(st);
    cJSON_AddItemToObject(o, "item", open_item(st, "completed"));
    add_event(out, st, "response.output_item.done", o);
    if (!cJSON_AddItemToArray(output, open_item(st, "completed"))) st->oom = true;
    st->open = 0;
    st->text.len = 0;
    free(st->call_name);
    st->call_name = NULL;
}

/* A new item of `kind` (the open one finished first), its added events. */
static void begin_item(sp_strbuf *out, sp_responses_stream *st, int kind,
                       const sp_tool_delta *call) {
    close_item(out, st);
    static const char *const prefixes[] = {"", "rs", "msg", "fc"};
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st->response, "id"));
    int index = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st->response, "output"));
    snprintf(st->item_id, sizeof st->item_id, "%s_%s_%d", prefixes[kind],
             id && strlen(id) > 5 ? id + 5 : "0", index);
    st->open = kind;
    if (call) {
        snprintf(st->call_id, sizeof st->call_id, "%s", call->id ? call->id : st->item_id);
        st->call_name = strdup(call->name ? call->name : "");
        if (!st->call_name) st->oom = true;
        st->tool_index = call->index;
    }
    cJSON *o = item_event(st);
    cJSON_DeleteItemFromObject(o, "item_id");
    cJSON_AddItemToObject(o, "item", open_item(st, "in_progress"));
    add_event(out, st, "response.output_item.added", o);
    if (kind != RESPONSES_ITEM_MESSAGE) return;
    o = item_event(st);
    cJSON_AddNumberToObject(o, "content_index", 0);
    cJSON_AddItemToObject(o, "part", output_text_part(""));
    add_event(out, st, "response.content_part.added", o);
}

/* More of the open item's text, and its delta event. */
static void item_delta(sp_strbuf *out, sp_responses_stream *st, const char *type, bool indexed,
                       const char *p, size_t n) {
    sp_strbuf_add(&st->text, p, n);
    if (!out) return;
    cJSON *o = item_event(st);
    if (indexed) cJSON_AddNumberToObject(o, "content_index", 0);
    add_span(o, "delta", p, n);
    if (st->open == RESPONSES_ITEM_MESSAGE) cJSON_AddArrayToObject(o, "logprobs");
    add_event(out, st, type, o);
}

static cJSON *usage_object(const sp_api_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "input_tokens_details"),
                            "cached_tokens", u->cached_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "output_tokens_details"),
                            "reasoning_tokens", 0);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    return o;
}

/* The request's value of `key` (echo), else `fallback` (owned). */
static void add_echoed(cJSON *r, const cJSON *echo, const char *key, cJSON *fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(echo, key);
    if (v) {
        cJSON_Delete(fallback);
        fallback = cJSON_Duplicate(v, true);
    }
    cJSON_AddItemToObject(r, key, fallback);
}

static cJSON *text_default(void) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(t, "format"), "type", "text");
    return t;
}

static cJSON *response_object(const sp_api_head *h, const char *echo_json) {
    cJSON *echo = echo_json ? cJSON_Parse(echo_json) : NULL;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", h->id);
    cJSON_AddStringToObject(r, "object", "response");
    cJSON_AddNumberToObject(r, "created_at", (double)h->created);
    cJSON_AddStringToObject(r, "status", "in_progress");
    cJSON_AddFalseToObject(r, "background");
    cJSON_AddNullToObject(r, "error");
    cJSON_AddNullToObject(r, "incomplete_details");
    add_echoed(r, echo, "instructions", cJSON_CreateNull());
    add_echoed(r, echo, "max_output_tokens", cJSON_CreateNull());
    cJSON_AddStringToObject(r, "model", h->model);
    cJSON_AddArrayToObject(r, "output");
    add_echoed(r, echo, "parallel_tool_calls", cJSON_CreateTrue());
    add_echoed(r, echo, "previous_response_id", cJSON_CreateNull());
    add_echoed(r, echo, "reasoning", cJSON_CreateObject());
    add_echoed(r, echo, "store", cJSON_CreateTrue());
    add_echoed(r, echo, "temperature", cJSON_CreateNumber(1));
    add_echoed(r, echo, "text", text_default());
    add_echoed(r, echo, "tool_choice", cJSON_CreateString("auto"));
    add_echoed(r, echo, "tools", cJSON_CreateArray());
    add_echoed(r, echo, "top_p", cJSON_CreateNumber(1));
    cJSON_AddStringToObject(r, "truncation", "disabled");
    cJSON_AddNullToObject(r, "usage");
    add_echoed(r, echo, "user", cJSON_CreateNull());
    add_echoed(r, echo, "metadata", cJSON_CreateObject());
    cJSON_Delete(echo);
    return r;
}

/* {"response": the object as it stands}. */
static cJSON *response_event(const sp_responses_stream *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", cJSON_Duplicate(st->response, true));
    return o;
}

void sp_responses_start(sp_strbuf *out, sp_responses_stream *st, const sp_api_head *h,
                        const char *echo_json) {
    memset(st, 0, sizeof *st);
    st->response = response_object(h, echo_json);
    if (!st->response) st->oom = true;
    if (!out) return;
    add_event(out, st, "response.created", response_event(st));
    add_event(out, st, "response.in_progress", response_event(st));
}

void sp_responses_delta(sp_strbuf *out, sp_responses_stream *st, const sp_api_delta *d) {
    if (!st->response) return;
    if (d->reasoning_len) {
        if (st->open != RESPONSES_ITEM_REASONING)
            begin_item(out, st, RESPONSES_ITEM_REASONING, NULL);
        item_delta(out, st, "response.reasoning_text.delta", true, d->reasoning,
                   d->reasoning_len);
    }
    if (d->len) {
        if (st->open != RESPONSES_ITEM_MESSAGE) begin_item(out, st, RESPONSES_ITEM_MESSAGE, NULL);
        item_delta(out, st, "response.output_text.delta", true, d->text, d->len);
    }
    for (int k = 0; k < d->n_tool_calls; k++) {
        const sp_tool_delta *t = &d->tool_calls[k];
        if (t->name || st->open != RESPONSES_ITEM_CALL || st->tool_index != t->index)
            begin_item(out, st, RESPONSES_ITEM_CALL, t);
        if (t->arguments_len)
            item_delta(out, st, "response.function_call_arguments.delta", false, t->arguments,
                       t->arguments_len);
    }
}

void sp_responses_end(sp_strbuf *out, sp_responses_stream *st, bool incomplete,
                      const sp_api_usage *u) {
    if (!st->response) return;
    cJSON *r = st->response;
    /* A reply of nothing is still one (empty) message. */
    if (!st->open && !cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "output")))
        begin_item(out, st, RESPONSES_ITEM_MESSAGE, NULL);
    close_item(out, st);
    cJSON_ReplaceItemInObjectCaseSensitive(r, "status",
                                           cJSON_CreateString(incomplete ? "incomplete"
                                                                         : "completed"));
    if (incomplete) {
        cJSON *details = cJSON_CreateObject();
        cJSON_AddStringToObject(details, "reason", "max_output_tokens");
        cJSON_ReplaceItemInObjectCaseSensitive(r, "incomplete_details", details);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(r, "usage", usage_object(u));
    add_event(out, st, incomplete ? "response.incomplete" : "response.completed",
              response_event(st));
}

void sp_responses_error_event(sp_strbuf *out, sp_responses_stream *st, const sp_api_error *e) {
    cJSON *o = cJSON_CreateObject();
    if (e->code[0]) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddStringToObject(o, "code", e->type);
    cJSON_AddStringToObject(o, "message", e->message);
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    add_event(out, st, "error", o);
}

char *sp_responses_json(const sp_responses_stream *st) {
    return st->response && !st->oom ? cJSON_PrintUnformatted(st->response) : NULL;
}

/* The output items as one assistant chat message. */
static cJSON *assistant_message(const cJSON *output) {
    cJSON *m = cJSON_CreateObject(), *calls = cJSON_CreateArray();
    sp_strbuf text = {0};
    const cJSON *item;
    cJSON_ArrayForEach(item, output) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(item, "type"));
        if (type && !strcmp(type, "message")) {
            cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(item, "content"), 0);
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "text"));
            if (t) sp_strbuf_add(&text, t, strlen(t));
        } else if (type && !strcmp(type, "function_call")) {
            cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
            cJSON_AddItemToObject(call, "id", cJSON_Duplicate(
                cJSON_GetObjectItemCaseSensitive(item, "call_id"), true));
            cJSON_AddStringToObject(call, "type", "function");
            cJSON_AddItemToObject(fn, "name", cJSON_Duplicate(
                cJSON_GetObjectItemCaseSensitive(item, "name"), true));
            cJSON_AddItemToObject(fn, "arguments", cJSON_Duplicate(
                cJSON_GetObjectItemCaseSensitive(item, "arguments"), true));
            cJSON_AddItemToObject(call, "function", fn);
            cJSON_AddItemToArray(calls, call);
        }
    }
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", text.p && !text.oom ? text.p : "");
    if (cJSON_GetArraySize(calls)) cJSON_AddItemToObject(m, "tool_calls", calls);
    else cJSON_Delete(calls);
    sp_strbuf_free(&text);
    return m;
}

char *sp_responses_history(const sp_responses_stream *st, const char *conversation) {
    cJSON *conv = conversation ? cJSON_Parse(conversation) : cJSON_CreateArray();
    if (!cJSON_IsArray(conv) || !st->response) {
        cJSON_Delete(conv);
        return NULL;
    }
    cJSON_AddItemToArray(conv, assistant_message(cJSON_GetObjectItemCaseSensitive(
                                   st->response, "output")));
    char *json = cJSON_PrintUnformatted(conv);
    cJSON_Delete(conv);
    return json;
}

void sp_responses_stream_free(sp_responses_stream *st) {
    cJSON_Delete(st->response);
    sp_strbuf_free(&st->text);
    free(st->call_name);
    memset(st, 0, sizeof *st);
}
