/* LoRA adapters in the server: the mounted table, vLLM's
 * /v1/load_lora_adapter and /v1/unload_lora_adapter, llama-server's
 * GET /lora-adapters, and the choice of a request's adapter. */
#include "server/state.h"
#include "base/log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void sp_adapters_init(sp_adapters *t) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
}

static void entry_free(sp_adapter_entry *e) {
    spindle_adapter_unload(e->adapter);
    free(e->name);
    free(e->path);
}

void sp_adapters_free(sp_adapters *t) {
    for (int i = 0; i < t->n; i++) entry_free(&t->v[i]);
    free(t->v);
    free(t->root);
    pthread_mutex_destroy(&t->lock);
    memset(t, 0, sizeof *t);
}

static sp_adapter_entry *find(sp_adapters *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->v[i].name, name)) return &t->v[i];
    return NULL;
}

bool sp_is_base_model(const sp_server *s, const char *model) {
    for (int i = 0; i < 2; i++)
        if (s->model_names[i] && !strcmp(model, s->model_names[i])) return true;
    return false;
}

static bool exists(sp_server *s, const char *name, sp_api_error *e) {
    if (sp_is_base_model(s, name))
        return !sp_api_bad(e, "lora_name", "'%.200s' is the base model's name", name);
    pthread_mutex_lock(&s->adapters.lock);
    bool dup = find(&s->adapters, name) != NULL;
    pthread_mutex_unlock(&s->adapters.lock);
    if (dup)
        sp_api_bad(e, "lora_name", "The lora adapter '%.200s' has already been loaded.", name);
    return dup;
}

/* Names go into /metrics labels and comma-separated lists. */
static bool valid_name(const char *name) {
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p <= ' ' || *p == '"' || *p == '\\' || *p == ',' || *p == 0x7f) return false;
    return name[0] != 0;
}

/* The one answer of the load route to a lora_path it will not load,
 * whatever the reason (adapter_dir.c). */
static bool not_in_folder(sp_api_error *e) {
    return sp_api_fail(e, 404, "invalid_request_error", "lora_path", "not_found",
                       "lora_path names no adapter in the server's adapter folder (a "
                       "path relative to --lora-dir, without '..')");
}

/* Load `path` and mount it as `name`, listed with `shown` as its path;
 * `confined`: a runtime load from the --lora-dir, whose file errors read
 * as not_in_folder and whose messages name files relative to it. */
static bool add_entry(sp_server *s, const char *name, const char *path, const char *shown,
                      bool confined, sp_api_error *e) {
    if (!valid_name(name))
        return sp_api_bad(e, "lora_name", "a LoRA adapter name must be printable ASCII "
                          "without spaces, quotes, backslashes or commas");
    if (exists(s, name, e)) return false;
    spindle_error err = {0};
    spindle_adapter *a = NULL;
    spindle_status st = spindle_adapter_load(s->model, path, &a, &err);
    if (st && confined && st == SPINDLE_ERR_IO) return not_in_folder(e);
    if (st) {
        if (confined) sp_adapter_dir_hide_root(&s->adapters, err.message);
        sp_api_error_from_status(e, st == SPINDLE_ERR_IO ? SPINDLE_ERR_ARGUMENT : st,
                                 "lora_path", err.message);
        return false;
    }
    path = shown;
    sp_adapters *t = &s->adapters;
    pthread_mutex_lock(&t->lock);
    bool ok = !find(t, name);
    if (ok && t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 8;
        sp_adapter_entry *v = realloc(t->v, (size_t)cap * sizeof *v);
        if (v) {
            t->v = v;
            t->cap = cap;
        }
        ok = v != NULL;
    }
    sp_adapter_entry en = {.name = strdup(name), .path = strdup(path),
                           .id = t->next_id, .adapter = a};
    ok = ok && en.name && en.path;
    if (ok) {
        t->v[t->n++] = en;
        t->next_id++;
    }
    pthread_mutex_unlock(&t->lock);
    if (!ok) {
        entry_free(&en);
        sp_api_bad(e, "lora_name", "The lora adapter '%.200s' could not be added "
                   "(loaded twice at once, or out of memory).", name);
    }
    return ok;
}

