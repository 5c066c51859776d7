/* Rotary embeddings (src/compute/rope.c): sp_rope_init's inverse
 * frequencies per scaling type against the published formulas evaluated in
 * double here, and sp_rope_apply against a naive rotate-half in double.
 * tests/unit_py/test_rope_reference.py compares with transformers and
 * mlx-lm themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/ops.h"
#include "test_util.h"

static sp_rope init_ok(const sp_rope_config *c) {
    sp_rope r;
    assert_int_equal(sp_rope_init(&r, c), 0);
    assert_int_equal(r.rotary_dim, c->rotary_dim);
    assert_non_null(r.inv_freq);
    return r;
}

/* theta^(-2i/d), the original RoFormer frequencies. */
static double plain_inv(double theta, int i, int d) {
    return 1.0 / pow(theta, 2.0 * i / d);
}

static void test_init_default_linear(void **s) {
    (void)s;
    sp_rope_config c = {.type = SP_ROPE_DEFAULT, .rotary_dim = 128,
                        .theta = 1e6};
    sp_rope r = init_ok(&c);
    for (int i = 0; i < 64; i++)
        assert_close(r.inv_freq[i], plain_inv(1e6, i, 128), 0, 1e-7, i);
    assert_true(r.attn_scale == 1.0f);
    sp_rope_free(&r);

    c = (sp_rope_config){.type = SP_ROPE_LINEAR, .rotary_dim = 64,
                         .theta = 10000.0, .factor = 4.0};
    r = init_ok(&c);
    for (int i = 0; i < 32; i++)
        assert_close(r.inv_freq[i], plain_inv(1e4, i, 64) / 4.0, 0, 1e-7, i);
    assert_true(r.attn_scale == 1.0f);
    sp_rope_free(&r);
}

/* Meta's apply_scaling from the Llama 3.1 reference code. */
static double llama3_ref(double f, double factor, double lff, double hff,
                         double old_ctx) {
    double wl = 2.0 * M_PI / f;
    if (wl < old_ctx / hff) return f;
    if (wl > old_ctx / lff) return f / factor;
    double sm = (old_ctx / wl - lff) / (hff - lff);
    return (1.0 - sm) * f / factor + sm * f;
}

static void test_init_llama3(void **s) {
    (void)s;
    sp_rope_config c = {.type = SP_ROPE_LLAMA3, .rotary_dim = 128,
                        .theta = 500000.0, .factor = 8.0,
                        .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                        .original_max_position = 8192};
    sp_rope r = init_ok(&c);
    int n_low = 0, n_mid = 0, n_high = 0;
    for (int i = 0; i < 64; i++) {
        double f = plain_inv(500000.0, i, 128);
        double want = llama3_ref(f, 8.0, 1.0, 4.0, 8192.0);
        assert_close(r.inv_freq[i], want, 0, 2e-7, i);
        if (want == f) n_high++;
        else if (fabs(want - f / 8.0) < 1e-12 * f) n_low++;
        else n_mid++;
    }
    /* The config exercises all three bands. */
    assert_true(n_low > 0 && n_mid > 0 && n_high > 0);
    assert_true(r.attn_scale == 1.0f);
    sp_rope_free(&r);

    /* Llama 3.2 style: factor 32, same bands. */
    c.factor = 32.0;
    c.rotary_dim = 64;
    r = init_ok(&c);
    for (int i = 0; i < 32; i++)
        assert_close(r.inv_freq[i],
                     llama3_ref(plain_inv(500000.0, i, 64), 32.0, 1.0, 4.0,
                                8192.0),
                     0, 2e-7, i);
    sp_rope_free(&r);
}

/* YaRN as in the authors' reference code (find_correction_range with
 * floor/ceil, linear ramp over pair index, blend of the extrapolated and
 * interpolated frequencies). */
