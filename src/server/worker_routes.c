/* What a router in front of several replicas asks of each one (vLLM's
 * router, SGLang's model gateway): the prompt's token ids before it picks a
 * replica (POST /v1/chat/completions/render, /v1/completions/render, vLLM's
 * shapes), the replica's load (GET /get_load), its identity and KV block
 * size (GET /get_server_info, /get_model_info). The health routes are in
 * routes.c. */
#include "server/reply.h"
#include "server/state.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* The model is loaded: else the 503 that /health also answers, so that a
 * router's probe of any of these routes agrees with its health check. */
static bool loaded(sp_server *s, sp_api_error *e) {
    if (atomic_load(&s->phase) == SP_PHASE_LOADING)
        return sp_api_fail(e, 503, "unavailable_error", NULL, NULL, "Loading model");
    return true;
}

static int kv_block_tokens(sp_server *s) {
    spindle_kv_pool_info kv;
    spindle_error err = {0};
    if (!s->engine || spindle_model_kv_pool_info(s->model, &kv, &err)) return 0;
    return kv.block_tokens;
}

static enum MHD_Result reply_object(sp_server *s, struct MHD_Connection *c, sp_route route,
                                    cJSON *root) {
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return sp_reply_json(s, c, route, 200, json);
}

/* The fields vLLM's router reads (model_id, model_path, kv_block_size: the
 * block its kv_aware policy hashes by) and the context length. */
enum MHD_Result sp_handle_server_info(sp_server *s, struct MHD_Connection *c,
                                      const sp_http_call *call) {
    sp_api_error e;
    if (!loaded(s, &e)) return sp_reply_error(s, c, call->route, &e);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model_id", s->model_names[0]);
    cJSON_AddStringToObject(root, "served_model_name", s->model_names[0]);
    cJSON_AddStringToObject(root, "model_path", s->model_names[1]);
    cJSON_AddNumberToObject(root, "max_model_len", s->context_length);
    int block = kv_block_tokens(s);
    if (block > 0) cJSON_AddNumberToObject(root, "kv_block_size", block);
    cJSON_AddNumberToObject(root, "max_running_requests", s->opts.parallel);
    cJSON_AddStringToObject(root, "version", SPINDLE_VERSION);
    return reply_object(s, c, call->route, root);
}

/* SGLang's shape: model and tokenizer paths (one file here) and what the
 * model does. */
enum MHD_Result sp_handle_model_info(sp_server *s, struct MHD_Connection *c,
                                     const sp_http_call *call) {
    sp_api_error e;
    if (!loaded(s, &e)) return sp_reply_error(s, c, call->route, &e);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model_path", s->model_names[1]);
    cJSON_AddStringToObject(root, "tokenizer_path", s->model_names[1]);
    cJSON_AddStringToObject(root, "served_model_name", s->model_names[0]);
    cJSON_AddBoolToObject(root, "is_generation", s->engine != NULL);
    cJSON_AddBoolToObject(root, "has_image_understanding", s->vision != NULL);
    return reply_object(s, c, call->route, root);
}

/* The requests in the engine, running and waiting: power_of_two compares
 * two replicas' "load". Answered while loading too (0: nothing runs). */
enum MHD_Result sp_handle_load(sp_server *s, struct MHD_Connection *c,
                               const sp_http_call *call) {
    int queued = 0, running = 0;
    if (s->engine) spindle_engine_counts(s->engine, &queued, &running);
    char json[128];
    snprintf(json, sizeof json, "{\"load\":%d,\"num_reqs\":%d,\"num_waiting_reqs\":%d}",
             queued + running, running, queued);
    return sp_reply(s, c, call->route, 200, "application/json", json, strlen(json));
}

/* One rendered prompt in vLLM's shape ({request_id, model, token_ids,
 * features}). */
static cJSON *rendered_prompt(sp_server *s, const int32_t *ids, int n) {
    cJSON *o = cJSON_CreateObject();
    char id[48];
    snprintf(id, sizeof id, "render-%llu",
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    cJSON_AddStringToObject(o, "request_id", id);
    cJSON_AddStringToObject(o, "model", s->model_names[0]);
    cJSON *arr = cJSON_AddArrayToObject(o, "token_ids");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    cJSON_AddNullToObject(o, "features");
    return o;
}

/* `model` names the served model or a mounted adapter (the generation
 * route's 404 otherwise). */
static bool known_model(sp_server *s, sp_api_request *r, sp_api_error *e) {
    if (!sp_adapters_select_lock(s, r, e)) return false;
    sp_adapters_unlock(s);
    return true;
}

/* The prompt ids the generation route would compute for the same body
 * (chat template, images' placeholder tokens, the context check), without
 * generating or encoding the images: a cache-aware router places requests
 * by them. vLLM answers a chat with one object and a completion with a
 * list (one per prompt). */
enum MHD_Result sp_handle_render(sp_server *s, struct MHD_Connection *c,
                                 const sp_http_call *call) {
    sp_api_error e;
    sp_api_request r;
    memset(&r, 0, sizeof r);
    sp_api_kind kind = call->route == SP_ROUTE_CHAT_RENDER ? SP_API_CHAT : SP_API_COMPLETION;
    sp_api_limits limits = s->limits;
    limits.n_model_names = 0;   /* a mounted adapter's name is a model too */
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    bool ok = loaded(s, &e) &&
              sp_api_parse_generation(kind, call->body, call->len, &limits, &r, &e) &&
              known_model(s, &r, &e) &&
              sp_server_prompt_ids(s, &r, &ids, &n, &text, NULL, &e);
    sp_api_request_free(&r);
    spindle_free(text);
    if (!ok) {
        spindle_free(ids);
        return sp_reply_error(s, c, call->route, &e);
    }
    cJSON *one = rendered_prompt(s, ids, n);
    spindle_free(ids);
    if (kind == SP_API_CHAT) return reply_object(s, c, call->route, one);
    cJSON *list = cJSON_CreateArray();
    cJSON_AddItemToArray(list, one);
    return reply_object(s, c, call->route, list);
}
