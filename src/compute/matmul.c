/* Matrix products y = x W^T against weights of every storage type.
 *
 * Work is split over output rows: each pool chunk is a contiguous block of
 * rows. Inside a chunk, rows are taken SP_MM_ROWS at a time and columns
 * SP_MM_COLS at a time: the tile of weights is decoded once to f32 (on the
 * stack, no allocation) and then dotted with every token's activations, so
 * the decode cost is shared by all tokens of a prefill, while a decode
 * matvec (one token) still streams each weight row exactly once. Dot products
 * keep independent partial sums per lane so that gcc vectorizes them
 * without -ffast-math. */
#include "compute/matmul.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "compute/matmul_internal.h"

#define SP_MM_ROWS 4    /* rows decoded per tile */
#define SP_MM_COLS 512  /* columns per tile: a multiple of every group size */
#define SP_MM_LANES 16  /* independent partial sums per dot */

static float sp_dot(const float *restrict a, const float *restrict x,
                    int64_t n) {
    float s[SP_MM_LANES] = {0};
    int64_t i = 0;
    /* Lane j sums elements j, j + LANES, ...: an order gcc may keep while
     * vectorizing (a single running sum would have to stay scalar). */
    for (; i + SP_MM_LANES <= n; i += SP_MM_LANES)
        for (int j = 0; j < SP_MM_LANES; j++) s[j] += a[i + j] * x[i + j];
    float t = 0;
    for (int j = 0; j < SP_MM_LANES; j++) t += s[j];
    for (; i < n; i++) t += a[i] * x[i];
    return t;
}

static void sp_fill_nan(float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = NAN;
}

typedef struct sp_mm_job {
    const sp_weight *w;
    const float *x;
    float *y;
    int n_tokens;
    bool direct; /* F32 rows are used in place (aligned data) */
} sp_mm_job;

static void sp_mm_range(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const sp_mm_job *job = ctx;
    const sp_weight *w = job->w;
    const int64_t rows = w->rows, cols = w->cols;
    _Alignas(64) float tile[SP_MM_ROWS][SP_MM_COLS];

    for (int64_t r = r0; r < r1; r += SP_MM_ROWS) {
        const int nr = r1 - r < SP_MM_ROWS ? (int)(r1 - r) : SP_MM_ROWS;
        for (int64_t k0 = 0; k0 < cols; k0 += SP_MM_COLS) {
            const int64_t kn = cols - k0 < SP_MM_COLS ? cols - k0 : SP_MM_COLS;
            const float *wr[SP_MM_ROWS];
            for (int i = 0; i < nr; i++) {
                if (job->direct) {
                    wr[i] = (const float *)w->data + (r + i) * cols + k0;
                } else {
                    sp_decode_span(w, r + i, k0, kn, tile[i]);
                    wr[i] = tile[i];
                }
            }
            for (int t = 0; t < job->n_tokens; t++) {
                const float *xt = job->x + (int64_t)t * cols + k0;
                float *yt = job->y + (int64_t)t * rows + r;
                float part[SP_MM_ROWS];
                for (int i = 0; i < nr; i++) part[i] = sp_dot(wr[i], xt, kn);
                for (int i = 0; i < nr; i++)
                    yt[i] = k0 == 0 ? part[i] : yt[i] + part[i];
            }
        }
    }
}

void sp_matmul(sp_pool *pool, const sp_weight *w, const float *x,
               int n_tokens, float *y) {
    if (!w || !x || !y || n_tokens <= 0) return;
    if (!sp_weight_usable(w)) {
        sp_fill_nan(y, (int64_t)n_tokens * w->rows);
        return;
    }
    sp_mm_job job = {
        .w = w,
        .x = x,
        .y = y,
        .n_tokens = n_tokens,
        .direct = w->type == SP_W_F32 &&
                  ((uintptr_t)w->data % _Alignof(float)) == 0,
    };
    /* One contiguous block of rows per thread, in whole row tiles. */
    const int threads = sp_pool_size(pool);
    int64_t grain = (w->rows + threads - 1) / threads;
    grain = (grain + SP_MM_ROWS - 1) / SP_MM_ROWS * SP_MM_ROWS;
    sp_pool_for(pool, w->rows, grain, sp_mm_range, &job);
}

void sp_weight_row(const sp_weight *w, int64_t r, float *out) {
    if (!w || !out || w->cols <= 0) return;
    if (!sp_weight_usable(w) || r < 0 || r >= w->rows) {
        sp_fill_nan(out, w->cols);
        return;
    }
    sp_decode_span(w, r, 0, w->cols, out);
}
