/* Micro-benchmark of sp_matmul.
 *
 *   matmul_bench ROWS COLS TYPE N_TOKENS THREADS [SIMD]
 *     TYPE: f32 | f16 | bf16 | q4 | q8 (MLX affine, group 64, bf16 scales)
 *           | mxfp4 (MLX mxfp4)
 *     SIMD: scalar | avx2 | avxvnni | avx512 | neon (default: the best the
 *           CPU has)
 *     env SPINDLE_BENCH_VNNI_LEVELS=1|2|3: time sp_mm_rows_vnni with that
 *     many activation levels instead of sp_matmul (q4 / q8 only)
 *   matmul_bench stream THREADS   (plain streaming read of 1 GiB: the
 *                                  machine's read-bandwidth roofline)
 *
 * Prints weight bytes read per second and GFLOP/s (best of several runs,
 * with the median to show the noise of a shared machine), and the same per
 * second of CPU time consumed (pool workers spin-wait, so for 1 thread this
 * is the kernel's own speed however loaded the machine is). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compute/matmul/matmul.h"
#include "compute/matmul/matmul_simd.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct stream_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} stream_arg;

static void *stream_read(void *v) {
    stream_arg *a = v;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static int run_stream(int threads) {
    const size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf || threads < 1 || threads > 64) return 1;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[64];
        stream_arg args[64];
        const double t0 = now();
        for (int t = 0; t < threads; t++) {
            args[t] = (stream_arg){buf + n / threads * t, n / threads, 0};
            pthread_create(&th[t], NULL, stream_read, &args[t]);
        }
        for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
        const double dt = now() - t0;
        if (dt < best) best = dt;
        if (args[0].sum == 42) puts("");
    }
    printf("stream read: %d threads: %.1f GB/s\n", threads, bytes / best / 1e9);
    free(buf);
    return 0;
}

typedef struct vnni_job {
    const sp_weight *w;
    const float *x;
    float *y;
    int nt, levels;
} vnni_job;

static void vnni_range(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const vnni_job *j = ctx;
    sp_mm_rows_vnni(j->w, j->x, j->nt, j->y, r0, r1, j->levels);
}

static int bench_levels; /* SPINDLE_BENCH_VNNI_LEVELS, 0: sp_matmul */

