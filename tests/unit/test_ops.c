/* Element-wise kernels (src/compute/ops.c) against scalar double references
 * written from the definitions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/ops.h"
#include "compute/cpu_features.h"
#include "compute/mlx_exp.h"

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_util.h"

/* ---- rmsnorm ---- */

static void ref_rmsnorm(double *out, const float *x, const float *w, int n,
                        double eps, double off) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * r * (w ? off + w[i] : 1.0);
}

static void check_rmsnorm(int n, float off, int with_w, int alias) {
    float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    float *out = malloc(sizeof(float) * n);
    double *ref = malloc(sizeof(double) * n);
    fill_uniform(x, n, -3.0f, 3.0f);
    fill_uniform(w, n, -1.0f, 2.0f);
    const float *wp = with_w ? w : NULL;
    ref_rmsnorm(ref, x, wp, n, 1e-6, off);
    float *dst = alias ? x : out;
    sp_rmsnorm(dst, x, wp, n, 1e-6f, off);
    for (int i = 0; i < n; i++) assert_close(dst[i], ref[i], 1e-6, 1e-5, i);
    free(x), free(w), free(out), free(ref);
}

static void test_rmsnorm_offset0(void **s) {
    (void)s;
    check_rmsnorm(4096, 0.0f, 1, 0);
    check_rmsnorm(1, 0.0f, 1, 0);
}
static void test_rmsnorm_offset1(void **s) {
    (void)s;
    check_rmsnorm(2304, 1.0f, 1, 0);
}
static void test_rmsnorm_null_weight(void **s) {
    (void)s;
    check_rmsnorm(128, 0.0f, 0, 0);
    check_rmsnorm(128, 1.0f, 0, 0); /* NULL weight: no scale, offset unused */
}
static void test_rmsnorm_alias(void **s) {
    (void)s;
    check_rmsnorm(1000, 0.0f, 1, 1);
    check_rmsnorm(1000, 1.0f, 1, 1);
}
static void test_rmsnorm_odd(void **s) {
    (void)s;
    for (int n = 1; n < 40; n += 3) check_rmsnorm(n, 0.0f, 1, 0);
    check_rmsnorm(4097, 1.0f, 1, 0);
}

static void test_rmsnorm_eps_dominates(void **s) {
    (void)s;
    /* All-zero input: the output is exactly zero, no NaN. */
    float x[5] = {0}, w[5] = {1, 1, 1, 1, 1};
    sp_rmsnorm(x, x, w, 5, 1e-5f, 0.0f);
    for (int i = 0; i < 5; i++) assert_true(x[i] == 0.0f);
}

/* ---- gated activations ---- */

static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double ref_gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* x Phi(x) in double; erfc keeps the negative tail's relative accuracy. */
static double ref_gelu_erf(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }

/* The erf GELU has no up operand; its negative tail (values down to
 * ~1e-27 at x = -11) is checked relatively, as a product would see it. */
static void check_gelu_erf(void) {
    enum { N = 1003 };
    float x[N], x0[N];
    fill_uniform(x, N, -12.0f, 12.0f);
    x[0] = -100.0f, x[1] = 100.0f, x[2] = 0.0f, x[3] = -1e-30f, x[4] = -5.0f;
    memcpy(x0, x, sizeof x);
    sp_gelu_erf(x, N);
    for (int i = 0; i < N; i++) {
        const double want = ref_gelu_erf(x0[i]);
        /* Below -3 the vector form's f32 exponent (-z^2 + P(t), |z^2| > 4.5)
         * carries ~1e-6 of rounding, a relative error of the result. */
        const double rel = x0[i] > -3.0f ? 1e-6 : 1e-5;
        const double tol = rel * fabs(want) + 1e-30;
        if (fabs(x[i] - want) > tol)
            fail_msg("gelu_erf(%.9g) = %.9g, want %.9g", x0[i], x[i], want);
    }
}

