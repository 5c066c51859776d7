/* The routes besides generation: GET /health, /v1/models, /metrics and /,
 * GET and DELETE /v1/responses/{id} (the kept responses),
 * llama-server's POST /tokenize, /detokenize and /apply-template, and
 * Anthropic's POST /v1/messages/count_tokens. */
#include "server/api_response.h"
#include "server/reply.h"
#include "server/kv_events.h"
#include "server/state.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ready(sp_server *s, sp_api_error *e) {
    int phase = atomic_load(&s->phase);
    if (phase == SP_PHASE_LOADING)
        return sp_api_fail(e, 503, "unavailable_error", NULL, NULL, "Loading model");
    return true;
}

enum MHD_Result sp_handle_health(sp_server *s, struct MHD_Connection *c, const sp_http_call *call) {
    int phase = atomic_load(&s->phase);
    if (phase == SP_PHASE_READY)
        return sp_reply(s, c, call->route, 200, "application/json",
                        "{\"status\":\"ok\"}", 15);
    /* llama-server's body while loading; the same shape while draining. */
    const char *body = phase == SP_PHASE_LOADING
                           ? "{\"error\":{\"code\":503,\"message\":\"Loading model\","
                             "\"type\":\"unavailable_error\"}}"
                           : "{\"error\":{\"code\":503,\"message\":\"Shutting down\","
                             "\"type\":\"unavailable_error\"}}";
    return sp_reply(s, c, call->route, 503, "application/json", body, strlen(body));
}

cJSON *sp_server_model_json(sp_server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_names[0]);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "spindle");
    if (atomic_load(&s->phase) != SP_PHASE_LOADING) {
        cJSON *meta = cJSON_AddObjectToObject(m, "meta");
        cJSON_AddNumberToObject(meta, "context_length", s->context_length);
        cJSON_AddNumberToObject(meta, "vocab_size", s->limits.vocab_size);
    } else {
        cJSON_AddNullToObject(m, "meta");
    }
    return m;
}

/* GET /v1/models/{id}: the model, or OpenAI's 404 (the served model
 * answers to its alias and its path, as in requests). */
enum MHD_Result sp_handle_model(sp_server *s, struct MHD_Connection *c, const sp_http_call *call) {
    const char *id = !strncmp(call->url, "/v1/models/", 11) ? call->url + 11 : call->url + 8;
    cJSON *m = sp_is_base_model(s, id) ? sp_server_model_json(s) : sp_adapters_model(s, id);
    if (!m) {
        sp_api_error e;
        sp_api_fail(&e, 404, "invalid_request_error", "model", "model_not_found",
                    "The model '%.200s' does not exist (this server serves '%.150s' "
                    "and its adapters)", id, s->model_names[0]);
        return sp_reply_error(s, c, call->route, &e);
    }
    char *json = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return sp_reply_json(s, c, call->route, 200, json);
}

enum MHD_Result sp_handle_models(sp_server *s, struct MHD_Connection *c, const sp_http_call *call) {
    (void)call;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON_AddItemToArray(data, sp_server_model_json(s));
    sp_adapters_list_models(s, data);
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return sp_reply_json(s, c, SP_ROUTE_MODELS, 200, json);
}

enum MHD_Result sp_handle_metrics(sp_server *s, struct MHD_Connection *c, const sp_http_call *call) {
    int queued = 0, running = 0;
    if (s->engine) spindle_engine_counts(s->engine, &queued, &running);
    sp_strbuf out = {0};
    sp_metrics_render(s->metrics, queued, running, &out);
    spindle_kv_pool_info kv;
    spindle_error err = {0};
    if (s->engine && !spindle_model_kv_pool_info(s->model, &kv, &err)) {
        sp_metrics_render_kv(&kv, &out);
        if (s->kv_events) sp_kv_events_render_metrics(s->kv_events, kv.hash_root, &out);
    }
    if (s->vision) {
        spindle_vision_stats vs;
        spindle_vision_get_stats(s->vision, &vs);
        sp_metrics_render_vision(&vs, &out);
    }
    sp_adapters_render_metrics(s, &out);
    enum MHD_Result rc = sp_reply(s, c, SP_ROUTE_METRICS, out.oom ? 503 : 200,
                                  "text/plain; version=0.0.4; charset=utf-8",
                                  out.p ? out.p : "", out.len);
    sp_strbuf_free(&out);
    return rc;
}

enum MHD_Result sp_handle_index(sp_server *s, struct MHD_Connection *c, const sp_http_call *call) {
    return sp_reply(s, c, SP_ROUTE_INDEX, 200, "text/html; charset=utf-8", sp_webui_html,
                    strlen(sp_webui_html));
}

/* {"id", "piece"} of one token (llama-server's with_pieces). */
static cJSON *token_piece(const spindle_tokenizer *tok, int32_t id) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", id);
    char *text = NULL;
    size_t len = 0;
    spindle_tokenizer_decode(tok, &id, 1, false, &text, &len, NULL);
    cJSON_AddStringToObject(o, "piece", text ? text : "");
    spindle_free(text);
    return o;
}

