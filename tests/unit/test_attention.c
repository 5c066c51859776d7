/* sp_attention (src/compute/attention.c) against a naive double reference
 * that materializes the scores, softmaxes them and takes the weighted sum
 * of values. Cache slots after the last query position hold NaN, so any
 * read past the causal limit shows up as a NaN output.
 *
 * Every case runs for each cache element type (f32, bf16, f16): the cache
 * holds the random keys/values rounded to that type (sp_kv_convert, checked
 * bit by bit in test_kv_cache.c) and the reference is computed from the
 * rounded values, widened here by an independent decoder, so the tolerance
 * is the f32 one whatever the type. The sweeps run on the portable path and,
 * where the CPU has them, the AVX2 and AVX-512 paths (sp_simd_force). */
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
#include "runtime/kv_cache.h"

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_util.h"

static const sp_kv_dtype kv_types[] = {SP_KV_F32, SP_KV_BF16, SP_KV_F16};
static const char *const kv_type_names[] = {"f32", "bf16", "f16"};
#define N_KV_TYPES 3
#define SP_ATTN_TEST_MAX_HD 256

/* The cache type run_case uses (each test loops over kv_types). */
static sp_kv_dtype case_type = SP_KV_F32;

/* Stored element -> value (test_util.h's decoders, not the library's). */
static float widen_ref(const void *buf, size_t i, sp_kv_dtype type) {
    if (type == SP_KV_F32) return ((const float *)buf)[i];
    const uint16_t h = ((const uint16_t *)buf)[i];
    return (float)(type == SP_KV_BF16 ? ref_bf16_value(h) : ref_f16_value(h));
}

typedef struct shape {
    int n_q, first_pos, n_heads, n_kv_heads, head_dim, window;
    int first_key; /* position of the view's first key (a window cache) */
    float softcap;
    float q_amp; /* queries uniform in [-q_amp, q_amp]; 0 means 2 */
    bool bidirectional; /* every query sees every key up to the last query */
} shape;

static void ref_attention(double *out, const float *q, const float *k,
                          const float *v, int64_t stride, const shape *sh,
                          float scale) {
    int hd = sh->head_dim, group = sh->n_heads / sh->n_kv_heads;
    int last = sh->first_pos + sh->n_q - 1;
    double *sc = malloc(sizeof(double) * (size_t)(last + 1));
    for (int t = 0; t < sh->n_q; t++) {
        int p = sh->bidirectional ? last : sh->first_pos + t;
        int lo = sh->window > 0 && !sh->bidirectional ? p - sh->window + 1 : 0;
        if (lo < 0) lo = 0;
        for (int h = 0; h < sh->n_heads; h++) {
            const float *qh = q + ((size_t)t * sh->n_heads + h) * hd;
            /* row r of a head holds position first_key + r */
            const float *kh = k + (h / group) * stride;
            const float *vh = v + (h / group) * stride;
            const int f = sh->first_key;
            double m = -INFINITY;
            for (int j = lo; j <= p; j++) {
                double s = 0.0;
                for (int d = 0; d < hd; d++)
                    s += (double)qh[d] * kh[(j - f) * hd + d];
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
                for (int j = lo; j <= p; j++) acc += sc[j] * vh[(j - f) * hd + d];
                o[d] = acc / z;
            }
        }
    }
    free(sc);
}

/* A view starting at position first_key > 0 must give the bits of a view
 * from position 0 that holds the same rows there and NaN before (which a
 * kernel reading before the window would turn into NaN outputs). */