bool sp_adapters_add(sp_server *s, const char *name, const char *path,
                     sp_api_error *e) {
    return add_entry(s, name, path, path, false, e);
}

static bool remove_adapter(sp_server *s, const char *name, sp_api_error *e) {
    sp_adapters *t = &s->adapters;
    pthread_mutex_lock(&t->lock);
    sp_adapter_entry *en = find(t, name), gone = {0};
    if (en) {
        gone = *en;
        memmove(en, en + 1, (size_t)(t->v + t->n - en - 1) * sizeof *en);
        t->n--;
    }
    pthread_mutex_unlock(&t->lock);
    if (!en)
        return sp_api_fail(e, 404, "invalid_request_error", "lora_name", "not_found",
                           "The lora adapter '%.200s' cannot be found.", name);
    entry_free(&gone);   /* running requests keep their own reference */
    return true;
}

/* The mounted adapter named `want` (its name or its path), else NULL with
 * a 404 in *e. */
static sp_adapter_entry *find_named(sp_adapters *t, const char *want, sp_api_error *e) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->v[i].name, want) || !strcmp(t->v[i].path, want)) return &t->v[i];
    sp_api_fail(e, 404, "invalid_request_error", "adapters", "model_not_found",
                "no mounted adapter is named '%.200s' (load it first)", want);
    return NULL;
}

/* Which entry the request names; NULL with *e set when it names one that
 * is not mounted, NULL with e->http_status 0 for the base model. */
static sp_adapter_entry *pick(sp_server *s, const sp_api_request *r, sp_api_error *e) {
    sp_adapters *t = &s->adapters;
    e->http_status = 0;
    if (r->has_lora) {
        for (int i = 0; i < t->n; i++)
            if (t->v[i].id == r->lora_id) return &t->v[i];
        sp_api_bad(e, "lora", "no LoRA adapter has id %d (GET /lora-adapters)", r->lora_id);
        return NULL;
    }
    if (r->n_adapters == 1) return find_named(t, r->adapters[0], e);
    if (!r->model || sp_is_base_model(s, r->model)) return NULL;
    sp_adapter_entry *en = find(t, r->model);
    if (!en)
        sp_api_fail(e, 404, "invalid_request_error", "model", "model_not_found",
                    "The model '%.200s' does not exist (this server serves '%.150s'"
                    " and its adapters)", r->model, s->model_names[0]);
    return en;
}

/* Several "adapters" at once: one adapter summing them (as `spindle run
 * --lora A --lora B` does), the request's own; their names joined by
 * commas. (lock) */
static bool stack_named(sp_server *s, sp_api_request *r, sp_api_error *e) {
    const spindle_adapter *parts[SP_API_MAX_ADAPTERS];
    sp_strbuf names = {0};
    int n = r->n_adapters < SP_API_MAX_ADAPTERS ? r->n_adapters : SP_API_MAX_ADAPTERS;
    for (int i = 0; i < n; i++) {
        sp_adapter_entry *en = find_named(&s->adapters, r->adapters[i], e);
        if (!en) {
            sp_strbuf_free(&names);
            return false;
        }
        parts[i] = en->adapter;
        sp_strbuf_printf(&names, "%s%s", i ? "," : "", en->name);
    }
    spindle_error err = {0};
    spindle_status st = spindle_adapter_stack(s->model, parts, NULL, n, &r->stacked_adapter,
                                              &err);
    if (!st && names.oom) st = SPINDLE_ERR_MEMORY;
    if (st) {
        sp_strbuf_free(&names);
        sp_api_error_from_status(e, st, "adapters", err.message);
        return false;
    }
    free(r->adapter_name);
    r->adapter_name = names.p;   /* the buffer's text, now the request's */
    r->gen.adapter = r->stacked_adapter;
    r->gen.adapter_scale = 0;
    return true;
}

bool sp_adapters_select_lock(sp_server *s, sp_api_request *r, sp_api_error *e) {
    pthread_mutex_lock(&s->adapters.lock);
    if (r->n_adapters > 1 && !r->has_lora) {
        bool ok = stack_named(s, r, e);
        if (!ok) pthread_mutex_unlock(&s->adapters.lock);
        return ok;
    }
    sp_adapter_entry *en = pick(s, r, e);
    if (!en && e->http_status) {
        pthread_mutex_unlock(&s->adapters.lock);
        return false;
    }
    r->gen.adapter = en ? en->adapter : NULL;
    free(r->adapter_name);
    r->adapter_name = en ? strdup(en->name) : NULL;   /* NULL: not in /metrics */
    r->gen.adapter_scale = en && r->has_lora ? r->lora_scale : 0;
    return true;
}

