/* Several models in one server (model_set.h): discovery, loading on first
 * use, the least-recently-used unload under --models-memory, and the
 * routes that span every model (/v1/models, /metrics). */
#include "server/model_set.h"
#include "base/log.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef enum model_state { MODEL_UNLOADED = 0, MODEL_LOADING, MODEL_LOADED } model_state;

static const char *const state_names[] = {"unloaded", "loading", "loaded"};

typedef struct model_entry {
    char *name, *path;
    size_t file_bytes;     /* its files on disk: the estimate before a load */
    size_t bytes;          /* charged while loaded: files + the KV pool */
    model_state state;
    sp_server *srv;        /* while loaded */
    int users;             /* handlers running on srv now */
    uint64_t used;         /* the LRU clock at its last request */
    bool pinned;
    sp_metrics metrics;    /* kept across unloads, as counters must be */
} model_entry;

struct sp_model_set {
    sp_server *front;
    pthread_mutex_t lock;
    pthread_cond_t changed;   /* a load ended */
    model_entry *e;
    int n;
    size_t charged;           /* bytes of the loaded models */
    uint64_t clock;
};

bool sp_model_set_wanted(const sp_server_options *o) {
    return o->n_named_models > 0 || o->model_dir;
}

/* Bytes of a file, or of a directory's files (a model's shards). */
static size_t path_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st)) return 0;
    if (!S_ISDIR(st.st_mode)) return (size_t)st.st_size;
    size_t sum = 0;
    DIR *d = opendir(path);
    for (struct dirent *de; d && (de = readdir(d));) {
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, de->d_name);
        if (de->d_name[0] != '.' && !stat(file, &st) && S_ISREG(st.st_mode))
            sum += (size_t)st.st_size;
    }
    if (d) closedir(d);
    return sum;
}

static bool add_model(sp_model_set *ms, const char *name, const char *path, char *why,
                      size_t cap) {
    for (int i = 0; i < ms->n; i++)
        if (!strcmp(ms->e[i].name, name)) {
            snprintf(why, cap, "two models named '%s' (%s and %s)", name, ms->e[i].path, path);
            return false;
        }
    model_entry *grown = realloc(ms->e, (size_t)(ms->n + 1) * sizeof *grown);
    if (!grown) return snprintf(why, cap, "out of memory"), false;
    ms->e = grown;
    model_entry *m = &ms->e[ms->n];
    memset(m, 0, sizeof *m);
    m->name = strdup(name);
    m->path = strdup(path);
    if (!m->name || !m->path) {
        free(m->name);
        free(m->path);
        return snprintf(why, cap, "out of memory"), false;
    }
    m->file_bytes = path_bytes(path);
    sp_metrics_init(&m->metrics);
    ms->n++;
    return true;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* --model-dir: each subdirectory and each .gguf file (named without the
 * extension), in name order; hidden entries are skipped. */
static bool add_model_dir(sp_model_set *ms, const char *dir, char *why, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return snprintf(why, cap, "--model-dir %s: cannot read it", dir), false;
    char *names[1024];
    int n = 0;
    for (struct dirent *de; n < 1024 && (de = readdir(d));)
        if (de->d_name[0] != '.' && (names[n] = strdup(de->d_name))) n++;
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = strlen(names[i]);
        bool gguf = len > 5 && !strcmp(names[i] + len - 5, ".gguf");
        if (ok && !stat(path, &st) && (S_ISDIR(st.st_mode) || (gguf && S_ISREG(st.st_mode)))) {
            if (gguf) names[i][len - 5] = '\0';
            ok = add_model(ms, names[i], path, why, cap);
        }
        free(names[i]);
    }
    if (ok && ms->n == 0) snprintf(why, cap, "--model-dir %s: no model in it", dir);
    return ok && ms->n > 0;
}