static void yarn_ref(double *inv, int d, double base, double factor,
                     double orig, double beta_fast, double beta_slow) {
    double lo = floor(d * log(orig / (beta_fast * 2 * M_PI)) / (2 * log(base)));
    double hi = ceil(d * log(orig / (beta_slow * 2 * M_PI)) / (2 * log(base)));
    lo = fmax(lo, 0.0);
    hi = fmin(hi, d - 1.0);
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < d / 2; i++) {
        double ramp = fmin(fmax((i - lo) / (hi - lo), 0.0), 1.0);
        double extrap = plain_inv(base, i, d), interp = extrap / factor;
        inv[i] = interp * ramp + extrap * (1.0 - ramp);
    }
}

static double mscale_ref(double s, double m) {
    return s <= 1.0 ? 1.0 : 0.1 * m * log(s) + 1.0;
}

static void check_yarn(sp_rope_config c, double want_attn) {
    sp_rope r = init_ok(&c);
    double ref[256];
    yarn_ref(ref, c.rotary_dim, c.theta, c.factor, c.original_max_position,
             c.beta_fast > 0 ? c.beta_fast : 32, c.beta_slow > 0 ? c.beta_slow : 1);
    for (int i = 0; i < c.rotary_dim / 2; i++)
        assert_close(r.inv_freq[i], ref[i], 0, 2e-7, i);
    assert_close(r.attn_scale, want_attn, 0, 1e-7, -1);
    sp_rope_free(&r);
}

static void test_init_yarn(void **s) {
    (void)s;
    /* Qwen3-style: factor 4 over 32768, no mscale keys. */
    sp_rope_config c = {.type = SP_ROPE_YARN, .rotary_dim = 128,
                        .theta = 1e6, .factor = 4.0,
                        .original_max_position = 32768};
    check_yarn(c, 0.1 * log(4.0) + 1.0);
    /* gpt-oss-style: factor 32 over 4096, theta 150000, head 64. */
    c = (sp_rope_config){.type = SP_ROPE_YARN, .rotary_dim = 64,
                         .theta = 150000.0, .factor = 32.0,
                         .beta_fast = 32.0, .beta_slow = 1.0,
                         .original_max_position = 4096};
    check_yarn(c, 0.1 * log(32.0) + 1.0);
    /* DeepSeek-style: mscale == mscale_all_dim cancels to 1. */
    c = (sp_rope_config){.type = SP_ROPE_YARN, .rotary_dim = 64,
                         .theta = 10000.0, .factor = 40.0,
                         .beta_fast = 32.0, .beta_slow = 1.0,
                         .mscale = 1.0, .mscale_all_dim = 1.0,
                         .original_max_position = 4096};
    check_yarn(c, 1.0);
    /* Unequal mscales: the ratio (mlx-lm's YarnRoPE.mscale). */
    c.mscale = 0.707;
    c.mscale_all_dim = 0.5;
    check_yarn(c, mscale_ref(40.0, 0.707) / mscale_ref(40.0, 0.5));
    /* Explicit attention_factor wins. */
    c.attention_factor = 0.875;
    check_yarn(c, 0.875);
    /* factor <= 1: no attention scaling. */
    c = (sp_rope_config){.type = SP_ROPE_YARN, .rotary_dim = 32,
                         .theta = 10000.0, .factor = 1.0,
                         .original_max_position = 2048};
    check_yarn(c, 1.0);
}

static void test_init_rejects(void **s) {
    (void)s;
    sp_rope r;
    sp_rope_config c = {.type = SP_ROPE_DEFAULT, .rotary_dim = 7, .theta = 1e4};
    assert_int_equal(sp_rope_init(&r, &c), -1); /* odd */
    c.rotary_dim = 0;
    assert_int_equal(sp_rope_init(&r, &c), -1);
    c = (sp_rope_config){.type = SP_ROPE_LINEAR, .rotary_dim = 8, .theta = 1e4};
    assert_int_equal(sp_rope_init(&r, &c), -1); /* factor missing */
    c = (sp_rope_config){.type = SP_ROPE_DEFAULT, .rotary_dim = 8, .theta = 0};
    assert_int_equal(sp_rope_init(&r, &c), -1);
    c = (sp_rope_config){.type = (sp_rope_type)42, .rotary_dim = 8,
                         .theta = 1e4, .factor = 2};
    assert_int_equal(sp_rope_init(&r, &c), -1);
    sp_rope_free(&r); /* safe after a failed init */
}

