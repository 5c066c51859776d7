/* A layer's KV rows (kv_cache.h): f32, bf16 or f16,
 * [heads][capacity][head_dim] from position `base`, slid forward by a
 * sliding-window layer. */
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

spindle_status sp_kv_buffer_init(sp_kv_buffer *b, int n_kv_heads,
                                 int head_dim, sp_kv_dtype type,
                                 spindle_error *err) {
    memset(b, 0, sizeof *b);
    size_t es = sp_kv_elem_size(type);
    if (!es)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "unknown KV cache type %d",
                       (int)type);
    if (n_kv_heads <= 0 || head_dim <= 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "KV cache of %d heads of %d elements", n_kv_heads,
                       head_dim);
    b->n_kv_heads = n_kv_heads;
    b->head_dim = head_dim;
    b->type = type;
    b->elem_size = es;
    return SPINDLE_OK;
}

void sp_kv_buffer_free(sp_kv_buffer *b) {
    if (!b) return;
    free(b->k);
    free(b->v);
    b->k = b->v = NULL;
    b->capacity = 0;
    b->base = 0;
}

static size_t row_bytes(const sp_kv_buffer *b) {
    return (size_t)b->head_dim * b->elem_size;
}

/* Rows [first, first + n) of every head of `old` (rows per head old_cap)
 * to rows [0, n) of `dst` (rows per head new_cap); memmove, so dst may be
 * old when the capacities agree. */
static void move_rows(unsigned char *dst, const unsigned char *old,
                      int n_heads, size_t rb, int old_cap, int new_cap,
                      int first, int n) {
    for (int h = 0; old && n > 0 && h < n_heads; h++)
        memmove(dst + (size_t)h * new_cap * rb,
                old + ((size_t)h * old_cap + (size_t)first) * rb,
                (size_t)n * rb);
}

spindle_status sp_kv_buffer_relayout(sp_kv_buffer *b, int base, int capacity,
                                     int used_end, spindle_error *err) {
    const size_t rb = row_bytes(b);
    int first = base - b->base, n = used_end - base;
    if (n < 0 || !b->k) n = 0;
    if (capacity == b->capacity && b->k) {
        move_rows(b->k, b->k, b->n_kv_heads, rb, capacity, capacity, first, n);
        move_rows(b->v, b->v, b->n_kv_heads, rb, capacity, capacity, first, n);
        b->base = base;
        return SPINDLE_OK;
    }
    const size_t bytes = (size_t)b->n_kv_heads * (size_t)capacity * rb;
    unsigned char *k = malloc(bytes), *v = malloc(bytes);
    if (!k || !v) {
        free(k);
        free(v);
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "out of memory growing a KV cache to %d tokens",
                       capacity);
    }
    move_rows(k, b->k, b->n_kv_heads, rb, b->capacity, capacity, first, n);
    move_rows(v, b->v, b->n_kv_heads, rb, b->capacity, capacity, first, n);
    free(b->k);
    free(b->v);
    b->k = k;
    b->v = v;
    b->capacity = capacity;
    b->base = base;
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

void sp_kv_buffer_store(sp_kv_buffer *b, int pos, const float *k,
                        const float *v) {
    const size_t hd = (size_t)b->head_dim, rb = row_bytes(b);
    const size_t stride = (size_t)b->capacity * rb;
    const size_t row = (size_t)(pos - b->base) * rb;
    unsigned char *kl = b->k, *vl = b->v;
    for (int h = 0; h < b->n_kv_heads; h++) {
        sp_kv_convert(kl + h * stride + row, k + h * hd, hd, b->type);
        sp_kv_convert(vl + h * stride + row, v + h * hd, hd, b->type);
    }
}

size_t sp_kv_rows_bytes(const sp_kv_buffer *b, int from, int to) {
    return to > from ? 2 * (size_t)b->n_kv_heads * (size_t)(to - from) *
                           row_bytes(b)
                     : 0;
}

/* The rows of positions [from, to) of head h of k (kv 0) or v (kv 1). */
static unsigned char *rows_at(const sp_kv_buffer *b, int kv, int h,
                              int from) {
    unsigned char *base = kv ? b->v : b->k;
    return base + ((size_t)h * b->capacity + (size_t)(from - b->base)) *
                      row_bytes(b);
}

void sp_kv_buffer_read(const sp_kv_buffer *b, int from, int to, void *dst) {
    if (to <= from) return;
    const size_t n = (size_t)(to - from) * row_bytes(b);
    unsigned char *out = dst;
    for (int kv = 0; kv < 2; kv++)
        for (int h = 0; h < b->n_kv_heads; h++, out += n)
            memcpy(out, rows_at(b, kv, h, from), n);
}

void sp_kv_buffer_write(sp_kv_buffer *b, int from, int to, const void *src) {
    if (to <= from) return;
    const size_t n = (size_t)(to - from) * row_bytes(b);
    const unsigned char *in = src;
    for (int kv = 0; kv < 2; kv++)
        for (int h = 0; h < b->n_kv_heads; h++, in += n)
            memcpy(rows_at(b, kv, h, from), in, n);
}

sp_kv_view sp_kv_buffer_view(const sp_kv_buffer *b) {
    sp_kv_view view = {.k = b->k, .v = b->v,
                       .head_stride = (int64_t)b->capacity * b->head_dim,
                       .type = b->type, .first_key_pos = b->base};
    return view;
}

size_t sp_kv_buffer_bytes(const sp_kv_buffer *b) {
    return b->k ? 2 * (size_t)b->n_kv_heads * (size_t)b->capacity *
                      row_bytes(b)
                : 0;
}