/* Options that configure one model's server alone. */
static bool refuse_single_model_options(const sp_server_options *o, char *why, size_t cap) {
    const char *opt = o->n_loras ? "--lora" : o->lora_dir ? "--lora-dir"
                      : o->kv_events_endpoint ? "--kv-events"
                      : o->draft_path ? "--draft-model"
                      : o->slot_save_path ? "--slot-save-path"
                      : o->alias ? "--alias" : NULL;
    if (opt)
        snprintf(why, cap, "%s applies to one model; it cannot be used with several "
                 "(-m NAME=PATH, --model-dir)", opt);
    return opt != NULL;
}

static bool find_models(sp_model_set *ms, const sp_server_options *o, char *why, size_t cap) {
    if (o->model_path) {   /* a plain -m beside the others: named by its file */
        const char *slash = strrchr(o->model_path, '/');
        char name[256];
        snprintf(name, sizeof name, "%s", slash && slash[1] ? slash + 1 : o->model_path);
        size_t len = strlen(name);
        if (len > 5 && !strcmp(name + len - 5, ".gguf")) name[len - 5] = '\0';
        if (!add_model(ms, name, o->model_path, why, cap)) return false;
    }
    for (int i = 0; i < o->n_named_models; i++) {
        const char *spec = o->named_models[i], *eq = strchr(spec, '=');
        char name[256];
        if (!eq || eq == spec || !eq[1] || (size_t)(eq - spec) >= sizeof name)
            return snprintf(why, cap, "-m %s: expected NAME=PATH", spec), false;
        snprintf(name, sizeof name, "%.*s", (int)(eq - spec), spec);
        if (!add_model(ms, name, eq + 1, why, cap)) return false;
    }
    if (o->model_dir && !add_model_dir(ms, o->model_dir, why, cap)) return false;
    for (int i = 0; i < o->n_pins; i++) {
        int k = 0;
        while (k < ms->n && strcmp(ms->e[k].name, o->pins[i])) k++;
        if (k == ms->n) return snprintf(why, cap, "--pin %s: no model of that name", o->pins[i]), false;
        ms->e[k].pinned = true;
    }
    return true;
}

sp_model_set *sp_model_set_new(sp_server *front, char *why, size_t cap) {
    if (refuse_single_model_options(&front->opts, why, cap)) return NULL;
    sp_model_set *ms = calloc(1, sizeof *ms);
    if (!ms) return snprintf(why, cap, "out of memory"), NULL;
    ms->front = front;
    pthread_mutex_init(&ms->lock, NULL);
    pthread_cond_init(&ms->changed, NULL);
    if (!find_models(ms, &front->opts, why, cap)) {
        sp_model_set_free(ms);
        return NULL;
    }
    return ms;
}

static void unload(sp_model_set *ms, model_entry *m) {
    sp_log(SPINDLE_LOG_INFO, "unloading model %s (%.1f MiB)", m->name,
           (double)m->bytes / (1 << 20));
    sp_server_free(m->srv);
    m->srv = NULL;
    m->state = MODEL_UNLOADED;
    ms->charged -= m->bytes;
    m->bytes = 0;
}

/* Whether a loaded model may go now: not pinned, no handler on it and no
 * request in flight (a stream outlives its handler). Under ms->lock, which
 * every new user takes first. */
static bool evictable(const model_entry *m) {
    if (m->state != MODEL_LOADED || m->pinned || m->users) return false;
    pthread_mutex_lock(&m->srv->lock);
    bool idle = m->srv->in_flight == 0;
    pthread_mutex_unlock(&m->srv->lock);
    return idle;
}

/* Unload the least recently used models other than `keep` until `need`
 * more bytes fit the budget; false when they cannot (the others in use or
 * pinned), unless nothing is loaded (a model larger than the whole budget
 * still loads alone). Under ms->lock. */
static bool make_room(sp_model_set *ms, size_t need, const model_entry *keep) {
    const size_t budget = ms->front->opts.models_memory;
    while (budget && ms->charged && ms->charged + need > budget) {
        model_entry *lru = NULL;
        for (int i = 0; i < ms->n; i++)
            if (&ms->e[i] != keep && evictable(&ms->e[i]) && (!lru || ms->e[i].used < lru->used))
                lru = &ms->e[i];
        if (!lru) return false;
        unload(ms, lru);
    }
    return true;
}

