/* Slots in llama-server's shape (slots.h): the cached sequence state of
 * the last request that named each slot, its save / restore / erase as
 * files under --slot-save-path, and the prefix reuse of a request that
 * names a slot whose state its prompt extends. */
#include "server/slots.h"
#include "server/state.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sp_slot {
    pthread_mutex_t mu;
    spindle_seq_snapshot *snap;   /* the state of tokens[0 .. n) */
    int32_t *tokens;
    int n;
    sp_slot_adapter adapter;      /* what the state was computed under */
} sp_slot;

struct sp_slots {
    int count;
    sp_slot *slot;
};

sp_slots *sp_slots_new(int count) {
    sp_slots *s = calloc(1, sizeof *s);
    if (!s || !(s->slot = calloc((size_t)count, sizeof *s->slot))) {
        free(s);
        return NULL;
    }
    s->count = count;
    for (int i = 0; i < count; i++) pthread_mutex_init(&s->slot[i].mu, NULL);
    return s;
}

static void slot_clear(sp_slot *sl) {
    spindle_seq_snapshot_free(sl->snap);
    spindle_free(sl->tokens);
    sl->snap = NULL;
    sl->tokens = NULL;
    sl->n = 0;
    sl->adapter.n = 0;
}

/* Replace the slot's state (its snapshot and tokens are taken over). */
static void slot_install(sp_slot *sl, spindle_seq_snapshot *snap, int32_t *tokens, int n,
                         const sp_slot_adapter *adapter) {
    pthread_mutex_lock(&sl->mu);
    slot_clear(sl);
    sl->snap = snap;
    sl->tokens = tokens;
    sl->n = n;
    sl->adapter = *adapter;
    pthread_mutex_unlock(&sl->mu);
}

static bool same_adapter(const sp_slot_adapter *a, const sp_slot_adapter *b) {
    return a->n == b->n && !memcmp(a->key, b->key, a->n);
}

void sp_slots_free(sp_slots *s) {
    if (!s) return;
    for (int i = 0; i < s->count; i++) {
        slot_clear(&s->slot[i]);
        pthread_mutex_destroy(&s->slot[i].mu);
    }
    free(s->slot);
    free(s);
}

/* The slot's state into seq when prompt extends it; how many tokens. */
int sp_slot_begin(sp_server *srv, int id, const int32_t *prompt, int n,
                  const sp_slot_adapter *adapter, spindle_seq *seq) {
    if (id < 0) return 0;
    sp_slot *sl = &srv->slots->slot[id];
    int reused = 0;
    pthread_mutex_lock(&sl->mu);
    if (sl->snap && sl->n < n && same_adapter(&sl->adapter, adapter) &&
        !memcmp(sl->tokens, prompt, (size_t)sl->n * sizeof *prompt) &&
        spindle_seq_snapshot_restore(seq, sl->snap, NULL) == SPINDLE_OK)
        reused = sl->n;
    pthread_mutex_unlock(&sl->mu);
    return reused;
}

void sp_slot_end(sp_server *srv, int id, const spindle_seq *seq, const int32_t *prompt,
                 int n_prompt, const int32_t *generated, int n_generated,
                 const sp_slot_adapter *adapter) {
    if (id < 0) return;
    int n = spindle_seq_length(seq);
    if (n < 1 || n > n_prompt + n_generated) return;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    spindle_seq_snapshot *snap = NULL;
    if (!tokens || spindle_seq_snapshot_take(seq, &snap, NULL)) {
        free(tokens);
        return;
    }
    int from_prompt = n < n_prompt ? n : n_prompt;
    memcpy(tokens, prompt, (size_t)from_prompt * sizeof *tokens);
    memcpy(tokens + from_prompt, generated, (size_t)(n - from_prompt) * sizeof *tokens);
    slot_install(&srv->slots->slot[id], snap, tokens, n, adapter);
}

