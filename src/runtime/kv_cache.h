/* The key/value cache of one sequence.
 *
 * Layout per layer: [n_kv_heads][capacity][head_dim] elements of `type`
 * (f32, or bf16/f16 rounded to nearest even on store), so that the attention
 * over one head streams contiguous memory. Capacity grows by doubling
 * (re-laying each head); rolling back is just lowering `length`, and since a
 * stored position is never rewritten except by a new store, a prefix kept by
 * a rollback reads back the same bits whatever the type. */
#ifndef SP_RUNTIME_KV_CACHE_H
#define SP_RUNTIME_KV_CACHE_H

#include <stddef.h>

#include "spindle.h"
#include "compute/ops.h"

typedef struct sp_kv_cache {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int length;      /* positions filled */
    int capacity;    /* positions allocated */
    int max_length;  /* the model's context limit */
    sp_kv_dtype type;
    size_t elem_size; /* bytes per element of `type` */
    void **k;        /* [n_layers] */
    void **v;
} sp_kv_cache;

/* Bytes of one element of `type`, 0 for a value outside the enum. */
size_t sp_kv_elem_size(sp_kv_dtype type);

spindle_status sp_kv_init(sp_kv_cache *c, int n_layers, int n_kv_heads,
                          int head_dim, int max_length, sp_kv_dtype type,
                          spindle_error *err);
void sp_kv_free(sp_kv_cache *c);

/* Make room for `length` positions (does not change c->length). */
spindle_status sp_kv_reserve(sp_kv_cache *c, int length, spindle_error *err);

/* Store the keys and values of `n_kv_heads * head_dim` floats for `pos`,
 * converted to the cache's type. */
void sp_kv_store(sp_kv_cache *c, int layer, int pos, const float *k,
                 const float *v);

/* Convert n floats to the cache element type `type` at dst (the rounding
 * sp_kv_store applies; exposed for the tests). */
void sp_kv_convert(void *dst, const float *src, size_t n, sp_kv_dtype type);

/* View of one layer for the attention kernel. */
sp_kv_view sp_kv_layer(const sp_kv_cache *c, int layer);

#endif