/* ---- apply ---- */

/* Naive rotate-half in double with explicit cos/sin. The angle is the f32
 * product pos * inv_freq, which is what transformers (f32 matmul of inv_freq
 * and positions) and mlx (f32 theta) compute; everything after is double. */
static void ref_apply(double *out, const float *x, const sp_rope *r,
                      int n_heads, int hd, int pos) {
    int half = r->rotary_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        const float *a = x + h * hd;
        double *o = out + h * hd;
        for (int d = 0; d < hd; d++) o[d] = a[d];
        for (int i = 0; i < half; i++) {
            double ang = (float)pos * r->inv_freq[i];
            double c = cos(ang) * r->attn_scale, sn = sin(ang) * r->attn_scale;
            o[i] = a[i] * c - a[i + half] * sn;
            o[i + half] = a[i + half] * c + a[i] * sn;
        }
    }
}

static void check_apply(const sp_rope_config *c, int n_heads, int hd,
                        int pos) {
    sp_rope r = init_ok(c);
    int n = n_heads * hd;
    float *x = malloc(sizeof(float) * n), *x0 = malloc(sizeof(float) * n);
    double *ref = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) x[i] = (float)sin(0.37 * i + 0.1) * 2.0f;
    memcpy(x0, x, sizeof(float) * n);
    ref_apply(ref, x0, &r, n_heads, hd, pos);
    sp_rope_apply(&r, x, n_heads, hd, pos);
    for (int i = 0; i < n; i++) {
        if (i % hd >= c->rotary_dim) assert_true(x[i] == x0[i]); /* untouched */
        else assert_close(x[i], ref[i], 2e-6, 2e-6, i);
    }
    free(x), free(x0), free(ref);
    sp_rope_free(&r);
}

static void test_apply_full(void **s) {
    (void)s;
    sp_rope_config c = {.type = SP_ROPE_DEFAULT, .rotary_dim = 128,
                        .theta = 10000.0};
    int positions[] = {0, 1, 7, 1000, 32767, 131071};
    for (size_t k = 0; k < sizeof positions / sizeof *positions; k++)
        check_apply(&c, 4, 128, positions[k]);
    /* position 0 is the identity */
    sp_rope r = init_ok(&c);
    float x[128], y[128];
    for (int i = 0; i < 128; i++) x[i] = y[i] = (float)i - 60.5f;
    sp_rope_apply(&r, x, 1, 128, 0);
    assert_memory_equal(x, y, sizeof x);
    sp_rope_free(&r);
}

static void test_apply_partial(void **s) {
    (void)s;
    /* rotary_dim < head_dim: the tail of every head passes through. */
    sp_rope_config c = {.type = SP_ROPE_DEFAULT, .rotary_dim = 32,
                        .theta = 10000.0};
    check_apply(&c, 3, 128, 55);
    c.rotary_dim = 64;
    check_apply(&c, 2, 80, 4095); /* head_dim not a multiple of rotary */
}

static void test_apply_wide_and_scaled(void **s) {
    (void)s;
    /* rotary_dim 512: more pairs than one cos/sin chunk. */
    sp_rope_config c = {.type = SP_ROPE_DEFAULT, .rotary_dim = 512,
                        .theta = 1e6};
    check_apply(&c, 2, 512, 12345);
    /* yarn: cos and sin carry attn_scale. */
    c = (sp_rope_config){.type = SP_ROPE_YARN, .rotary_dim = 64,
                         .theta = 150000.0, .factor = 32.0,
                         .original_max_position = 4096};
    check_apply(&c, 8, 64, 100000);
    sp_rope r = init_ok(&c);
    assert_true(r.attn_scale > 1.3f);
    sp_rope_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_default_linear),
        cmocka_unit_test(test_init_llama3),
        cmocka_unit_test(test_init_yarn),
        cmocka_unit_test(test_init_rejects),
        cmocka_unit_test(test_apply_full),
        cmocka_unit_test(test_apply_partial),
        cmocka_unit_test(test_apply_wide_and_scaled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