/* ------------------------------------------------------ POST /slots/{id} */

static double ms_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* "filename" of the body: a plain name inside --slot-save-path. */
static char *slot_file(const sp_server *srv, const char *body, size_t len, char *name,
                       size_t cap, sp_api_error *e) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "filename");
    bool ok = cJSON_IsString(v) && v->valuestring[0] && strlen(v->valuestring) < cap &&
              !strchr(v->valuestring, '/') && strcmp(v->valuestring, ".") &&
              strcmp(v->valuestring, "..");
    if (ok) snprintf(name, cap, "%s", v->valuestring);
    cJSON_Delete(root);
    if (!ok) {
        sp_api_bad(e, "filename", "filename must be a file name (no path) under --slot-save-path");
        return NULL;
    }
    size_t n = strlen(srv->opts.slot_save_path) + strlen(name) + 2;
    char *path = malloc(n);
    if (path) snprintf(path, n, "%s/%s", srv->opts.slot_save_path, name);
    else sp_api_fail(e, 503, "server_error", NULL, NULL, "out of memory");
    return path;
}

static bool slot_save(sp_server *srv, sp_slot *sl, const char *path, cJSON *out,
                      sp_api_error *e) {
    spindle_error err = {0};
    pthread_mutex_lock(&sl->mu);
    /* A state computed under an adapter records the adapter's content
     * identity and the scale (its spindle_adapter_key), so that a restore
     * can require that adapter and reuse it only under it. */
    spindle_status st = sl->snap ? spindle_seq_state_save_keyed(srv->model, sl->snap,
                                                                sl->tokens, sl->n,
                                                                sl->adapter.key,
                                                                sl->adapter.n, path, &err)
                                 : SPINDLE_ERR_ARGUMENT;
    int n = sl->n;
    size_t bytes = spindle_seq_snapshot_bytes(sl->snap);
    pthread_mutex_unlock(&sl->mu);
    if (st == SPINDLE_ERR_ARGUMENT && !err.message[0])
        return sp_api_fail(e, 400, "invalid_request_error", NULL, "slot_empty",
                           "the slot holds no state to save");
    if (st) return sp_api_fail(e, 500, "server_error", NULL, NULL, "%s", err.message);
    cJSON_AddNumberToObject(out, "n_saved", n);
    cJSON_AddNumberToObject(out, "n_written", (double)bytes);
    return true;
}

static bool slot_restore(sp_server *srv, sp_slot *sl, const char *path, cJSON *out,
                         sp_api_error *e) {
    spindle_error err = {0};
    spindle_seq_snapshot *snap = NULL;
    int32_t *tokens = NULL;
    int n = 0;
    sp_slot_adapter adapter = {.n = 0};
    spindle_status st = spindle_seq_state_load_keyed(srv->model, path, &snap, &tokens, &n,
                                                     adapter.key, &adapter.n, &err);
    if (st == SPINDLE_ERR_IO)
        return sp_api_fail(e, 404, "invalid_request_error", "filename", "slot_file_not_found",
                           "no saved slot file %s", strrchr(path, '/') + 1);
    if (st)
        return sp_api_fail(e, 409, "invalid_request_error", "filename", "slot_file_unusable",
                           "%s", err.message);
    /* Under an adapter: one with the same content must be mounted, or no
     * request could ever reuse the state. */
    char name[256], loaded[256];
    if (adapter.n && !sp_adapters_find_identity(srv, adapter.key, name, loaded,
                                                sizeof loaded)) {
        char hex[2 * SP_ADAPTER_IDENTITY_BYTES + 1];
        float scale;
        sp_adapter_key_describe(adapter.key, hex, &scale);
        spindle_seq_snapshot_free(snap);
        spindle_free(tokens);
        return sp_api_fail(e, 409, "invalid_request_error", "filename",
                           "slot_adapter_not_loaded",
                           "%s was saved under a LoRA adapter (identity %s, scale %g) "
                           "that is not loaded here (loaded: %s); load that adapter first",
                           strrchr(path, '/') + 1, hex, (double)scale, loaded);
    }
    size_t bytes = spindle_seq_snapshot_bytes(snap);
    slot_install(sl, snap, tokens, n, &adapter);
    if (adapter.n) {
        float scale;
        char hex[2 * SP_ADAPTER_IDENTITY_BYTES + 1];
        sp_adapter_key_describe(adapter.key, hex, &scale);
        cJSON *lora = cJSON_AddObjectToObject(out, "lora");
        cJSON_AddStringToObject(lora, "name", name);
        cJSON_AddNumberToObject(lora, "scale", scale);
    }
    cJSON_AddNumberToObject(out, "n_restored", n);
    cJSON_AddNumberToObject(out, "n_read", (double)bytes);
    return true;
}

