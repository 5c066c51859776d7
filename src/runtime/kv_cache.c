#include "runtime/kv_cache.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

spindle_status sp_kv_init(sp_kv_cache *c, int n_layers, int n_kv_heads,
                          int head_dim, int max_length, spindle_error *err) {
    memset(c, 0, sizeof *c);
    c->n_layers = n_layers;
    c->n_kv_heads = n_kv_heads;
    c->head_dim = head_dim;
    c->max_length = max_length;
    c->k = calloc((size_t)n_layers, sizeof *c->k);
    c->v = calloc((size_t)n_layers, sizeof *c->v);
    if (!c->k || !c->v) {
        sp_kv_free(c);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory for KV cache");
    }
    return SPINDLE_OK;
}

void sp_kv_free(sp_kv_cache *c) {
    if (!c) return;
    for (int l = 0; c->k && l < c->n_layers; l++) free(c->k[l]);
    for (int l = 0; c->v && l < c->n_layers; l++) free(c->v[l]);
    free(c->k);
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* Move every head's rows to the new capacity's stride. */
static float *regrow(float *old, int n_heads, int head_dim, int old_cap,
                     int new_cap, int used) {
    size_t row = (size_t)head_dim;
    float *p = malloc((size_t)n_heads * (size_t)new_cap * row * sizeof(float));
    if (!p) return NULL;
    for (int h = 0; old && h < n_heads; h++)
        memcpy(p + (size_t)h * new_cap * row, old + (size_t)h * old_cap * row,
               (size_t)used * row * sizeof(float));
    return p;
}

spindle_status sp_kv_reserve(sp_kv_cache *c, int length, spindle_error *err) {
    if (length <= c->capacity) return SPINDLE_OK;
    if (c->max_length > 0 && length > c->max_length)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "context of %d tokens exceeds the limit of %d", length,
                       c->max_length);
    int cap = c->capacity ? c->capacity : 256;
    while (cap < length) cap = cap > (1 << 29) ? length : cap * 2;
    if (c->max_length > 0 && cap > c->max_length) cap = c->max_length;
    /* Allocate everything first so a failure leaves the cache unchanged. */
    size_t n = (size_t)c->n_layers * 2;
    float **fresh = calloc(n, sizeof *fresh);
    if (!fresh) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory for KV cache");
    for (int l = 0; l < c->n_layers; l++) {
        fresh[2 * l] = regrow(c->k[l], c->n_kv_heads, c->head_dim, c->capacity, cap, c->length);
        fresh[2 * l + 1] = regrow(c->v[l], c->n_kv_heads, c->head_dim, c->capacity, cap, c->length);
        if (!fresh[2 * l] || !fresh[2 * l + 1]) {
            for (size_t i = 0; i < n; i++) free(fresh[i]);
            free(fresh);
            return sp_fail(err, SPINDLE_ERR_MEMORY,
                           "out of memory growing the KV cache to %d tokens", cap);
        }
    }
    for (int l = 0; l < c->n_layers; l++) {
        free(c->k[l]);
        free(c->v[l]);
        c->k[l] = fresh[2 * l];
        c->v[l] = fresh[2 * l + 1];
    }
    free(fresh);
    c->capacity = cap;
    return SPINDLE_OK;
}

void sp_kv_store(sp_kv_cache *c, int layer, int pos, const float *k,
                 const float *v) {
    size_t hd = (size_t)c->head_dim, stride = (size_t)c->capacity * hd;
    for (int h = 0; h < c->n_kv_heads; h++) {
        memcpy(c->k[layer] + h * stride + (size_t)pos * hd, k + h * hd, hd * sizeof(float));
        memcpy(c->v[layer] + h * stride + (size_t)pos * hd, v + h * hd, hd * sizeof(float));
    }
}

sp_kv_view sp_kv_layer(const sp_kv_cache *c, int layer) {
    sp_kv_view view = {c->k[layer], c->v[layer],
                       (int64_t)c->capacity * c->head_dim};
    return view;
}
