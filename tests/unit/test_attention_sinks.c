/* Attention sinks (sp_attention_args.sinks, gpt-oss): one learned logit
 * per query head that joins each softmax's denominator and carries no
 * value. Checked against a double reference that appends the sink to the
 * scores, softmaxes, and drops its weight (mlx's formulation), on the
 * portable and the AVX-512 path, over GQA groups, windows, decode and
 * prefill shapes, and sinks from far below to far above the scores (a
 * large sink drives every output towards zero, a very negative one leaves
 * plain attention). Without sinks (NULL) the result must not change. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/matmul/matmul_simd.h"
#include "compute/ops.h"
#include "compute/threadpool.h"

#define TEST_RNG_SEED 0x5851F42D4C957F2Dull
#include "test_util.h"

typedef struct sink_case {
    int n_q, first_pos, n_heads, n_kv_heads, head_dim, window;
    float sink_lo, sink_hi; /* sinks uniform in [lo, hi] */
} sink_case;

/* Output element (t, h, d) by the definition: softmax over the scores of
 * the visible keys and the sink, the sink's weight dropped. */
static double reference(const sink_case *c, const float *q, const float *k,
                        const float *v, int64_t stride, const float *sinks,
                        float scale, int t, int h, int d) {
    const int hd = c->head_dim, kvh = h / (c->n_heads / c->n_kv_heads);
    const int p = c->first_pos + t;
    const int lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
    const float *qh = q + ((size_t)t * c->n_heads + h) * hd;
    double m = sinks ? sinks[h] : -INFINITY;
    for (int pass = 0; pass < 2; pass++) {
        double z = sinks ? exp(sinks[h] - m) : 0.0, num = 0.0;
        for (int j = lo; j <= p; j++) {
            double s = 0.0;
            for (int i = 0; i < hd; i++)
                s += (double)qh[i] * k[kvh * stride + (int64_t)j * hd + i];
            s *= scale;
            if (pass == 0) {
                if (s > m) m = s;
                continue;
            }
            z += exp(s - m);
            num += exp(s - m) * v[kvh * stride + (int64_t)j * hd + d];
        }
        if (pass == 1) return num / z;
    }
    return NAN;
}

static void run(const sink_case *c, sp_pool *pool, bool with_sinks) {
    const int hd = c->head_dim, last = c->first_pos + c->n_q - 1;
    const int64_t stride = (int64_t)(last + 1) * hd;
    const size_t kv_n = (size_t)c->n_kv_heads * (size_t)stride;
    const size_t q_n = (size_t)c->n_q * c->n_heads * hd;
    float *k = malloc(sizeof(float) * kv_n), *v = malloc(sizeof(float) * kv_n);
    float *q = malloc(sizeof(float) * q_n), *out = malloc(sizeof(float) * q_n);
    float *sinks = malloc(sizeof(float) * (size_t)c->n_heads);
    assert_true(k && v && q && out && sinks);
    fill_uniform(k, (int)kv_n, -2.0f, 2.0f);
    fill_uniform(v, (int)kv_n, -1.0f, 1.0f);
    fill_uniform(q, (int)q_n, -2.0f, 2.0f);
    fill_uniform(sinks, c->n_heads, c->sink_lo, c->sink_hi);
    const float scale = 1.0f / sqrtf((float)hd);
    const sp_attention_args a = {
        .q = q, .out = out, .n_q = c->n_q, .first_pos = c->first_pos,
        .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = hd,
        .kv = {.k = k, .v = v, .head_stride = stride, .type = SP_KV_F32},
        .scale = scale, .window = c->window,
        .sinks = with_sinks ? sinks : NULL};
    assert_int_equal(sp_attention(pool, &a, NULL), SPINDLE_OK);
    for (int t = 0; t < c->n_q; t++)
        for (int h = 0; h < c->n_heads; h++)
            for (int d = 0; d < hd; d++) {
                const double want = reference(c, q, k, v, stride,
                                              a.sinks, scale, t, h, d);
                const float got = out[((size_t)t * c->n_heads + h) * hd + d];
                if (!(fabs(got - want) <= 2e-5 + 1e-4 * fabs(want)))
                    fail_msg("%s, sinks %s [%g, %g], n_q %d first %d heads "
                             "%d/%d hd %d window %d: (t %d, h %d, d %d) = "
                             "%.8g, want %.8g",
                             sp_simd_name(sp_simd_current()),
                             with_sinks ? "on" : "off", c->sink_lo, c->sink_hi,
                             c->n_q, c->first_pos, c->n_heads, c->n_kv_heads,
                             hd, c->window, t, h, d, got, want);
            }
    free(k), free(v), free(q), free(out), free(sinks);
}

static void test_sinks(void **s) {
    (void)s;
    static const sink_case cases[] = {
        {1, 0, 4, 4, 64, 0, -1.0f, 1.0f},    /* one key: sink vs that key */
        {1, 90, 8, 2, 64, 0, -2.0f, 3.0f},   /* decode, GQA, many tiles */
        {1, 90, 8, 2, 64, 8, -2.0f, 3.0f},   /* decode through a window */
        {17, 3, 4, 2, 64, 8, -1.0f, 1.0f},   /* prefill, window < prompt */
        {9, 40, 6, 6, 13, 0, 5.0f, 9.0f},    /* sinks above every score */
        {5, 20, 4, 1, 32, 0, -60.0f, -40.0f} /* sinks far below them */
    };
    sp_pool *pool = sp_pool_create(2);
    assert_non_null(pool);
    const sp_simd_level own = sp_simd_current();
    const sp_simd_level levels[] = {SP_SIMD_SCALAR, SP_SIMD_AVX2, SP_SIMD_AVX512};
    for (size_t l = 0; l < 3; l++) {
        if (!sp_simd_force(levels[l])) continue; /* CPU without the level */
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            for (int with = 0; with < 2; with++) {
                run(&cases[i], NULL, with);
                run(&cases[i], pool, with);
            }
    }
    assert_true(sp_simd_force(own));
    sp_pool_destroy(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_sinks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
