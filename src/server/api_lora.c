/* The LoRA parts of the request bodies: a generation's "adapters"
 * (mlx_lm.server) and "lora" (llama-server), and vLLM's load / unload
 * bodies. Pure, like the rest of api_request.h. */
#include "server/api_request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAME 256
#define MAX_PATH_LEN 4096

static const cJSON *present(const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool read_string(const cJSON *v, const char *key, size_t max, char **out,
                        sp_api_error *err) {
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return sp_api_bad(err, key, "'%s' must be a non-empty string", key);
    if (strlen(v->valuestring) > max)
        return sp_api_bad(err, key, "'%s' is longer than %zu bytes", key, max);
    if (!(*out = strdup(v->valuestring)))
        return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    return true;
}

/* llama-server's [{"id": N, "scale": F}, ...]: entries with scale 0 are
 * off; at most one may be on (one adapter per request). */
static bool read_lora_list(const cJSON *list, sp_api_request *r, sp_api_error *err) {
    if (!cJSON_IsArray(list))
        return sp_api_bad(err, "lora", "'lora' must be an array of {id, scale}");
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *scale = cJSON_GetObjectItemCaseSensitive(e, "scale");
        if (!cJSON_IsObject(e) || !cJSON_IsNumber(id) ||
            id->valuedouble != floor(id->valuedouble) || id->valuedouble < 0 ||
            id->valuedouble > 1e9)
            return sp_api_bad(err, "lora", "each 'lora' entry needs an integer id >= 0");
        double s = 1;
        if (scale && !cJSON_IsNull(scale)) {
            if (!cJSON_IsNumber(scale) || !isfinite(scale->valuedouble) ||
                fabs(scale->valuedouble) > 1e4)
                return sp_api_bad(err, "lora", "'lora' scale must be a number in [-1e4, 1e4]");
            s = scale->valuedouble;
        }
        if (s == 0) continue;
        if (r->has_lora)
            return sp_api_bad(err, "lora", "at most one 'lora' entry may have a non-zero scale");
        r->has_lora = true;
        r->lora_id = (int)id->valuedouble;
        r->lora_scale = (float)s;
    }
    return true;
}

/* mlx_lm.server's "adapters": one name or path, or a list of them (an
 * empty list: none). */
static bool read_adapters(const cJSON *a, sp_api_request *r, sp_api_error *err) {
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 1;
    if (!cJSON_IsArray(a) && !cJSON_IsString(a))
        return sp_api_bad(err, "adapters", "'adapters' must be a string or an array of "
                          "strings (mounted adapters' names or paths)");
    if (n > SP_API_MAX_ADAPTERS)
        return sp_api_bad(err, "adapters", "'adapters' lists at most %d adapters",
                          SP_API_MAX_ADAPTERS);
    if (n && !(r->adapters = calloc((size_t)n, sizeof *r->adapters)))
        return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    if (cJSON_IsString(a)) {
        r->n_adapters = 1;
        return read_string(a, "adapters", MAX_PATH_LEN, &r->adapters[0], err);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!read_string(e, "adapters", MAX_PATH_LEN, &r->adapters[r->n_adapters], err))
            return false;
        r->n_adapters++;
    }
    return true;
}

bool sp_api_read_adapter_fields(const cJSON *root, sp_api_request *r,
                                sp_api_error *err) {
    const cJSON *a = present(root, "adapters");
    if (a && !read_adapters(a, r, err)) return false;
    const cJSON *l = present(root, "lora");
    return !l || read_lora_list(l, r, err);
}

bool sp_api_parse_lora_request(const char *body, size_t len, bool need_path,
                               char **name, char **path, sp_api_error *err) {
    *name = NULL;
    if (path) *path = NULL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    bool ok = cJSON_IsObject(root);
    if (!ok) sp_api_bad(err, NULL, "request body must be a JSON object");
    ok = ok && read_string(present(root, "lora_name"), "lora_name", MAX_NAME, name, err);
    if (ok && need_path)
        ok = read_string(present(root, "lora_path"), "lora_path", MAX_PATH_LEN, path, err);
    cJSON_Delete(root);
    if (!ok) {
        free(*name);
        *name = NULL;
    }
    return ok;
}