static void run_once(sp_pool *pool, const sp_weight *w, const float *x,
                     int nt, float *y) {
    if (!bench_levels) {
        sp_matmul(pool, w, x, nt, y);
        return;
    }
    vnni_job j = {w, x, y, nt, bench_levels};
    const int threads = sp_pool_size(pool);
    sp_pool_for(pool, w->rows, (w->rows + threads - 1) / threads, vnni_range, &j);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "stream") == 0)
        return run_stream(atoi(argv[2]));
    if (argc < 6) {
        fprintf(stderr, "usage: %s ROWS COLS f32|f16|bf16|q4|q8|mxfp4 N_TOKENS "
                        "THREADS [scalar|avx2|avxvnni|avx512]\n       %s stream THREADS\n",
                argv[0], argv[0]);
        return 2;
    }
    const int64_t rows = atoll(argv[1]), cols = atoll(argv[2]);
    const char *type = argv[3];
    const int nt = atoi(argv[4]), threads = atoi(argv[5]);
    if (rows <= 0 || cols <= 0 || cols % 64 || nt <= 0 || threads <= 0) {
        fprintf(stderr, "bad sizes (cols must be a multiple of 64)\n");
        return 2;
    }
    if (argc > 6) {
        int ok = 0;
        for (int l = 0; l < SP_SIMD_COUNT; l++)
            if (strcmp(argv[6], sp_simd_name((sp_simd_level)l)) == 0)
                ok = sp_simd_force((sp_simd_level)l);
        if (!ok) {
            fprintf(stderr, "SIMD level %s unavailable\n", argv[6]);
            return 2;
        }
    }
    sp_weight w = {.rows = rows, .cols = cols};
    size_t data_bytes;
    if (strcmp(type, "q4") == 0 || strcmp(type, "q8") == 0) {
        w.type = SP_W_AFFINE;
        w.bits = type[1] - '0';
        w.group_size = 64;
        w.qparam_dtype = SP_DTYPE_BF16;
        data_bytes = (size_t)(rows * cols) * (size_t)w.bits / 8;
    } else if (strcmp(type, "mxfp4") == 0) {
        w.type = SP_W_MXFP4;
        w.bits = 4;
        w.group_size = 32;
        w.qparam_dtype = SP_DTYPE_U8;
        data_bytes = (size_t)(rows * cols) / 2;
    } else {
        w.type = strcmp(type, "f32") == 0   ? SP_W_F32
                 : strcmp(type, "f16") == 0 ? SP_W_F16
                                            : SP_W_BF16;
        data_bytes = (size_t)(rows * cols) * (w.type == SP_W_F32 ? 4 : 2);
    }
    uint8_t *data = malloc(data_bytes);
    const size_t groups = (size_t)(rows * (cols / 64));
    uint16_t *sb = malloc(4 * groups);
    float *x = malloc(sizeof(float) * (size_t)(nt * cols));
    float *y = malloc(sizeof(float) * (size_t)(nt * rows));
    if (!data || !sb || !x || !y) return 1;
    uint32_t s = 12345;
    for (size_t i = 0; i < data_bytes; i++) {
        s = s * 1664525u + 1013904223u;
        data[i] = (uint8_t)(s >> 24);
    }
    if (w.type == SP_W_BF16 || w.type == SP_W_F16) /* tame exponents */
        for (size_t i = 1; i < data_bytes; i += 2) data[i] = (uint8_t)(0x3c | (data[i] & 0x80));
    if (w.type == SP_W_F32)
        for (size_t i = 3; i < data_bytes; i += 4) data[i] = 0x3f;
    for (size_t i = 0; i < 2 * groups; i++) sb[i] = 0x3c00;
    if (w.type == SP_W_MXFP4) /* exponents 2^0, one per 32 columns */
        memset(sb, 127, (size_t)(rows * cols / 32));
    for (int64_t i = 0; i < nt * cols; i++) x[i] = (float)(i % 7) * 0.1f;
    w.data = data;
    w.scales = sb;
    w.biases = sb + groups;
    sp_pool *pool = threads > 1 ? sp_pool_create(threads) : NULL;

    const char *lv = getenv("SPINDLE_BENCH_VNNI_LEVELS");
    bench_levels = lv ? atoi(lv) : 0;
    if (bench_levels && !sp_mm_rows_vnni(&w, x, nt, y, 0, 0, bench_levels)) {
        fprintf(stderr, "sp_mm_rows_vnni does not cover this case\n");
        return 2;
    }
    const size_t bytes = sp_weight_nbytes(&w);
    const double flops = 2.0 * (double)rows * (double)cols * nt;
    /* Enough repetitions for ~0.3 s per sample. */
    run_once(pool, &w, x, nt, y);
    double t0 = now();
    run_once(pool, &w, x, nt, y);
    double one = now() - t0;
    int reps = (int)(0.3 / (one > 1e-6 ? one : 1e-6));
    if (reps < 1) reps = 1;
    enum { SAMPLES = 7 };
    double dt[SAMPLES], cpu_total = 0, wall_total = 0;
    for (int k = 0; k < SAMPLES; k++) {
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        t0 = now();
        for (int i = 0; i < reps; i++) run_once(pool, &w, x, nt, y);
        dt[k] = (now() - t0) / reps;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        cpu_total += (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
        wall_total += dt[k] * reps;
    }
    qsort(dt, SAMPLES, sizeof dt[0], cmp_double);
    if (bench_levels) printf("vnni levels=%d: ", bench_levels);
    printf("%s %lldx%lld %s tokens=%d threads=%d: best %.3f ms (median %.3f): "
           "%.1f GB/s weights, %.1f GFLOP/s; per CPU-second (load-"
           "independent): %.1f GB, %.1f GFLOP; CPU share %.2f\n",
           sp_simd_name(sp_simd_current()), (long long)rows, (long long)cols,
           type, nt, threads, dt[0] * 1e3, dt[SAMPLES / 2] * 1e3,
           bytes / dt[0] / 1e9, flops / dt[0] / 1e9,
           bytes * SAMPLES * (double)reps / cpu_total / 1e9,
           flops * SAMPLES * (double)reps / cpu_total / 1e9,
           cpu_total / wall_total);
    sp_pool_destroy(pool);
    free(data);
    free(sb);
    free(x);
    free(y);
    return 0;
}
