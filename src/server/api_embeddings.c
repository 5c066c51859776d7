/* The /v1/embeddings request and response, as OpenAI defines them.
 * Pure functions, fuzzed by tests/fuzz/fuzz_server_request.c (its embeddings
 * route). */
#include "server/api_embeddings.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool is_token_list(const cJSON *a) {
    if (!cJSON_IsArray(a) || !a->child) return false;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) if (!cJSON_IsNumber(x)) return false;
    return true;
}

/* Token ids of list `a` appended at r->ids[*used]. */
static bool take_ids(const cJSON *a, const sp_api_limits *limits,
                     sp_api_embeddings *r, int *used, sp_api_error *err) {
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        double d = x->valuedouble;
        if (d != floor(d) || d < 0 || d >= limits->vocab_size)
            return sp_api_bad(err, "input",
                              "token id %.0f is not an integer in 0..%d", d,
                              limits->vocab_size - 1);
        r->ids[(*used)++] = (int32_t)d;
    }
    return true;
}

static bool read_input(const cJSON *v, const sp_api_limits *limits,
                       sp_api_embeddings *r, sp_api_error *err) {
    if (!v) return sp_api_bad(err, "input", "'input' is required");
    int n = cJSON_IsString(v) || is_token_list(v) ? 1
            : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0)
        return sp_api_bad(err, "input", "'input' must be a string, a list of "
                          "strings, of token ids or of token-id lists");
    if (n == 0) return sp_api_bad(err, "input", "'input' is an empty list");
    if (n > SP_API_MAX_EMBED_INPUTS)
        return sp_api_bad(err, "input", "'input' has %d items (at most %d)", n,
                          SP_API_MAX_EMBED_INPUTS);
    const bool single = n == 1 && !(cJSON_IsArray(v) && !is_token_list(v));
    int total = 0;
    const cJSON *x;
    if (!single)
        cJSON_ArrayForEach(x, v) {
            if (cJSON_IsArray(x) && !is_token_list(x))
                return sp_api_bad(err, "input", "'input' item is not a "
                                  "string or a non-empty token-id list");
            if (!cJSON_IsString(x) && !cJSON_IsArray(x))
                return sp_api_bad(err, "input", "'input' items must all be "
                                  "strings or all token-id lists");
            total += cJSON_GetArraySize(x);
        }
    else if (cJSON_IsArray(v))
        total = cJSON_GetArraySize(v);
    r->inputs = calloc((size_t)n, sizeof *r->inputs);
    r->ids = malloc((size_t)(total ? total : 1) * sizeof *r->ids);
    if (!r->inputs || !r->ids)
        return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    r->n_inputs = n;
    int used = 0, i = 0;
    const cJSON *one = single ? v : v->child;
    for (; one && i < n; one = single ? NULL : one->next, i++) {
        spindle_embed_input *in = &r->inputs[i];
        if (cJSON_IsString(one)) {
            in->text = one->valuestring;
            continue;
        }
        int first = used;
        if (!take_ids(one, limits, r, &used, err)) return false;
        in->n_tokens = used - first;
        in->tokens = r->ids + first;
    }
    return true;
}

static bool dup_string(const cJSON *root, const char *key, char **out,
                       sp_api_error *err) {
    const cJSON *v = field(root, key);
    if (!v) return true;
    if (!cJSON_IsString(v)) return sp_api_bad(err, key, "'%s' must be a string", key);
    if (!(*out = strdup(v->valuestring)))
        return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    return true;
}

static bool read_options(const cJSON *root, sp_api_embeddings *r,
                         sp_api_error *err) {
    const cJSON *v = field(root, "encoding_format");
    if (v && (!cJSON_IsString(v) || (strcmp(v->valuestring, "float") &&
                                     strcmp(v->valuestring, "base64"))))
        return sp_api_bad(err, "encoding_format",
                          "'encoding_format' must be \"float\" or \"base64\"");
    r->base64 = v && !strcmp(v->valuestring, "base64");
    if ((v = field(root, "dimensions"))) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
        if (d != floor(d) || d < 1 || d > 1 << 20)
            return sp_api_bad(err, "dimensions",
                              "'dimensions' must be a positive integer");
        r->dimensions = (int)d;
    }
    return dup_string(root, "prompt", &r->prompt, err) &&
           dup_string(root, "prompt_name", &r->prompt_name, err);
}

bool sp_api_parse_embeddings(const char *body, size_t len,
                             const sp_api_limits *limits,
                             sp_api_embeddings *r, sp_api_error *err) {
    memset(r, 0, sizeof *r);
    r->root = cJSON_ParseWithLength(body, len);
    if (!r->root || !cJSON_IsObject(r->root)) {
        sp_api_embeddings_free(r);
        return sp_api_bad(err, NULL, "request body must be a JSON object");
    }
    const cJSON *model;
    bool ok = sp_api_check_model(r->root, limits, &model, err) &&
              (!model || dup_string(r->root, "model", &r->model, err)) &&
              read_input(field(r->root, "input"), limits, r, err) &&
              read_options(r->root, r, err);
    if (!ok) sp_api_embeddings_free(r);
    return ok;
}

void sp_api_embeddings_free(sp_api_embeddings *r) {
    free(r->inputs);
    free(r->ids);
    free(r->prompt);
    free(r->prompt_name);
    free(r->model);
    cJSON_Delete(r->root);
    memset(r, 0, sizeof *r);
}

/* base64 (RFC 4648, padded) of n little-endian f32 values. */
static char *base64_floats(const float *v, int n) {
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t bytes = (size_t)n * 4;
    unsigned char *b = malloc(bytes ? bytes : 1);
    char *s = malloc((bytes + 2) / 3 * 4 + 1);
    if (!b || !s) {
        free(b);
        free(s);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    size_t o = 0;
    for (size_t i = 0; i < bytes; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16;
        if (i + 1 < bytes) w |= (uint32_t)b[i + 1] << 8;
        if (i + 2 < bytes) w |= b[i + 2];
        s[o++] = tab[(w >> 18) & 63];
        s[o++] = tab[(w >> 12) & 63];
        s[o++] = i + 1 < bytes ? tab[(w >> 6) & 63] : '=';
        s[o++] = i + 2 < bytes ? tab[w & 63] : '=';
    }
    s[o] = '\0';
    free(b);
    return s;
}

static cJSON *embedding_value(const float *v, int width, bool base64) {
    if (!base64) return cJSON_CreateFloatArray(v, width);
    char *s = base64_floats(v, width);
    cJSON *j = s ? cJSON_CreateString(s) : NULL;
    free(s);
    return j;
}

char *sp_api_embeddings_response(const sp_api_embeddings *r, const char *model,
                                 const float *out, int width,
                                 int64_t prompt_tokens) {
    cJSON *root = cJSON_CreateObject();
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    bool ok = root && data;
    for (int i = 0; ok && i < r->n_inputs; i++) {
        cJSON *item = cJSON_CreateObject();
        cJSON *e = embedding_value(out + (size_t)i * width, width, r->base64);
        ok = item && e && cJSON_AddItemToArray(data, item);
        if (!ok) {
            cJSON_Delete(item);
            cJSON_Delete(e);
            break;
        }
        cJSON_AddStringToObject(item, "object", "embedding");
        cJSON_AddNumberToObject(item, "index", i);
        cJSON_AddItemToObject(item, "embedding", e);
    }
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *usage = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)prompt_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)prompt_tokens);
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return json;
}
