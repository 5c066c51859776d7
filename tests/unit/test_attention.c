/* sp_attention (src/compute/attention.c) against a naive double reference
 * that materializes the scores, softmaxes them and takes the weighted sum
 * of values. Cache slots after the last query position hold NaN, so any
 * read past the causal limit shows up as a NaN output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/ops.h"
#include "compute/threadpool.h"

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_util.h"

typedef struct shape {
    int n_q, first_pos, n_heads, n_kv_heads, head_dim, window;
    float softcap;
    float q_amp; /* queries uniform in [-q_amp, q_amp]; 0 means 2 */
} shape;

static void ref_attention(double *out, const float *q, const float *k,
                          const float *v, int64_t stride, const shape *sh,
                          float scale) {
    int hd = sh->head_dim, group = sh->n_heads / sh->n_kv_heads;
    int last = sh->first_pos + sh->n_q - 1;
    double *sc = malloc(sizeof(double) * (size_t)(last + 1));
    for (int t = 0; t < sh->n_q; t++) {
        int p = sh->first_pos + t;
        int lo = sh->window > 0 ? p - sh->window + 1 : 0;
        if (lo < 0) lo = 0;
        for (int h = 0; h < sh->n_heads; h++) {
            const float *qh = q + ((size_t)t * sh->n_heads + h) * hd;
            const float *kh = k + (h / group) * stride;
            const float *vh = v + (h / group) * stride;
            double m = -INFINITY;
            for (int j = lo; j <= p; j++) {
                double s = 0.0;
                for (int d = 0; d < hd; d++) s += (double)qh[d] * kh[j * hd + d];
                s *= scale;
                if (sh->softcap > 0) s = sh->softcap * tanh(s / sh->softcap);
                sc[j] = s;
                if (s > m) m = s;
            }
            double z = 0.0;
            for (int j = lo; j <= p; j++) z += (sc[j] = exp(sc[j] - m));
            double *o = out + ((size_t)t * sh->n_heads + h) * hd;
            for (int d = 0; d < hd; d++) {
                double acc = 0.0;
                for (int j = lo; j <= p; j++) acc += sc[j] * vh[j * hd + d];
                o[d] = acc / z;
            }
        }
    }
    free(sc);
}

static void run_case(const shape *sh, sp_pool *pool) {
    int hd = sh->head_dim;
    int last = sh->first_pos + sh->n_q - 1;
    int cap = last + 1 + 5; /* slack: the stride is not just the length */
    int64_t stride = (int64_t)cap * hd;
    size_t kv_n = (size_t)sh->n_kv_heads * (size_t)stride;
    size_t q_n = (size_t)sh->n_q * sh->n_heads * hd;
    float *k = malloc(sizeof(float) * kv_n), *v = malloc(sizeof(float) * kv_n);
    float *q = malloc(sizeof(float) * q_n), *out = malloc(sizeof(float) * q_n);
    double *ref = malloc(sizeof(double) * q_n);
    for (int h = 0; h < sh->n_kv_heads; h++)
        for (int j = 0; j < cap; j++)
            for (int d = 0; d < hd; d++) {
                size_t i = (size_t)h * stride + (size_t)j * hd + d;
                k[i] = j <= last ? frand(-2.0f, 2.0f) : NAN;
                v[i] = j <= last ? frand(-1.0f, 1.0f) : NAN;
            }
    float amp = sh->q_amp > 0 ? sh->q_amp : 2.0f;
    for (size_t i = 0; i < q_n; i++) q[i] = frand(-amp, amp);
    for (size_t i = 0; i < q_n; i++) out[i] = 12345.0f; /* must be overwritten */
    float scale = 1.0f / sqrtf((float)hd);

    sp_attention_args a = {.q = q, .out = out, .n_q = sh->n_q,
                           .first_pos = sh->first_pos, .n_heads = sh->n_heads,
                           .n_kv_heads = sh->n_kv_heads, .head_dim = hd,
                           .kv = {.k = k, .v = v, .head_stride = stride},
                           .scale = scale, .window = sh->window,
                           .softcap = sh->softcap};
    sp_attention(pool, &a);
    ref_attention(ref, q, k, v, stride, sh, scale);
    for (size_t i = 0; i < q_n; i++) {
        double err = fabs(out[i] - ref[i]);
        if (!(err <= 2e-5 + 1e-4 * fabs(ref[i])))
            fail_msg("n_q %d first %d heads %d/%d hd %d window %d cap %g: "
                     "out[%zu] = %.8g, want %.8g",
                     sh->n_q, sh->first_pos, sh->n_heads, sh->n_kv_heads, hd,
                     sh->window, sh->softcap, i, out[i], ref[i]);
    }
    free(k), free(v), free(q), free(out), free(ref);
}

