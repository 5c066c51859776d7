/* The KV cache (src/runtime/kv_cache.c, through runtime/seq_state.h) in
 * each element type: the rounding of a store against a reference rounding
 * computed in double from the formats' definitions, growth / rollback
 * keeping what was stored, and a sliding-window layer's bounded buffer.
 * Also the public kv_type option's validation. (Attention over each type is in
 * test_attention.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kv_cache.h"
#include "runtime/seq_state.h"
#include "runtime/kv_pool.h"
#include "spindle.h"

#define TEST_RNG_SEED 0xD1B54A32D192ED03ull
#include "test_util.h"

/* A float format: p significand bits (with the implicit one), normal
 * exponents emin..emax. */
typedef struct fmt {
    int p, emin, emax;
} fmt;

static const fmt BF16 = {8, -126, 127}, F16 = {11, -14, 15};

/* x rounded to the format, to nearest with ties to even, overflow to inf.
 * x / quantum is exact in double (an f32 has 24 bits) and rint rounds to
 * nearest even in the default mode, so this is the IEEE rounding. */
static double round_ref(float xf, fmt f) {
    const double x = xf;
    if (isnan(x) || isinf(x) || x == 0.0) return x;
    int e2;
    frexp(x, &e2);                /* |x| = m 2^e2, m in [0.5, 1) */
    int e = e2 - 1;               /* exponent of the leading bit */
    if (e < f.emin) e = f.emin;   /* subnormal: fixed quantum */
    const double q = ldexp(1.0, e - f.p + 1);
    const double r = rint(x / q) * q;
    if (fabs(r) >= ldexp(1.0, f.emax + 1)) return copysign(INFINITY, x);
    return r;
}

static double stored_value(const uint16_t *h, sp_kv_dtype type) {
    return type == SP_KV_BF16 ? ref_bf16_value(*h) : ref_f16_value(*h);
}

/* One value through sp_kv_convert against round_ref: same value, same sign
 * (of zeros too), NaN stays NaN. */