void sp_adapters_unlock(sp_server *s) { pthread_mutex_unlock(&s->adapters.lock); }

void sp_adapter_key_describe(const unsigned char key[SPINDLE_ADAPTER_KEY_BYTES],
                             char *hex, float *scale) {
    for (int i = 0; i < SP_ADAPTER_IDENTITY_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    memcpy(scale, key + SP_ADAPTER_IDENTITY_BYTES, sizeof *scale);
}

bool sp_adapters_find_identity(sp_server *s,
                               const unsigned char key[SPINDLE_ADAPTER_KEY_BYTES],
                               char *name, char *loaded, size_t cap) {
    char want_hex[2 * SP_ADAPTER_IDENTITY_BYTES + 1];
    float scale;
    sp_adapter_key_describe(key, want_hex, &scale);
    bool found = false;
    size_t at = 0;
    loaded[0] = '\0';
    pthread_mutex_lock(&s->adapters.lock);
    for (int i = 0; i < s->adapters.n && !found; i++) {
        const sp_adapter_entry *en = &s->adapters.v[i];
        unsigned char have[SPINDLE_ADAPTER_KEY_BYTES];
        spindle_adapter_key(en->adapter, scale, have);
        if (!memcmp(have, key, SP_ADAPTER_IDENTITY_BYTES)) {
            snprintf(name, cap, "%s", en->name);
            found = true;
        } else if (at < cap) {
            char hex[2 * SP_ADAPTER_IDENTITY_BYTES + 1];
            float same;
            sp_adapter_key_describe(have, hex, &same);
            int w = snprintf(loaded + at, cap - at, "%s%s (identity %s)",
                             at ? ", " : "", en->name, hex);
            at += w > 0 ? (size_t)w : 0;
        }
    }
    pthread_mutex_unlock(&s->adapters.lock);
    if (!found && !loaded[0]) snprintf(loaded, cap, "none");
    return found;
}

static enum MHD_Result reply_text(sp_server *s, struct MHD_Connection *c, sp_route route,
                                  const char *fmt, const char *name) {
    char msg[400];
    int n = snprintf(msg, sizeof msg, fmt, name);
    return sp_reply(s, c, route, 200, "text/plain; charset=utf-8", msg,
                    n < (int)sizeof msg ? (size_t)n : sizeof msg - 1);
}

/* vLLM refuses both routes unless runtime updates are enabled. */
static bool runtime_loading(const sp_server *s, sp_api_error *e) {
    if (s->adapters.root) return true;
    return sp_api_fail(e, 404, "invalid_request_error", NULL, "not_found",
                       "loading and unloading adapters at run time is off (start the "
                       "server with --lora-dir DIR to load adapters from DIR)");
}

enum MHD_Result sp_handle_load_lora(sp_server *s, struct MHD_Connection *c,
                                    const sp_http_call *call) {
    sp_api_error e;
    char *name, *path;
    if (!runtime_loading(s, &e) ||
        !sp_api_parse_lora_request(call->body, call->len, true, &name, &path, &e))
        return sp_reply_error(s, c, SP_ROUTE_LORA_LOAD, &e);
    char *real = sp_adapter_dir_resolve(&s->adapters, path);
    bool ok = real ? add_entry(s, name, real, path, true, &e) : not_in_folder(&e);
    free(real);
    enum MHD_Result rc = ok ? reply_text(s, c, SP_ROUTE_LORA_LOAD,
                                         "Success: LoRA adapter '%.200s' added successfully.", name)
                            : sp_reply_error(s, c, SP_ROUTE_LORA_LOAD, &e);
    free(name);
    free(path);
    return rc;
}

enum MHD_Result sp_handle_unload_lora(sp_server *s, struct MHD_Connection *c,
                                      const sp_http_call *call) {
    sp_api_error e;
    char *name;
    if (!runtime_loading(s, &e) ||
        !sp_api_parse_lora_request(call->body, call->len, false, &name, NULL, &e))
        return sp_reply_error(s, c, SP_ROUTE_LORA_UNLOAD, &e);
    bool ok = remove_adapter(s, name, &e);
    enum MHD_Result rc = ok ? reply_text(s, c, SP_ROUTE_LORA_UNLOAD,
                                         "Success: LoRA adapter '%.200s' removed successfully.", name)
                            : sp_reply_error(s, c, SP_ROUTE_LORA_UNLOAD, &e);
    free(name);
    return rc;
}

/* llama-server's list: [{"id", "path", "scale"}], plus the name. */
enum MHD_Result sp_handle_list_lora(sp_server *s, struct MHD_Connection *c,
                                    const sp_http_call *call) {
    cJSON *list = cJSON_CreateArray();
    pthread_mutex_lock(&s->adapters.lock);
    for (int i = 0; i < s->adapters.n; i++) {
        const sp_adapter_entry *en = &s->adapters.v[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", en->id);
        cJSON_AddStringToObject(o, "name", en->name);
        cJSON_AddStringToObject(o, "path", en->path);
        cJSON_AddNumberToObject(o, "scale", spindle_adapter_scale(en->adapter));
        cJSON_AddNumberToObject(o, "rank", spindle_adapter_rank(en->adapter));
        cJSON_AddItemToArray(list, o);
    }
    pthread_mutex_unlock(&s->adapters.lock);
    char *json = cJSON_PrintUnformatted(list);
    cJSON_Delete(list);
    return sp_reply_json(s, c, SP_ROUTE_LORA_LIST, 200, json);
}

bool sp_mount_cli_adapters(sp_server *s) {
    if (!sp_adapter_dir_open(&s->adapters, s->opts.lora_dir)) return false;
    for (int i = 0; i < s->opts.n_loras; i++) {
        const char *spec = s->opts.loras[i], *eq = strchr(spec, '=');
        char name[256];
        sp_api_error e;
        if (!eq || eq == spec || !eq[1] || (size_t)(eq - spec) >= sizeof name) {
            sp_log(SPINDLE_LOG_ERROR, "--lora expects NAME=PATH, got '%s'", spec);
            return false;
        }
        memcpy(name, spec, (size_t)(eq - spec));
        name[eq - spec] = '\0';
        if (!sp_adapters_add(s, name, eq + 1, &e)) {
            sp_log(SPINDLE_LOG_ERROR, "--lora %s: %s", spec, e.message);
            return false;
        }
    }
    return true;
}

void sp_adapters_render_metrics(sp_server *s, sp_strbuf *out) {
    sp_strbuf running = {0}, waiting = {0};
    sp_jobs_adapter_names(s, &running, &waiting);
    sp_strbuf_printf(out, "# HELP vllm:lora_requests_info Adapters of the requests running "
                     "and waiting (Gateway API Inference Extension).\n"
                     "# TYPE vllm:lora_requests_info gauge\n"
                     "vllm:lora_requests_info{max_lora=\"%d\",running_lora_adapters=\"%s\","
                     "waiting_lora_adapters=\"%s\"} %lld\n",
                     s->opts.parallel, running.p ? running.p : "",
                     waiting.p ? waiting.p : "", (long long)time(NULL));
    sp_strbuf_free(&running);
    sp_strbuf_free(&waiting);
}

static cJSON *adapter_model(const sp_server *s, const sp_adapter_entry *en) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", en->name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "spindle");
    cJSON_AddStringToObject(m, "root", en->path);
    cJSON_AddStringToObject(m, "parent", s->model_names[0]);
    return m;
}

void sp_adapters_list_models(sp_server *s, cJSON *data) {
    pthread_mutex_lock(&s->adapters.lock);
    for (int i = 0; i < s->adapters.n; i++)
        cJSON_AddItemToArray(data, adapter_model(s, &s->adapters.v[i]));
    pthread_mutex_unlock(&s->adapters.lock);
}

cJSON *sp_adapters_model(sp_server *s, const char *name) {
    pthread_mutex_lock(&s->adapters.lock);
    sp_adapter_entry *en = find(&s->adapters, name);
    cJSON *m = en ? adapter_model(s, en) : NULL;
    pthread_mutex_unlock(&s->adapters.lock);
    return m;
}