static void check_same_as_full_view(const sp_attention_args *a, sp_pool *pool,
                                    int cap) {
    const int base = a->kv.first_key_pos, hd = a->head_dim;
    const size_t es = sp_kv_elem_size(a->kv.type);
    const int64_t stride = (int64_t)(base + cap) * hd;
    const size_t n = (size_t)a->n_kv_heads * (size_t)stride * es;
    unsigned char *k = malloc(n), *v = malloc(n);
    float nan_row[SP_ATTN_TEST_MAX_HD];
    for (int d = 0; d < hd; d++) nan_row[d] = NAN;
    for (int h = 0; h < a->n_kv_heads; h++) {
        const size_t head = (size_t)h * (size_t)stride * es;
        for (int j = 0; j < base; j++) {
            const size_t row = head + (size_t)j * hd * es;
            sp_kv_convert(k + row, nan_row, (size_t)hd, a->kv.type);
            sp_kv_convert(v + row, nan_row, (size_t)hd, a->kv.type);
        }
        const size_t from = (size_t)h * (size_t)a->kv.head_stride * es;
        memcpy(k + head + (size_t)base * hd * es,
               (const unsigned char *)a->kv.k + from, (size_t)cap * hd * es);
        memcpy(v + head + (size_t)base * hd * es,
               (const unsigned char *)a->kv.v + from, (size_t)cap * hd * es);
    }
    const size_t q_n = (size_t)a->n_q * a->n_heads * hd;
    float *out = malloc(sizeof(float) * q_n);
    sp_attention_args full = *a;
    full.out = out;
    full.kv = (sp_kv_view){.k = k, .v = v, .head_stride = stride,
                           .type = a->kv.type};
    assert_int_equal(sp_attention(pool, &full, NULL), SPINDLE_OK);
    for (size_t i = 0; i < q_n; i++)
        if (memcmp(&out[i], &a->out[i], sizeof(float)))
            fail_msg("%s: the view from position %d gives out[%zu] = %.9g, "
                     "the view from 0 %.9g", sp_simd_name(sp_simd_current()),
                     base, i, a->out[i], out[i]);
    free(out);
    free(k);
    free(v);
}

static void run_case(const shape *sh, sp_pool *pool) {
    int hd = sh->head_dim;
    int last = sh->first_pos + sh->n_q - 1;
    /* slack: the stride is not just the length */
    int cap = last + 1 - sh->first_key + 5;
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
                k[i] = sh->first_key + j <= last ? frand(-2.0f, 2.0f) : NAN;
                v[i] = sh->first_key + j <= last ? frand(-1.0f, 1.0f) : NAN;
            }
    /* The cache in the case's type; the reference reads the rounded
     * values back (NaN slots stay NaN in every type). */
    const size_t es = sp_kv_elem_size(case_type);
    void *kc = malloc(es * kv_n), *vc = malloc(es * kv_n);
    sp_kv_convert(kc, k, kv_n, case_type);
    sp_kv_convert(vc, v, kv_n, case_type);
    for (size_t i = 0; i < kv_n; i++) {
        k[i] = widen_ref(kc, i, case_type);
        v[i] = widen_ref(vc, i, case_type);
    }
    float amp = sh->q_amp > 0 ? sh->q_amp : 2.0f;
    for (size_t i = 0; i < q_n; i++) q[i] = frand(-amp, amp);
    for (size_t i = 0; i < q_n; i++) out[i] = 12345.0f; /* must be overwritten */
    float scale = 1.0f / sqrtf((float)hd);

    sp_attention_args a = {.q = q, .out = out, .n_q = sh->n_q,
                           .first_pos = sh->first_pos, .n_heads = sh->n_heads,
                           .n_kv_heads = sh->n_kv_heads, .head_dim = hd,
                           .kv = {.k = kc, .v = vc, .head_stride = stride,
                                  .type = case_type,
                                  .first_key_pos = sh->first_key},
                           .scale = scale, .window = sh->window,
                           .softcap = sh->softcap,
                           .bidirectional = sh->bidirectional};
    assert_int_equal(sp_attention(pool, &a, NULL), SPINDLE_OK);
    ref_attention(ref, q, k, v, stride, sh, scale);
    for (size_t i = 0; i < q_n; i++) {
        double err = fabs(out[i] - ref[i]);
        if (!(err <= 2e-5 + 1e-4 * fabs(ref[i])))
            fail_msg("%s cache, %s: n_q %d first %d heads %d/%d hd %d "
                     "window %d cap %g: out[%zu] = %.8g, want %.8g",
                     kv_type_names[case_type], sp_simd_name(sp_simd_current()),
                     sh->n_q, sh->first_pos, sh->n_heads, sh->n_kv_heads, hd,
                     sh->window, sh->softcap, i, out[i], ref[i]);
    }
    if (case_type != SP_KV_F32) {
        /* Widening is exact, so an f32 cache holding the rounded values
         * must give the very same bits. */
        float *out32 = malloc(sizeof(float) * q_n);
        sp_attention_args a32 = a;
        a32.out = out32;
        a32.kv = (sp_kv_view){.k = k, .v = v, .head_stride = stride,
                              .type = SP_KV_F32,
                              .first_key_pos = sh->first_key};
        assert_int_equal(sp_attention(pool, &a32, NULL), SPINDLE_OK);
        for (size_t i = 0; i < q_n; i++)
            if (memcmp(&out[i], &out32[i], sizeof(float)))
                fail_msg("%s cache, %s: out[%zu] = %.9g, the f32 cache of "
                         "the same values gives %.9g",
                         kv_type_names[case_type],
                         sp_simd_name(sp_simd_current()), i, out[i], out32[i]);
        free(out32);
    }
    if (sh->first_key > 0)
        check_same_as_full_view(&a, pool, cap);
    free(kc), free(vc);
    free(k), free(v), free(q), free(out), free(ref);
}

