/* Kernel tables of the gated delta rule (linear_attention.h), one per
 * vector width, all instances of delta_net_simd.inc. */
#ifndef SP_COMPUTE_DELTA_NET_SIMD_H
#define SP_COMPUTE_DELTA_NET_SIMD_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/linear_attention/linear_attention.h"

/* One value head of one call: where its inputs, state and outputs are. */
typedef struct sp_delta_head {
    const float *q, *k;      /* its key head in token row 0 */
    int64_t qk_stride;
    const float *v;          /* its value head in token row 0 */
    int64_t v_stride;
    const float *log_g, *beta; /* its entry in token row 0 */
    int64_t gate_stride;     /* n_v_heads */
    float *state;            /* [v_dim][k_dim] */
    float *out;              /* its value head in token row 0 */
    int64_t out_stride;
    int k_dim, v_dim;
} sp_delta_head;

typedef struct sp_delta_kernels {
    const char *name;
    /* Whether this width handles the head sizes (vectors tile them). */
    bool (*covers)(int k_dim, int v_dim);
    /* Tokens t0 .. t0 + n - 1 one at a time; after token t0 + i the state
     * is copied to snaps[i] + snap_offset when snaps is not NULL. */
    void (*recurrent)(const sp_delta_head *h, int t0, int n,
                      float *const *snaps, int64_t snap_offset);
    /* Tokens t0 .. t0 + c - 1 (c <= SP_DELTA_CHUNK) as one chunk; scratch
     * holds sp_delta_chunk_scratch(k_dim, v_dim) floats. */
    void (*chunk)(const sp_delta_head *h, int t0, int c, float *scratch);
} sp_delta_kernels;

/* Floats of chunk scratch a head needs: G, L, QK, U, W of a chunk. */
static inline int64_t sp_delta_chunk_scratch(int k_dim, int v_dim) {
    const int64_t c = SP_DELTA_CHUNK;
    return c + 2 * c * c + c * ((int64_t)v_dim + k_dim);
}

extern const sp_delta_kernels sp_delta_kernels_portable;
#if defined(__x86_64__)
extern const sp_delta_kernels sp_delta_kernels_avx2;
extern const sp_delta_kernels sp_delta_kernels_avx512;
#elif defined(__aarch64__)
extern const sp_delta_kernels sp_delta_kernels_neon;
#endif

#endif