/* The server of model m, loaded (with ms->lock released meanwhile). */
static sp_server *load_model(sp_model_set *ms, model_entry *m) {
    sp_server_options o = ms->front->opts;
    o.model_path = m->path;
    o.alias = m->name;
    o.named_models = o.pins = NULL;
    o.n_named_models = o.n_pins = 0;
    o.model_dir = NULL;
    sp_log(SPINDLE_LOG_INFO, "loading model %s (%s)", m->name, m->path);
    sp_server *srv = sp_server_new(&o);
    if (!srv) return NULL;
    srv->metrics = &m->metrics;
    srv->ids = &ms->front->next_id;
    srv->started = ms->front->started;
    if (!sp_server_load(srv)) {
        sp_server_free(srv);
        return NULL;
    }
    atomic_store(&srv->phase, SP_PHASE_READY);
    return srv;
}

/* Model i's server with one more user (release it), loaded first if it is
 * not; NULL with a 503 in *e when it cannot be. */
static sp_server *acquire(sp_model_set *ms, int i, sp_api_error *e) {
    model_entry *m = &ms->e[i];
    pthread_mutex_lock(&ms->lock);
    while (m->state == MODEL_LOADING) pthread_cond_wait(&ms->changed, &ms->lock);
    if (m->state == MODEL_UNLOADED) {
        if (!make_room(ms, m->file_bytes, m)) {
            pthread_mutex_unlock(&ms->lock);
            sp_api_fail(e, 503, "unavailable_error", "model", "models_memory_full",
                        "cannot load model '%.100s' now: --models-memory %zu bytes is held "
                        "by models that are pinned or have requests in flight; retry later",
                        m->name, ms->front->opts.models_memory);
            return NULL;
        }
        m->state = MODEL_LOADING;
        pthread_mutex_unlock(&ms->lock);
        sp_server *srv = load_model(ms, m);
        pthread_mutex_lock(&ms->lock);
        m->srv = srv;
        m->state = srv ? MODEL_LOADED : MODEL_UNLOADED;
        if (srv) {
            spindle_kv_pool_info kv;
            spindle_error err = {0};
            m->bytes = m->file_bytes;
            if (!spindle_model_kv_pool_info(srv->model, &kv, &err)) m->bytes += kv.budget_bytes;
            ms->charged += m->bytes;
            make_room(ms, 0, m);   /* the estimate may have been short */
        }
        pthread_cond_broadcast(&ms->changed);
        if (!srv) {
            pthread_mutex_unlock(&ms->lock);
            sp_api_fail(e, 503, "unavailable_error", "model", "model_load_failed",
                        "model '%.100s' failed to load (the server's log says why)", m->name);
            return NULL;
        }
    }
    m->users++;
    m->used = ++ms->clock;
    sp_server *srv = m->srv;
    pthread_mutex_unlock(&ms->lock);
    return srv;
}

static void release(sp_model_set *ms, int i) {
    pthread_mutex_lock(&ms->lock);
    ms->e[i].users--;
    pthread_mutex_unlock(&ms->lock);
}

bool sp_model_set_load_pinned(sp_model_set *ms) {
    for (int i = 0; i < ms->n; i++) {
        if (!ms->e[i].pinned) continue;
        sp_api_error e;
        if (!acquire(ms, i, &e)) {
            sp_log(SPINDLE_LOG_ERROR, "--pin %s: %s", ms->e[i].name, e.message);
            return false;
        }
        release(ms, i);
    }
    sp_log(SPINDLE_LOG_INFO, "%d models available, loaded on first use", ms->n);
    return true;
}

void sp_model_set_drain(sp_model_set *ms) {
    pthread_mutex_lock(&ms->lock);
    while (true) {   /* no load in progress, none starts (the front drains) */
        bool loading = false;
        for (int i = 0; i < ms->n; i++) loading |= ms->e[i].state == MODEL_LOADING;
        if (!loading) break;
        pthread_cond_wait(&ms->changed, &ms->lock);
    }
    for (int i = 0; i < ms->n; i++)
        if (ms->e[i].srv) atomic_store(&ms->e[i].srv->phase, SP_PHASE_DRAINING);
    pthread_mutex_unlock(&ms->lock);
    for (int i = 0; i < ms->n; i++)
        if (ms->e[i].srv) sp_server_drain(ms->e[i].srv);
}