/* Every combination of the listed shapes, with the given pool. */
static void sweep(sp_pool *pool) {
    const int nq[] = {1, 3, 17};
    const int first[] = {0, 1, 40, 77};
    const int heads[][2] = {{4, 4}, {4, 2}, {8, 2}, {6, 6}};
    /* 24: the AVX2 tiles (8 lanes) cover it, the AVX-512 ones do not */
    const int hds[] = {64, 24, 13};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 4; c++)
                for (size_t d = 0; d < 3; d++) {
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

static void test_window_view(void **s) {
    (void)s;
    /* A sliding-window cache keeps positions from some base on: every base
     * from 0 up to the first query's first key, on both paths' shapes. */
    const int windows[] = {1, 3, 8, 25};
    for (size_t i = 0; i < sizeof windows / sizeof *windows; i++) {
        const int w = windows[i];
        shape sh = {.n_q = 9, .first_pos = 36, .n_heads = 4, .n_kv_heads = 1,
                    .head_dim = 16, .window = w};
        const int lo = sh.first_pos - w + 1;
        const int bases[] = {lo, lo - 1, lo / 2, 1};
        for (size_t b = 0; b < 4; b++) {
            sh.first_key = bases[b];
            run_case(&sh, NULL);
        }
        shape big = {.n_q = 17, .first_pos = 60, .n_heads = 16,
                     .n_kv_heads = 2, .head_dim = 128, .window = w,
                     .first_key = 60 - w + 1};
        run_case(&big, NULL);
        big.n_q = 1;
        big.first_key -= 5;
        run_case(&big, NULL);
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
                           .kv = {.k = k, .v = v, .head_stride = 3 * HD,
                                  .type = SP_KV_F32},
                           .scale = 1.0f, .window = 1};
    assert_int_equal(sp_attention(NULL, &a, NULL), SPINDLE_OK);
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

static void test_bidirectional(void **s) {
    (void)s;
    /* Encoders (BERT): each query attends to the whole sequence, later keys
     * included; a window is ignored. Keys before the first query (a view
     * holding earlier positions) are seen too. */
    const int nq[] = {1, 5, 40};
    for (size_t i = 0; i < 3; i++) {
        shape sh = {.n_q = nq[i], .n_heads = 4, .n_kv_heads = 2,
                    .head_dim = 32, .bidirectional = true};
        run_case(&sh, NULL);
        sh.first_pos = 7;
        sh.window = 3;
        run_case(&sh, NULL);
    }
    shape big = {.n_q = 33, .n_heads = 12, .n_kv_heads = 12, .head_dim = 64,
                 .bidirectional = true};
    sp_pool *pool = sp_pool_create(2);
    run_case(&big, pool);
    sp_pool_destroy(pool);
}

static void test_long_context(void **s) {
    (void)s;
    /* Decode step deep into the context: many tiles, running max rescaling. */
    shape sh = {.n_q = 1, .first_pos = 3000, .n_heads = 4, .n_kv_heads = 1,
                .head_dim = 64};
    run_case(&sh, NULL);
}

/* `body` once per cache type on the portable path and, where the CPU has
 * them, on the AVX2 and AVX-512 paths; the CPU's own level is restored
 * afterwards. */
static void every_type_and_path(void (*body)(void **), void **state) {
    const sp_simd_level own = sp_simd_current();
    const sp_simd_level levels[] = {SP_SIMD_SCALAR, SP_SIMD_AVX2, SP_SIMD_AVX512};
    for (size_t l = 0; l < 3; l++) {
        if (!sp_simd_force(levels[l])) continue; /* CPU without the level */
        for (int t = 0; t < N_KV_TYPES; t++) {
            case_type = kv_types[t];
            body(state);
        }
    }
    case_type = SP_KV_F32;
    assert_true(sp_simd_force(own));
}

#define EVERY(test)                                  \
    static void test##_all(void **s) { every_type_and_path(test, s); }
EVERY(test_serial)
EVERY(test_two_threads)
EVERY(test_window)
EVERY(test_window_view)
EVERY(test_softcap)
EVERY(test_long_context)
EVERY(test_bidirectional)

/* Inconsistent arguments are an error naming what is wrong, and nothing
 * is written: each case breaks one field of a valid call. */
static void test_invalid_arguments(void **s) {
    (void)s;
    enum { HD = 8, CAP = 4 };
    float k[2 * CAP * HD] = {0}, v[2 * CAP * HD] = {0}, q[2 * 2 * HD] = {0};
    float out[2 * 2 * HD];
    const sp_attention_args good = {
        .q = q, .out = out, .n_q = 2, .first_pos = 2, .n_heads = 2,
        .n_kv_heads = 1, .head_dim = HD,
        .kv = {.k = k, .v = v, .head_stride = CAP * HD, .type = SP_KV_F32},
        .scale = 1.0f};
    struct { const char *field, *message; sp_attention_args a; } cases[] = {
        {"n_q", "no query tokens", good},
        {"n_heads", "head count", good},
        {"n_kv_heads", "head count", good},
        {"head_dim", "head size", good},
        {"grouping", "multiple of the KV heads", good},
        {"first_pos", "negative first position", good},
        {"type", "unknown KV cache type", good},
        {"past the cache", "beyond the KV cache", good},
        {"q", "NULL buffer", good},
        {"kv.v", "NULL buffer", good},
        {"first key", "before the start of the KV view", good},
        {"first key < 0", "before the start of the KV view", good},
    };
    cases[0].a.n_q = 0;
    cases[1].a.n_heads = 0;
    cases[2].a.n_kv_heads = -1;
    cases[3].a.head_dim = 0;
    cases[4].a.n_kv_heads = 3;
    cases[5].a.first_pos = -1;
    cases[6].a.kv.type = (sp_kv_dtype)7;
    cases[7].a.first_pos = CAP - 1; /* positions 3 and 4 of a 4-slot cache */
    cases[8].a.q = NULL;
    cases[9].a.kv.v = NULL;
    cases[10].a.kv.first_key_pos = 1; /* no window: position 0 is needed */
    cases[11].a.kv.first_key_pos = -1;
    assert_int_equal(sp_attention(NULL, &good, NULL), SPINDLE_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t j = 0; j < sizeof out / sizeof out[0]; j++) out[j] = 42.0f;
        spindle_error err = {0};
        if (sp_attention(NULL, &cases[i].a, &err) != SPINDLE_ERR_ARGUMENT)
            fail_msg("bad %s: accepted", cases[i].field);
        assert_int_equal(err.status, SPINDLE_ERR_ARGUMENT);
        if (!strstr(err.message, cases[i].message))
            fail_msg("bad %s: message '%s'", cases[i].field, err.message);
        for (size_t j = 0; j < sizeof out / sizeof out[0]; j++)
            assert_true(out[j] == 42.0f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serial_all),
        cmocka_unit_test(test_two_threads_all),
        cmocka_unit_test(test_window_all),
        cmocka_unit_test(test_window_view_all),
        cmocka_unit_test(test_window_one_is_value),
        cmocka_unit_test(test_softcap_all),
        cmocka_unit_test(test_long_context_all),
        cmocka_unit_test(test_bidirectional_all),
        cmocka_unit_test(test_invalid_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