static void check_round(float x, sp_kv_dtype type) {
    uint16_t h;
    sp_kv_convert(&h, &x, 1, type);
    const double got = stored_value(&h, type);
    const double want = round_ref(x, type == SP_KV_BF16 ? BF16 : F16);
    const bool same = isnan(want) ? isnan(got)
                                  : got == want && !signbit(got) == !signbit(want);
    if (!same)
        fail_msg("%s: %a (0x%08x) stored as 0x%04x = %a, want %a",
                 type == SP_KV_BF16 ? "bf16" : "f16", (double)x,
                 (unsigned)(union { float f; uint32_t u; }){.f = x}.u,
                 (unsigned)h, got, want);
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_rounding(void **s) {
    (void)s;
    const sp_kv_dtype types[] = {SP_KV_BF16, SP_KV_F16};
    /* Hand-picked: zeros, inf, NaN, exact ties both ways, the largest
     * finite values and the first that overflow, f16 subnormals and their
     * ties, bf16 subnormals, values below half the smallest subnormal. */
    const float special[] = {
        0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f,
        1.0f + 0x1p-8f, 1.0f + 0x3p-8f,       /* bf16 ties: down, up */
        1.0f + 0x1p-11f, 1.0f + 0x3p-11f,     /* f16 ties: down, up */
        65504.0f, 65519.99f, 65520.0f, -65520.0f, 0x1.fep127f, 0x1.ffp127f,
        0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x3p-25f, 0x1p-26f, 0x1.ff8p-15f,
        0x1p-14f, 0x1.ffcp-15f, 0x1p-126f, 0x1p-133f, 0x1p-134f, 0x3p-134f,
        0x1p-149f, 3.14159265f, -2.71828182f, 1e-5f, 6e-8f, 3e-8f,
    };
    for (size_t t = 0; t < 2; t++) {
        for (size_t i = 0; i < sizeof special / sizeof *special; i++)
            check_round(special[i], types[t]);
        /* Random bit patterns: every exponent, both signs, NaNs. */
        for (int i = 0; i < 200000; i++) check_round(from_bits(rng_u32()), types[t]);
        /* Concentrated on f16's range and subnormals (|x| < 2^16). */
        for (int i = 0; i < 200000; i++) {
            const uint32_t u = rng_u32();
            const uint32_t exp = 100u + (u >> 24) % 44u; /* 2^-27 .. 2^16 */
            check_round(from_bits((u & 0x807fffffu) | exp << 23), types[t]);
        }
    }
}

/* A value for layer l, position p, element i of k (kv 0) or v (kv 1) that
 * is not representable in bf16/f16 (so a store that forgot to round, or
 * rounded another element, shows). */
static float value_at(int l, int p, int i, int kv, int generation) {
    return 0.1f + (float)(l * 7 + p * 3 + i + kv * 11 + generation * 13) *
                      1.0009765625f / 97.0f;
}

enum { LAYERS = 2, HEADS = 3, HD = 5 };

/* Store positions [from, to) of every layer through a reserved pass. */
static void store_positions(sp_seq_state *s, int from, int to, int generation) {
    float k[HEADS * HD], v[HEADS * HD];
    for (int l = 0; l < LAYERS; l++)
        for (int p = from; p < to; p++) {
            for (int i = 0; i < HEADS * HD; i++) {
                k[i] = value_at(l, p, i, 0, generation);
                v[i] = value_at(l, p, i, 1, generation);
            }
            sp_seq_state_kv_store(s, l, p, k, v);
        }
}

/* Positions [from, to) of the cache hold generation's values, rounded. */
static void check_positions(const sp_seq_state *s, sp_kv_dtype type, int from,
                            int to, int generation) {
    for (int l = 0; l < LAYERS; l++) {
        const sp_kv_view view = sp_seq_state_kv_view(s, l);
        assert_int_equal(view.type, type);
        for (int p = from; p < to; p++)
            for (int h = 0; h < HEADS; h++)
                for (int d = 0; d < HD; d++) {
                    int run;
                    const size_t at =
                        (size_t)sp_kv_view_row(&view, h, p, HD, &run) + d;
                    for (int kv = 0; kv < 2; kv++) {
                        const void *base = kv ? view.v : view.k;
                        const float x = value_at(l, p, h * HD + d, kv, generation);
                        double got;
                        if (type == SP_KV_F32)
                            got = ((const float *)base)[at];
                        else
                            got = stored_value((const uint16_t *)base + at, type);
                        const double want =
                            type == SP_KV_F32 ? x
                            : round_ref(x, type == SP_KV_BF16 ? BF16 : F16);
                        if (got != want)
                            fail_msg("type %d layer %d pos %d head %d dim %d %s: "
                                     "%a, want %a", (int)type, l, p, h, d,
                                     kv ? "v" : "k", got, want);
                    }
                }
    }
}

/* A forward pass of positions [from, to) through the state interface. */
static void pass(sp_seq_state *s, int from, int to, int generation) {
    spindle_error err = {0};
    assert_int_equal(sp_seq_state_length(s), from);
    assert_int_equal(sp_seq_state_reserve(s, to - from, &err), SPINDLE_OK);
    store_positions(s, from, to, generation);
    sp_seq_state_commit(s);
}

static void test_growth_and_rollback(void **s) {
    (void)s;
    const sp_kv_dtype types[] = {SP_KV_F32, SP_KV_BF16, SP_KV_F16};
    for (size_t t = 0; t < 3; t++) {
        const sp_layer_state_desc full = {.kind = SP_STATE_FULL_KV,
                                          .n_kv_heads = HEADS, .head_dim = HD};
        const sp_layer_state_desc layers[LAYERS] = {full, full};
        const sp_seq_state_options opt = {.kv_type = types[t],
                                          .max_length = 1000};
        sp_seq_state *c;
        spindle_error err = {0};
        assert_int_equal(sp_seq_state_new(layers, LAYERS, &opt, &c, &err),
                         SPINDLE_OK);
        pass(c, 0, 200, 0);
        /* Growing takes blocks (no row moves). A reserve without a commit
         * changes nothing the sequence holds. */
        assert_int_equal(sp_seq_state_reserve(c, 400, &err), SPINDLE_OK);
        assert_int_equal(sp_seq_state_kv_view(c, 0).n_blocks,
                         (600 + SP_KV_BLOCK_TOKENS - 1) / SP_KV_BLOCK_TOKENS);
        check_positions(c, types[t], 0, 200, 0);
        assert_int_equal(sp_seq_state_length(c), 200);
        /* Rollback to 50, then new tokens overwrite 50..119 only. */
        assert_int_equal(sp_seq_state_truncate(c, 50, &err), SPINDLE_OK);
        pass(c, 50, 120, 1);
        check_positions(c, types[t], 0, 50, 0);
        check_positions(c, types[t], 50, 120, 1);
        /* Past the limit: refused, the cache unchanged. */
        assert_int_equal(sp_seq_state_reserve(c, 881, &err), SPINDLE_ERR_LIMIT);
        assert_non_null(strstr(err.message, "exceeds the limit of 1000"));
        assert_int_equal(sp_seq_state_length(c), 120);
        check_positions(c, types[t], 0, 50, 0);
        /* Out of range. */
        assert_int_equal(sp_seq_state_truncate(c, 121, &err), SPINDLE_ERR_ARGUMENT);
        assert_int_equal(sp_seq_state_truncate(c, -1, &err), SPINDLE_ERR_ARGUMENT);
        sp_seq_state_free(c);
    }
}

/* A window layer keeps only what its window and the rollback margin need,
 * sliding the kept rows to the front (their bits unchanged), so that its
 * memory stays bounded however long the sequence grows. */
static void test_window_slides(void **s) {
    (void)s;
    enum { WINDOW = 6, K = 3 };
    const sp_layer_state_desc win = {.kind = SP_STATE_WINDOW_KV,
                                     .n_kv_heads = HEADS, .head_dim = HD,
                                     .window = WINDOW};
    const sp_layer_state_desc layers[LAYERS] = {win, win};
    const sp_kv_dtype types[] = {SP_KV_F32, SP_KV_BF16};
    for (size_t t = 0; t < 2; t++) {
        const sp_seq_state_options opt = {.kv_type = types[t],
                                          .max_length = 100000,
                                          .max_rollback = K};
        sp_seq_state *c;
        spindle_error err = {0};
        assert_int_equal(sp_seq_state_new(layers, LAYERS, &opt, &c, &err),
                         SPINDLE_OK);
        size_t most = 0;
        int slid = 0, last_base = 0;
        for (int len = 0; len < 5000;) {
            const int n = len % 7 == 3 ? 5 : 1; /* chunks now and then */
            pass(c, len, len + n, 0);
            len += n;
            const sp_kv_view v = sp_seq_state_kv_view(c, 0);
            slid += v.first_key_pos != last_base;
            last_base = v.first_key_pos;
            /* Everything the window and K rollbacks need is still there. */
            const int need = len - (WINDOW - 1) - K;
            assert_true(v.first_key_pos <= (need > 0 ? need : 0));
            check_positions(c, types[t], need > 0 ? need : 0, len, 0);
            if (sp_seq_state_bytes(c) > most) most = sp_seq_state_bytes(c);
        }
        assert_true(slid > 50);
        /* 2 layers x (k, v) x heads x rows: rows stay near the window. */
        const size_t row = 2 * LAYERS * HEADS * HD * sp_kv_elem_size(types[t]);
        if (most > 1024 + 64 * row)
            fail_msg("a window-%d cache grew to %zu bytes", WINDOW, most);
        sp_seq_state_free(c);
    }
}

static void test_bad_types(void **s) {
    (void)s;
    spindle_error err = {0};
    const sp_layer_state_desc full = {.kind = SP_STATE_FULL_KV,
                                      .n_kv_heads = 1, .head_dim = 16};
    const sp_seq_state_options bad = {.kv_type = (sp_kv_dtype)7};
    sp_seq_state *c = NULL;
    assert_int_equal(sp_seq_state_new(&full, 1, &bad, &c, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_null(c);
    assert_non_null(strstr(err.message, "7"));

    spindle_kv_type t = SPINDLE_KV_F32;
    const char *names[] = {"f32", "bf16", "f16"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(spindle_kv_type_parse(names[i], &t, &err), SPINDLE_OK);
        assert_int_equal((int)t, i);
        assert_string_equal(spindle_kv_type_name(t), names[i]);
    }
    assert_int_equal(spindle_kv_type_parse("q8_0", &t, &err), SPINDLE_ERR_ARGUMENT);
    assert_non_null(strstr(err.message, "'q8_0'"));
    assert_int_equal((int)t, 2); /* unchanged */
    assert_null(spindle_kv_type_name((spindle_kv_type)3));
    assert_null(spindle_kv_type_name((spindle_kv_type)-1));

    /* The load option is checked before the path is looked at. */
    spindle_load_options lo = {.kv_type = (spindle_kv_type)9};
    spindle_model *m = (spindle_model *)&lo; /* must be reset to NULL */
    assert_int_equal(spindle_model_load("/nonexistent/model", &lo, &m, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_null(m);
    assert_non_null(strstr(err.message, "KV cache type 9"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_growth_and_rollback),
        cmocka_unit_test(test_window_slides),
        cmocka_unit_test(test_bad_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
