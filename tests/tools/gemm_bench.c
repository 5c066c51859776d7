/* Prefill GEMM benchmark: sp_mm_gemm_vnni (int8-split activations, levels
 * 1..3) against sp_matmul's f32 tile path, on MLX affine weights.
 *
 *   gemm_bench ROWS COLS BITS N_TOKENS THREADS [GROUP]
 *     BITS 4 or 8, GROUP 32/64/128 (default 64), bf16 scales.
 *
 * The VNNI kernel is driven like sp_matmul drives its kernels: one
 * contiguous block of rows per thread through the pool (whole 32-row
 * panels). Prints the best of a few samples in GFLOP/s (2 rows cols tokens
 * per product) and the largest difference from the f32 path relative to the
 * largest |y|. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "compute/matmul/matmul.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/matmul/matmul_vnni_gemm.h"
#include "compute/threadpool.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct vnni_job {
    const sp_weight *w;
    const float *x;
    float *y;
    int nt, levels;
    int failed;
} vnni_job;

static void vnni_range(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    vnni_job *j = ctx;
    if (!sp_mm_gemm_vnni(j->w, j->x, j->nt, j->y, r0, r1, j->levels))
        j->failed = 1;
}

static void run_vnni(sp_pool *pool, vnni_job *j) {
    const int threads = sp_pool_size(pool);
    int64_t grain = (j->w->rows + threads - 1) / threads;
    grain = (grain + 31) / 32 * 32;
    sp_pool_for(pool, j->w->rows, grain, vnni_range, j);
}

/* Best seconds per call over ~0.25 s samples; levels 0 = sp_matmul. */
static double time_it(sp_pool *pool, const sp_weight *w, const float *x,
                      int nt, float *y, int levels) {
    vnni_job j = {w, x, y, nt, levels, 0};
    double best = 1e30;
    for (int s = 0; s < 4; s++) {
        int reps = 0;
        const double t0 = now();
        double t;
        do {
            if (levels == 0) sp_matmul(pool, w, x, nt, y);
            else run_vnni(pool, &j);
            reps++;
            t = now() - t0;
        } while (t < 0.25);
        if (t / reps < best) best = t / reps;
    }
    if (j.failed) {
        fprintf(stderr, "sp_mm_gemm_vnni declined the weight\n");
        exit(1);
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s ROWS COLS 4|8 N_TOKENS THREADS [GROUP]\n", argv[0]);
        return 2;
    }
    const int64_t rows = atoll(argv[1]), cols = atoll(argv[2]);
    const int bits = atoi(argv[3]), nt = atoi(argv[4]), threads = atoi(argv[5]);
    const int gs = argc > 6 ? atoi(argv[6]) : 64;
    if (rows <= 0 || cols <= 0 || (bits != 4 && bits != 8) || nt <= 0 ||
        threads <= 0 || gs <= 0 || cols % gs) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    const size_t data_bytes = (size_t)(rows * cols) * (size_t)bits / 8;
    const size_t groups = (size_t)(rows * (cols / gs));
    uint8_t *data = malloc(data_bytes);
    uint16_t *qp = malloc(2 * 2 * groups);
    float *x = malloc(sizeof(float) * (size_t)nt * (size_t)cols);
    float *y0 = malloc(sizeof(float) * (size_t)nt * (size_t)rows);
    float *y1 = malloc(sizeof(float) * (size_t)nt * (size_t)rows);
    if (!data || !qp || !x || !y0 || !y1) return 1;
    uint32_t s = 12345;
    for (size_t i = 0; i < data_bytes; i++) {
        s = s * 1664525u + 1013904223u;
        data[i] = (uint8_t)(s >> 24);
    }
    for (size_t i = 0; i < groups; i++) {
        qp[i] = 0x3c00 - 0x0600;          /* scale 2^-6 (bf16 of ~0.0156) */
        qp[groups + i] = 0xbc00 - 0x0300; /* bias about -0.03 */
    }
    for (size_t i = 0; i < (size_t)nt * (size_t)cols; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 2.0f;
    }
    const sp_weight w = {
        .type = SP_W_AFFINE, .rows = rows, .cols = cols, .data = data,
        .bits = bits, .group_size = gs, .qparam_dtype = SP_DTYPE_BF16,
        .scales = qp, .biases = qp + groups,
    };
    if (!sp_mm_gemm_vnni(&w, x, nt, y1, 0, 0, 1)) {
        fprintf(stderr, "sp_mm_gemm_vnni does not cover this CPU / weight\n");
        return 1;
    }
    sp_pool *pool = threads > 1 ? sp_pool_create(threads) : NULL;
    const double flops = 2.0 * (double)rows * (double)cols * nt;
    const double tf = time_it(pool, &w, x, nt, y0, 0);
    printf("%lldx%lld q%d g%d tokens=%d threads=%d  f32 %s: %.2f ms %.1f GFLOP/s\n",
           (long long)rows, (long long)cols, bits, gs, nt, threads,
           sp_simd_name(sp_simd_current()), tf * 1e3, flops / tf / 1e9);
    double ymax = 0;
    for (size_t i = 0; i < (size_t)nt * (size_t)rows; i++)
        ymax = fmax(ymax, fabs((double)y0[i]));
    for (int levels = 1; levels <= 3; levels++) {
        const double tv = time_it(pool, &w, x, nt, y1, levels);
        double dmax = 0;
        for (size_t i = 0; i < (size_t)nt * (size_t)rows; i++)
            dmax = fmax(dmax, fabs((double)y1[i] - (double)y0[i]));
        printf("%lldx%lld q%d g%d tokens=%d threads=%d  vnni levels=%d: "
               "%.2f ms %.1f GFLOP/s (%.2fx f32), max |diff| / max |y| %.2g\n",
               (long long)rows, (long long)cols, bits, gs, nt, threads, levels,
               tv * 1e3, flops / tv / 1e9, tf / tv, dmax / ymax);
    }
    sp_pool_destroy(pool);
    free(data);
    free(qp);
    free(x);
    free(y0);
    free(y1);
    return 0;
}
