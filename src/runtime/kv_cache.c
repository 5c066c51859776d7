#include "runtime/kv_cache.h"
#include "base/error.h"
#include "compute/tensor.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t sp_kv_elem_size(sp_kv_dtype type) {
    switch (type) {
    case SP_KV_F32: return sizeof(float);
    case SP_KV_BF16:
    case SP_KV_F16: return sizeof(uint16_t);
    }
    return 0;
}

spindle_status sp_kv_init(sp_kv_cache *c, int n_layers, int n_kv_heads,
                          int head_dim, int max_length, sp_kv_dtype type,
                          spindle_error *err) {
    memset(c, 0, sizeof *c);
    size_t es = sp_kv_elem_size(type);
    if (!es)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "unknown KV cache type %d",
                       (int)type);
    c->n_layers = n_layers;
    c->n_kv_heads = n_kv_heads;
    c->head_dim = head_dim;
    c->max_length = max_length;
    c->type = type;
    c->elem_size = es;
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

/* Move every head's rows to the new capacity's stride. The stored bits are
 * copied, never converted again. */
static void *regrow(const void *old, int n_heads, size_t row_bytes,
                    int old_cap, int new_cap, int used) {
    unsigned char *p = malloc((size_t)n_heads * (size_t)new_cap * row_bytes);
    if (!p) return NULL;
    const unsigned char *o = old;
    for (int h = 0; o && h < n_heads; h++)
        memcpy(p + (size_t)h * new_cap * row_bytes,
               o + (size_t)h * old_cap * row_bytes, (size_t)used * row_bytes);
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
    const size_t row_bytes = (size_t)c->head_dim * c->elem_size;
    /* Allocate everything first so a failure leaves the cache unchanged. */
    size_t n = (size_t)c->n_layers * 2;
    void **fresh = calloc(n, sizeof *fresh);
    if (!fresh) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory for KV cache");
    for (int l = 0; l < c->n_layers; l++) {
        fresh[2 * l] = regrow(c->k[l], c->n_kv_heads, row_bytes, c->capacity, cap, c->length);
        fresh[2 * l + 1] = regrow(c->v[l], c->n_kv_heads, row_bytes, c->capacity, cap, c->length);
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

void sp_kv_convert(void *dst, const float *src, size_t n, sp_kv_dtype type) {
    switch (type) {
    case SP_KV_F32:
        memcpy(dst, src, n * sizeof(float));
        return;
    case SP_KV_BF16: {
        uint16_t *h = dst;
        for (size_t i = 0; i < n; i++) h[i] = sp_f32_to_bf16(src[i]);
        return;
    }
    case SP_KV_F16: {
        uint16_t *h = dst;
        for (size_t i = 0; i < n; i++) h[i] = sp_f32_to_f16(src[i]);
        return;
    }
    }
}

void sp_kv_store(sp_kv_cache *c, int layer, int pos, const float *k,
                 const float *v) {
    const size_t hd = (size_t)c->head_dim, es = c->elem_size;
    const size_t stride = (size_t)c->capacity * hd * es;
    unsigned char *kl = c->k[layer], *vl = c->v[layer];
    for (int h = 0; h < c->n_kv_heads; h++) {
        size_t at = h * stride + (size_t)pos * hd * es;
        sp_kv_convert(kl + at, k + h * hd, hd, c->type);
        sp_kv_convert(vl + at, v + h * hd, hd, c->type);
    }
}

sp_kv_view sp_kv_layer(const sp_kv_cache *c, int layer) {
    sp_kv_view view = {c->k[layer], c->v[layer],
                       (int64_t)c->capacity * c->head_dim, c->type};
    return view;
}