void sp_model_set_free(sp_model_set *ms) {
    if (!ms) return;
    for (int i = 0; i < ms->n; i++) {
        sp_server_free(ms->e[i].srv);
        sp_metrics_destroy(&ms->e[i].metrics);
        free(ms->e[i].name);
        free(ms->e[i].path);
    }
    free(ms->e);
    pthread_cond_destroy(&ms->changed);
    pthread_mutex_destroy(&ms->lock);
    free(ms);
}

/* ------------------------------------------------------------- routes */

/* Entry of model m (under ms->lock): the loaded server's, with status as
 * llama-server's router gives it, and what the budget charges. */
static cJSON *entry_json(sp_model_set *ms, const model_entry *m) {
    cJSON *o;
    if (m->srv) {
        o = sp_server_model_json(m->srv);
    } else {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", m->name);
        cJSON_AddStringToObject(o, "object", "model");
        cJSON_AddNumberToObject(o, "created", (double)ms->front->started);
        cJSON_AddStringToObject(o, "owned_by", "spindle");
        cJSON_AddNullToObject(o, "meta");
    }
    cJSON *status = cJSON_AddObjectToObject(o, "status");
    cJSON_AddStringToObject(status, "value", state_names[m->state]);
    cJSON_AddBoolToObject(o, "pinned", m->pinned);
    cJSON_AddNumberToObject(o, "memory_bytes", (double)(m->bytes ? m->bytes : m->file_bytes));
    return o;
}

static enum MHD_Result reply_unknown(sp_server *front, struct MHD_Connection *c,
                                     const sp_http_call *call, const char *name) {
    sp_api_error e;
    sp_api_fail(&e, 404, "invalid_request_error", "model", "model_not_found",
                "The model '%.200s' does not exist (GET /v1/models lists this server's)",
                name);
    return sp_reply_error(front, c, call->route, &e);
}

static enum MHD_Result list_models(sp_server *front, struct MHD_Connection *c,
                                   const sp_http_call *call) {
    sp_model_set *ms = front->models;
    const char *id = NULL;
    if (call->route == SP_ROUTE_MODEL)
        id = !strncmp(call->url, "/v1/models/", 11) ? call->url + 11 : call->url + 8;
    cJSON *root = cJSON_CreateObject(), *one = NULL;
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    pthread_mutex_lock(&ms->lock);
    for (int i = 0; i < ms->n; i++)
        if (!id) cJSON_AddItemToArray(data, entry_json(ms, &ms->e[i]));
        else if (!strcmp(id, ms->e[i].name)) one = entry_json(ms, &ms->e[i]);
    pthread_mutex_unlock(&ms->lock);
    if (id && !one) {
        cJSON_Delete(root);
        return reply_unknown(front, c, call, id);
    }
    char *json = cJSON_PrintUnformatted(one ? one : root);
    cJSON_Delete(root);
    cJSON_Delete(one);
    return sp_reply_json(front, c, call->route, 200, json);
}

/* GET /metrics: every model's series with a model_name label (the front's
 * own requests, such as an unknown model's 404, without one); the Gateway
 * API Inference Extension's vllm: gauges once, summed over the models,
 * since its endpoint picker reads one series per server and the models
 * share its CPU: the server's queue is all of theirs. */