static void check_gated(int which) {
    enum { N = 1003 };
    float g[N], u[N], g0[N];
    fill_uniform(g, N, -12.0f, 12.0f);
    fill_uniform(u, N, -2.0f, 2.0f);
    g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f, g[3] = -1e-30f;
    memcpy(g0, g, sizeof g);
    if (which == 0) sp_silu_mul(g, u, N);
    else sp_gelu_tanh_mul(g, u, N);
    for (int i = 0; i < N; i++) {
        double a = which == 0 ? ref_silu(g0[i]) : ref_gelu_tanh(g0[i]);
        assert_close(g[i], a * u[i], 1e-6, 2e-6, i);
    }
}

/* On the portable path and, where the CPU has them, the vector one at each
 * x86 level (activations_avx2.c); precision exact keeps libm's. */
static void check_gated_levels(int which) {
    const sp_simd_level own = sp_simd_current();
    const sp_simd_level levels[] = {SP_SIMD_SCALAR, SP_SIMD_AVX2, SP_SIMD_AVX512};
    for (size_t l = 0; l < 3; l++) {
        if (!sp_simd_force(levels[l])) continue;
        which < 2 ? check_gated(which) : check_gelu_erf();
    }
    assert_true(sp_simd_force(own));
    const sp_precision p = sp_mm_precision();
    sp_mm_precision_force(SP_PRECISION_EXACT);
    which < 2 ? check_gated(which) : check_gelu_erf();
    sp_mm_precision_force(p);
}

static void test_silu_mul(void **s) { (void)s; check_gated_levels(0); }
static void test_gelu_tanh_mul(void **s) { (void)s; check_gated_levels(1); }
static void test_gelu_erf(void **s) { (void)s; check_gated_levels(2); }

/* ---- softmax / log_softmax ---- */

static void ref_log_softmax(double *out, const float *x, int n) {
    double m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - m);
    for (int i = 0; i < n; i++) out[i] = ((double)x[i] - m) - log(sum);
}

static void check_softmax(const float *x, int n) {
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    double *ref = malloc(sizeof(double) * n);
    memcpy(a, x, sizeof(float) * n);
    memcpy(b, x, sizeof(float) * n);
    ref_log_softmax(ref, x, n);
    sp_softmax(a, n);
    sp_log_softmax(b, n);
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        total += a[i];
        assert_close(a[i], exp(ref[i]), 1e-9, 1e-5, i);
        if (isinf(ref[i])) {
            assert_true(isinf(b[i]) && b[i] < 0);
        } else {
            /* log-prob error: f32 rounding of x - m dominates, relative to
             * the magnitude of the inputs. */
            double scale = fabs(ref[i]) + fabs((double)x[i]) + 1.0;
            assert_close(b[i], ref[i], 1e-6 * scale, 0.0, i);
        }
    }
    assert_close(total, 1.0, 1e-5, 0.0, -1);
    free(a), free(b), free(ref);
}

static void test_softmax_basic(void **s) {
    (void)s;
    float x[7];
    fill_uniform(x, 7, -5.0f, 5.0f);
    check_softmax(x, 7);
    float one[1] = {3.5f};
    check_softmax(one, 1);
    enum { V = 151936 };
    float *big = malloc(sizeof(float) * V);
    fill_uniform(big, V, -20.0f, 20.0f);
    check_softmax(big, V);
    free(big);
}

static void test_softmax_large_magnitudes(void **s) {
    (void)s;
    float x[6] = {1e4f, 1e4f - 1.0f, -1e4f, 9990.0f, 1e4f - 0.5f, -3e38f};
    check_softmax(x, 6);
    float y[4] = {-1e4f, -1e4f - 2.0f, -1e4f - 0.25f, -2e4f};
    check_softmax(y, 4);
}

static void test_softmax_neg_inf(void **s) {
    (void)s;
    float x[8] = {0.5f, -INFINITY, 2.0f, -INFINITY, -1.0f, 0.0f, -INFINITY, 3.0f};
    check_softmax(x, 8);
    float y[3] = {-INFINITY, 7.0f, -INFINITY}; /* one survivor: prob 1 */
    sp_softmax(y, 3);
    assert_true(y[0] == 0.0f && y[1] == 1.0f && y[2] == 0.0f);
}

/* ---- mlx's exponential (the sampler's log-softmax) ---- */

/* mlx.core.exp on the CPU (mlx[cpu] 0.32), the f32 bits of each result:
 *   mx.exp(mx.array(xs, mx.float32)) viewed as uint32. */
