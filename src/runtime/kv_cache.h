/* The key/value cache of one sequence.
 *
 * Layout per layer: [n_kv_heads][capacity][head_dim] floats, so that the
 * attention over one head streams contiguous memory. Capacity grows by
 * doubling (re-laying each head); rolling back is just lowering `length`. */
#ifndef SP_RUNTIME_KV_CACHE_H
#define SP_RUNTIME_KV_CACHE_H

#include "spindle.h"
#include "compute/ops.h"

typedef struct sp_kv_cache {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int length;      /* positions filled */
    int capacity;    /* positions allocated */
    int max_length;  /* the model's context limit */
    float **k;       /* [n_layers] */
    float **v;
} sp_kv_cache;

spindle_status sp_kv_init(sp_kv_cache *c, int n_layers, int n_kv_heads,
                          int head_dim, int max_length, spindle_error *err);
void sp_kv_free(sp_kv_cache *c);

/* Make room for `length` positions (does not change c->length). */
spindle_status sp_kv_reserve(sp_kv_cache *c, int length, spindle_error *err);

/* Store the keys and values of `n_kv_heads * head_dim` floats for `pos`. */
void sp_kv_store(sp_kv_cache *c, int layer, int pos, const float *k,
                 const float *v);

/* View of one layer for the attention kernel. */
sp_kv_view sp_kv_layer(const sp_kv_cache *c, int layer);

#endif