/* The action on slot `id`; false with *e on failure. */
static bool slot_action(sp_server *srv, int id, const char *action, const char *body,
                        size_t len, cJSON *out, sp_api_error *e) {
    sp_slot *sl = &srv->slots->slot[id];
    cJSON_AddNumberToObject(out, "id_slot", id);
    if (!strcmp(action, "erase")) {
        pthread_mutex_lock(&sl->mu);
        cJSON_AddNumberToObject(out, "n_erased", sl->n);
        slot_clear(sl);
        pthread_mutex_unlock(&sl->mu);
        return true;
    }
    bool save = !strcmp(action, "save");
    if (!save && strcmp(action, "restore"))
        return sp_api_bad(e, "action", "action must be save, restore or erase");
    char name[256];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *path = slot_file(srv, body, len, name, sizeof name, e);
    if (!path) return false;
    bool ok = save ? slot_save(srv, sl, path, out, e) : slot_restore(srv, sl, path, out, e);
    free(path);
    if (!ok) return false;
    cJSON_AddStringToObject(out, "filename", name);
    cJSON *timings = cJSON_AddObjectToObject(out, "timings");
    cJSON_AddNumberToObject(timings, save ? "save_ms" : "restore_ms", ms_since(&t0));
    return true;
}

enum MHD_Result sp_handle_slots(sp_server *srv, struct MHD_Connection *c,
                                const sp_http_call *call) {
    const char *url = call->url;
    sp_api_error e;
    const char *action = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action");
    char *end = NULL;
    long id = strtol(url + strlen("/slots/"), &end, 10);
    if (atomic_load(&srv->phase) != SP_PHASE_READY) {
        sp_api_fail(&e, 503, "server_error", NULL, NULL, "the model is not ready");
    } else if (!srv->opts.slot_save_path) {
        sp_api_fail(&e, 501, "not_supported_error", NULL, NULL,
                    "slot save/restore needs a server started with --slot-save-path");
    } else if (!end || *end || end == url + strlen("/slots/") || id < 0 ||
               id >= srv->slots->count) {
        sp_api_fail(&e, 404, "invalid_request_error", NULL, "not_found",
                    "no slot %.32s (slots 0-%d)", url + strlen("/slots/"),
                    srv->slots->count - 1);
    } else if (!action) {
        sp_api_bad(&e, "action", "the query must give action=save|restore|erase");
    } else {
        cJSON *out = cJSON_CreateObject();
        if (out && slot_action(srv, (int)id, action, call->body, call->len, out, &e)) {
            char *json = cJSON_PrintUnformatted(out);
            cJSON_Delete(out);
            if (json) return sp_reply_json(srv, c, SP_ROUTE_SLOTS, 200, json);
            sp_api_fail(&e, 503, "server_error", NULL, NULL, "out of memory");
        } else {
            cJSON_Delete(out);
            if (!out) sp_api_fail(&e, 503, "server_error", NULL, NULL, "out of memory");
        }
    }
    return sp_reply_error(srv, c, SP_ROUTE_SLOTS, &e);
}