static const struct {
    float x;
    uint32_t bits;
} MLX_EXP[] = {
    {-87.9000015f, 0x00000000}, {-50.25f, 0x1b359839}, {-20.0f, 0x310da432},
    {-3.70000005f, 0x3cca88fe}, {-1.0f, 0x3ebc5ab2}, {-0.5f, 0x3f1b4598},
    {-0.00100000005f, 0x3f7fbe7f}, {0.0f, 0x3f800000},
    {0.00100000005f, 0x3f8020c9}, {0.499989986f, 0x3fd308c2},
    {0.5f, 0x3fd3094d}, {1.29999995f, 0x406ad5c0}, {7.76999998f, 0x4514078c},
    {42.0f, 0x5dc11915}, {87.9000015f, 0x7ee0dcb3}, {-88.5f, 0x00000000},
    {88.5f, 0x7f800000},
};

static uint32_t bits_of(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* At each level the terms are mlx's bits, and the vector levels give the
 * portable path's terms and running sum bit for bit on a vocabulary-sized
 * row (tails of every length mod 8 included). */
static void test_mlx_exp_sum(void **s) {
    (void)s;
    enum { N = 151669, K = sizeof MLX_EXP / sizeof MLX_EXP[0] };
    float *x = malloc(N * sizeof *x), *want = malloc(N * sizeof *want);
    float *got = malloc(N * sizeof *got);
    assert_non_null(x);
    assert_non_null(want);
    assert_non_null(got);
    fill_uniform(x, N, -100.0f, 12.0f);
    x[5] = -INFINITY, x[6] = 3.5f, x[7] = 3.5f - 88.0f, x[8] = 3.5f + 88.0f;
    const sp_simd_level own = sp_simd_current();
    assert_true(sp_simd_force(SP_SIMD_SCALAR));
    float want_sum = sp_mlx_exp_sum(x, N, 3.5f, want);
    const sp_simd_level levels[] = {SP_SIMD_SCALAR, SP_SIMD_AVX2, SP_SIMD_AVX512};
    for (size_t l = 0; l < 3; l++) {
        if (!sp_simd_force(levels[l])) continue;
        float xs[K], e[K];
        for (int i = 0; i < K; i++) xs[i] = MLX_EXP[i].x;
        for (int n = 1; n <= K; n++) {   /* every tail length */
            sp_mlx_exp_sum(xs, n, 0.0f, e);
            for (int i = 0; i < n; i++)
                if (bits_of(e[i]) != MLX_EXP[i].bits)
                    fail_msg("level %zu: exp(%.9g) = %08x, mlx %08x", l, xs[i],
                             bits_of(e[i]), MLX_EXP[i].bits);
        }
        for (int n = N - 9; n <= N; n++) {
            float sum = sp_mlx_exp_sum(x, n, 3.5f, got);
            float serial = 0.0f;
            for (int i = 0; i < n; i++) serial += want[i];
            if (bits_of(sum) != bits_of(serial))
                fail_msg("level %zu, n %d: sum %.9g, serial %.9g", l, n, sum, serial);
            if (memcmp(got, want, (size_t)n * sizeof *got))
                fail_msg("level %zu, n %d: terms differ from the portable path", l, n);
        }
        assert_true(sp_mlx_exp_sum(x, N, 3.5f, NULL) == want_sum);
    }
    assert_true(sp_simd_force(own));
    free(x), free(want), free(got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_offset0),
        cmocka_unit_test(test_rmsnorm_offset1),
        cmocka_unit_test(test_rmsnorm_null_weight),
        cmocka_unit_test(test_rmsnorm_alias),
        cmocka_unit_test(test_rmsnorm_odd),
        cmocka_unit_test(test_rmsnorm_eps_dominates),
        cmocka_unit_test(test_silu_mul),
        cmocka_unit_test(test_gelu_tanh_mul),
        cmocka_unit_test(test_gelu_erf),
        cmocka_unit_test(test_softmax_basic),
        cmocka_unit_test(test_softmax_large_magnitudes),
        cmocka_unit_test(test_softmax_neg_inf),
        cmocka_unit_test(test_mlx_exp_sum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