enum MHD_Result sp_handle_tokenize(sp_server *s, struct MHD_Connection *c,
                                   const sp_http_call *call) {
    sp_api_error e;
    sp_api_tokenize t;
    if (!ready(s, &e) || !sp_api_parse_tokenize(call->body, call->len, &t, &e))
        return sp_reply_error(s, c, SP_ROUTE_TOKENIZE, &e);
    int32_t *ids = NULL;
    size_t n = 0;
    spindle_error err = {0};
    spindle_status st = spindle_tokenizer_encode(s->tok, t.content, t.content_len,
                                                 t.add_special, &ids, &n, &err);
    if (st) {
        sp_api_tokenize_free(&t);
        sp_api_error_from_status(&e, st, "content", err.message);
        return sp_reply_error(s, c, SP_ROUTE_TOKENIZE, &e);
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(root, "tokens");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, t.with_pieces ? token_piece(s->tok, ids[i])
                                                : cJSON_CreateNumber(ids[i]));
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    spindle_free(ids);
    sp_api_tokenize_free(&t);
    return sp_reply_json(s, c, SP_ROUTE_TOKENIZE, 200, json);
}

/* {key: text} (text freed), or the library's error naming `param`. */
static enum MHD_Result reply_text(sp_server *s, struct MHD_Connection *c, sp_route route,
                                  spindle_status st, const spindle_error *err,
                                  const char *param, const char *key, char *text) {
    if (st) {
        sp_api_error e;
        spindle_free(text);
        sp_api_error_from_status(&e, st, param, err->message);
        return sp_reply_error(s, c, route, &e);
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, key, text);
    spindle_free(text);
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return sp_reply_json(s, c, route, 200, json);
}

enum MHD_Result sp_handle_detokenize(sp_server *s, struct MHD_Connection *c,
                                     const sp_http_call *call) {
    sp_api_error e;
    int32_t *ids = NULL;
    int n = 0;
    if (!ready(s, &e) || !sp_api_parse_detokenize(call->body, call->len, &s->limits, &ids, &n, &e))
        return sp_reply_error(s, c, SP_ROUTE_DETOKENIZE, &e);
    char *text = NULL;
    size_t text_len = 0;
    spindle_error err = {0};
    spindle_status st = spindle_tokenizer_decode(s->tok, ids, (size_t)n, false, &text,
                                                 &text_len, &err);
    free(ids);
    return reply_text(s, c, SP_ROUTE_DETOKENIZE, st, &err, "tokens", "content", text);
}

enum MHD_Result sp_handle_apply_template(sp_server *s, struct MHD_Connection *c,
                                         const sp_http_call *call) {
    sp_api_error e;
    sp_api_request r;
    if (!ready(s, &e) || !sp_api_parse_apply_template(call->body, call->len, &r, &e))
        return sp_reply_error(s, c, SP_ROUTE_APPLY_TEMPLATE, &e);
    char *text = NULL;
    bool rendered = sp_reply_render_chat(s, &r, &text, &e);
    sp_api_request_free(&r);
    if (!rendered) return sp_reply_error(s, c, SP_ROUTE_APPLY_TEMPLATE, &e);
    spindle_error err = {0};
    return reply_text(s, c, SP_ROUTE_APPLY_TEMPLATE, SPINDLE_OK, &err, "messages", "prompt",
                      text);
}

/* Anthropic's count_tokens: the prompt's tokens as /v1/messages would
 * render them (the prompt_tokens of the same conversation on the chat
 * route). */
enum MHD_Result sp_handle_count_tokens(sp_server *s, struct MHD_Connection *c,
                                       const sp_http_call *call) {
    sp_api_error e;
    sp_api_request r;
    sp_api_limits limits = s->limits;
    limits.n_model_names = 0;   /* a mounted adapter's name is a model too */
    if (!ready(s, &e) ||
        !sp_api_parse_anthropic(call->body, call->len, &limits, true, &r, &e))
        return sp_reply_error(s, c, SP_ROUTE_COUNT_TOKENS, &e);
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    bool counted = sp_server_chat_prompt_ids(s, &r, &ids, &n, &text, &e);
    sp_api_request_free(&r);
    spindle_free(text);
    spindle_free(ids);
    if (!counted) return sp_reply_error(s, c, SP_ROUTE_COUNT_TOKENS, &e);
    char json[64];
    snprintf(json, sizeof json, "{\"input_tokens\":%zu}", n);
    return sp_reply(s, c, SP_ROUTE_COUNT_TOKENS, 200, "application/json", json, strlen(json));
}

/* The response id of GET / DELETE /v1/responses/{id}, or NULL with the
 * 404 in *e when no response of that id is kept. */
static const char *kept_response_id(sp_server *s, const sp_http_call *call, char **json,
                                    sp_api_error *e) {
    const char *id = !strncmp(call->url, "/v1/", 4) ? call->url + 14 : call->url + 11;
    *json = sp_responses_store_response(&s->responses, id);
    if (*json) return id;
    sp_api_fail(e, 404, "invalid_request_error", NULL, "not_found",
                "Response with id '%.200s' not found.", id);
    return NULL;
}

enum MHD_Result sp_handle_response_get(sp_server *s, struct MHD_Connection *c,
                                       const sp_http_call *call) {
    sp_api_error e;
    char *json = NULL;
    if (!kept_response_id(s, call, &json, &e)) return sp_reply_error(s, c, call->route, &e);
    return sp_reply_json(s, c, call->route, 200, json);
}

enum MHD_Result sp_handle_response_delete(sp_server *s, struct MHD_Connection *c,
                                          const sp_http_call *call) {
    sp_api_error e;
    char *json = NULL;
    const char *id = kept_response_id(s, call, &json, &e);
    free(json);
    if (!id || !sp_responses_store_delete(&s->responses, id)) {
        if (id) sp_api_fail(&e, 404, "invalid_request_error", NULL, "not_found",
                            "Response with id '%.200s' not found.", id);
        return sp_reply_error(s, c, call->route, &e);
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", id);
    cJSON_AddStringToObject(root, "object", "response.deleted");
    cJSON_AddTrueToObject(root, "deleted");
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return sp_reply_json(s, c, call->route, 200, out);
}