/* Every combination of the listed shapes, with the given pool. */
static void sweep(sp_pool *pool) {
    const int nq[] = {1, 3, 17};
    const int first[] = {0, 1, 40, 77};
    const int heads[][2] = {{4, 4}, {4, 2}, {8, 2}, {6, 6}};
    const int hds[] = {64, 13};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 4; c++)
                for (size_t d = 0; d < 2; d++) {
                    shape sh = {.n_q = nq[a], .first_pos = first[b],
                                .n_heads = heads[c][0],
                                .n_kv_heads = heads[c][1],
                                .head_dim = hds[d]};
                    run_case(&sh, pool);
                }
}

static void test_serial(void **s) {
    (void)s;
    sweep(NULL);
}

static void test_two_threads(void **s) {
    (void)s;
    sp_pool *pool = sp_pool_create(2);
    assert_non_null(pool);
    sweep(pool);
    shape sh = {.n_q = 33, .first_pos = 100, .n_heads = 8, .n_kv_heads = 2,
                .head_dim = 32, .window = 20, .softcap = 30.0f};
    run_case(&sh, pool);
    /* The AVX-512 path's shapes: several token blocks and key tiles, 8
     * query heads per KV head, Qwen3's head_dim, with and without a window
     * that starts inside a tile. */
    for (int w = 0; w <= 25; w += 25) {
        shape big = {.n_q = 40, .first_pos = 30, .n_heads = 16,
                     .n_kv_heads = 2, .head_dim = 128, .window = w};
        run_case(&big, pool);
    }
    sp_pool_destroy(pool);
}

static void test_window(void **s) {
    (void)s;
    /* Windows shorter than, equal to and longer than the history; window 1
     * attends to the token itself only. */
    const int windows[] = {1, 2, 5, 40, 41, 1000};
    for (size_t i = 0; i < sizeof windows / sizeof *windows; i++) {
        shape sh = {.n_q = 9, .first_pos = 36, .n_heads = 4, .n_kv_heads = 1,
                    .head_dim = 16, .window = windows[i]};
        run_case(&sh, NULL);
        sh.n_q = 1;
        sh.first_pos = 0;
        run_case(&sh, NULL);
    }
}

static void test_window_one_is_value(void **s) {
    (void)s;
    /* window 1: the output is exactly the token's own value vector. */
    enum { HD = 8 };
    float k[3 * HD], v[3 * HD], q[HD], out[HD];
    for (int i = 0; i < 3 * HD; i++) k[i] = 0.1f * i, v[i] = (float)i;
    for (int i = 0; i < HD; i++) q[i] = 1.0f;
    sp_attention_args a = {.q = q, .out = out, .n_q = 1, .first_pos = 2,
                           .n_heads = 1, .n_kv_heads = 1, .head_dim = HD,
                           .kv = {.k = k, .v = v, .head_stride = 3 * HD},
                           .scale = 1.0f, .window = 1};
    sp_attention(NULL, &a);
    for (int d = 0; d < HD; d++) assert_true(out[d] == v[2 * HD + d]);
}

static void test_softcap(void **s) {
    (void)s;
    /* Large q so the raw scores are far beyond the cap; a kernel that skips
     * the cap (or caps before scaling) gives a very different softmax. */
    shape sh = {.n_q = 5, .first_pos = 20, .n_heads = 4, .n_kv_heads = 2,
                .head_dim = 24, .softcap = 5.0f, .q_amp = 20.0f};
    run_case(&sh, NULL);
    sh.softcap = 50.0f;
    sh.window = 8;
    run_case(&sh, NULL);
}

static void test_long_context(void **s) {
    (void)s;
    /* Decode step deep into the context: many tiles, running max rescaling. */
    shape sh = {.n_q = 1, .first_pos = 3000, .n_heads = 4, .n_kv_heads = 1,
                .head_dim = 64};
    run_case(&sh, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serial),
        cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_window_one_is_value),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_long_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
