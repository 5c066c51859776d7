/* The key/value storage of one layer of one sequence: the mechanics under
 * runtime/seq_state.h, which decides when to grow or slide it.
 *
 * Layout: [n_kv_heads][capacity][head_dim] elements of `type` (f32, or
 * bf16/f16 rounded to nearest even on store), row r of a head holding
 * position base + r, so that the attention over one head streams contiguous
 * memory. A full cache keeps base 0; a sliding-window cache raises base as
 * old positions leave its window (sp_kv_buffer_relayout moves the rows it
 * keeps to the front). Stored bits are only ever copied, never converted
 * again, so a kept position reads back the same bits whatever the type. */
#ifndef SP_RUNTIME_KV_CACHE_H
#define SP_RUNTIME_KV_CACHE_H

#include <stddef.h>

#include "spindle.h"
#include "compute/ops.h"

typedef struct sp_kv_buffer {
    int n_kv_heads;
    int head_dim;
    sp_kv_dtype type;
    size_t elem_size;  /* bytes per element of `type` */
    int base;          /* position of row 0 */
    int capacity;      /* rows allocated per head */
    void *k, *v;       /* NULL until the first relayout */
} sp_kv_buffer;

/* Bytes of one element of `type`, 0 for a value outside the enum. */
size_t sp_kv_elem_size(sp_kv_dtype type);

/* An empty buffer (nothing allocated); SPINDLE_ERR_ARGUMENT for an unknown
 * type or non-positive sizes. */
spindle_status sp_kv_buffer_init(sp_kv_buffer *b, int n_kv_heads,
                                 int head_dim, sp_kv_dtype type,
                                 spindle_error *err);
void sp_kv_buffer_free(sp_kv_buffer *b);

/* Re-lay the buffer so that row 0 is position `base` (>= b->base) and each
 * head has `capacity` rows, keeping the stored rows of positions
 * [base, used_end) (used_end - base <= capacity). In place when the
 * capacity is unchanged; otherwise on failure (SPINDLE_ERR_MEMORY) the
 * buffer is unchanged. */
spindle_status sp_kv_buffer_relayout(sp_kv_buffer *b, int base, int capacity,
                                     int used_end, spindle_error *err);

/* Store the keys and values of `n_kv_heads * head_dim` floats for position
 * `pos` (base <= pos < base + capacity), converted to the buffer's type. */
void sp_kv_buffer_store(sp_kv_buffer *b, int pos, const float *k,
                        const float *v);

/* Copy positions [from, to) of every head as raw bytes to/from `dst`/`src`
 * laid out [2 (k, v)][n_kv_heads][to - from][head_dim] (the snapshot form). */
void sp_kv_buffer_read(const sp_kv_buffer *b, int from, int to, void *dst);
void sp_kv_buffer_write(sp_kv_buffer *b, int from, int to, const void *src);

/* Bytes of positions [from, to) in the read/write form above. */
size_t sp_kv_rows_bytes(const sp_kv_buffer *b, int from, int to);

/* Convert n floats to the cache element type `type` at dst (the rounding
 * sp_kv_buffer_store applies; exposed for the tests). */
void sp_kv_convert(void *dst, const float *src, size_t n, sp_kv_dtype type);

/* The view the attention kernel reads. */
sp_kv_view sp_kv_buffer_view(const sp_kv_buffer *b);

/* Bytes allocated. */
size_t sp_kv_buffer_bytes(const sp_kv_buffer *b);

#endif