static enum MHD_Result render_metrics(sp_server *front, struct MHD_Connection *c) {
    sp_model_set *ms = front->models;
    sp_strbuf *texts = calloc((size_t)ms->n + 1, sizeof *texts);
    const char **ptrs = calloc((size_t)ms->n + 1, sizeof *ptrs);
    const char **labels = calloc((size_t)ms->n + 1, sizeof *labels);
    if (!texts || !ptrs || !labels) {
        free(texts), free(ptrs), free(labels);
        return sp_reply(front, c, SP_ROUTE_METRICS, 503, "text/plain", "out of memory", 13);
    }
    int queued_all = 0, running_all = 0;
    spindle_kv_pool_info all = {0};
    sp_metrics_render_requests(front->metrics, &texts[0]);
    pthread_mutex_lock(&ms->lock);
    for (int i = 0; i < ms->n; i++) {
        const model_entry *m = &ms->e[i];
        int queued = 0, running = 0;
        spindle_kv_pool_info kv;
        spindle_error err = {0};
        if (m->srv && m->srv->engine) spindle_engine_counts(m->srv->engine, &queued, &running);
        sp_metrics_render((sp_metrics *)&m->metrics, queued, running, &texts[i + 1]);
        if (m->srv && m->srv->engine && !spindle_model_kv_pool_info(m->srv->model, &kv, &err)) {
            sp_metrics_render_kv(&kv, &texts[i + 1]);
            all.blocks += kv.blocks;
            all.used += kv.used;
            all.block_tokens = kv.block_tokens;
        }
        queued_all += queued;
        running_all += running;
        labels[i + 1] = m->name;
    }
    pthread_mutex_unlock(&ms->lock);
    sp_strbuf out = {0};
    bool oom = false;
    for (int i = 0; i <= ms->n; i++) {
        ptrs[i] = texts[i].p ? texts[i].p : "";
        oom |= texts[i].oom;
    }
    sp_metrics_merge(ptrs, labels, ms->n + 1, "vllm:", &out);
    sp_metrics_render_gaie(queued_all, running_all, all.block_tokens ? &all : NULL, &out);
    enum MHD_Result rc = sp_reply(front, c, SP_ROUTE_METRICS, oom || out.oom ? 503 : 200,
                                  "text/plain; version=0.0.4; charset=utf-8",
                                  out.p ? out.p : "", out.len);
    for (int i = 0; i <= ms->n; i++) sp_strbuf_free(&texts[i]);
    sp_strbuf_free(&out);
    free(texts), free(ptrs), free(labels);
    return rc;
}

/* The model a request names: its body's "model", else ?model=; "" when
 * it names none. */
static void requested_model(struct MHD_Connection *c, const sp_http_call *call, char *name,
                            size_t cap) {
    name[0] = '\0';
    cJSON *root = call->len ? cJSON_ParseWithLength(call->body, call->len) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "model");
    if (cJSON_IsString(v)) snprintf(name, cap, "%s", v->valuestring);
    else if (q) snprintf(name, cap, "%s", q);
    cJSON_Delete(root);
}

enum MHD_Result sp_model_set_dispatch(sp_server *front, struct MHD_Connection *c,
                                      sp_route_handler handler, const sp_http_call *call) {
    sp_model_set *ms = front->models;
    switch (call->route) {
    case SP_ROUTE_MODELS:
    case SP_ROUTE_MODEL: return list_models(front, c, call);
    case SP_ROUTE_METRICS: return render_metrics(front, c);
    case SP_ROUTE_HEALTH:
    case SP_ROUTE_INDEX: return handler(front, c, call);
    default: break;
    }
    sp_api_error e;
    if (!sp_server_serving(front, &e)) return sp_reply_error(front, c, call->route, &e);
    char name[512];
    requested_model(c, call, name, sizeof name);
    int i = 0;
    if (!name[0] && ms->n > 1) {
        sp_api_bad(&e, "model", "'model' is required: this server serves several models "
                   "(GET /v1/models lists them)");
        return sp_reply_error(front, c, call->route, &e);
    }
    while (name[0] && i < ms->n && strcmp(ms->e[i].name, name)) i++;
    if (i == ms->n) return reply_unknown(front, c, call, name);
    sp_server *srv = acquire(ms, i, &e);
    if (!srv) return sp_reply_error(front, c, call->route, &e);
    enum MHD_Result rc = handler(srv, c, call);
    release(ms, i);
    return rc;
}
