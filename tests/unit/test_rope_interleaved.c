/* Interleaved RoPE (sp_rope_apply_interleaved): against a naive rotation of
 * pairs (2i, 2i + 1) evaluated in double here, and the identity that makes
 * llama.cpp's Llama GGUFs work unchanged: interleaved rope on rows permuted
 * the way convert_hf_to_gguf.py permutes q/k (pair i of a head = elements
 * i and i + d/2) equals rotate-half rope on the original rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/ops.h"

static void fill(float *x, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 8) % 20001) / 10000.0f - 1.0f;
    }
}

static void check(const float *got, const double *want, int n, double tol) {
    for (int i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i]))))
            fail_msg("index %d: got %.9g want %.9g", i, got[i], want[i]);
}

/* Naive interleaved rotation with angle pos * theta^(-2i/rot) in double. */
static void naive(const float *x, double *y, int heads, int hd, int rot,
                  double theta, int pos) {
    for (int i = 0; i < heads * hd; i++) y[i] = x[i];
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < rot / 2; i++) {
            double a = pos / pow(theta, 2.0 * i / rot);
            double x0 = x[h * hd + 2 * i], x1 = x[h * hd + 2 * i + 1];
            y[h * hd + 2 * i] = x0 * cos(a) - x1 * sin(a);
            y[h * hd + 2 * i + 1] = x1 * cos(a) + x0 * sin(a);
        }
}

static void run_naive_case(int heads, int hd, int rot, int pos) {
    sp_rope_config c = {.type = SP_ROPE_DEFAULT, .rotary_dim = rot,
                        .theta = 10000.0, .factor = 1.0};
    sp_rope r;
    assert_int_equal(sp_rope_init(&r, &c), 0);
    int n = heads * hd;
    float *x = malloc(n * sizeof *x);
    double *want = malloc(n * sizeof *want);
    assert_non_null(x);
    assert_non_null(want);
    fill(x, n, (unsigned)(hd * 31 + pos));
    naive(x, want, heads, hd, rot, 10000.0, pos);
    sp_rope_apply_interleaved(&r, x, heads, hd, pos);
    /* The angle is rounded to f32 before cos/sin (as the references do):
     * at position p that is an absolute error up to p * 2^-24. */
    check(x, want, n, 1e-6 + pos * 1.2e-7);
    free(x);
    free(want);
    sp_rope_free(&r);
}

static void test_naive(void **s) {
    (void)s;
    run_naive_case(1, 2, 2, 1);
    run_naive_case(3, 64, 64, 7);
    run_naive_case(2, 256, 256, 513);   /* more pairs than one chunk */
    run_naive_case(4, 96, 32, 12345);   /* partial: dims >= 32 untouched */
}

static void test_permuted_equivalence(void **s) {
    (void)s;
    const int heads = 3, hd = 160;   /* half = 80: crosses a chunk */
    sp_rope_config c = {.type = SP_ROPE_YARN, .rotary_dim = hd,
                        .theta = 500000.0, .factor = 4.0,
                        .original_max_position = 4096};
    sp_rope r;
    assert_int_equal(sp_rope_init(&r, &c), 0);
    int n = heads * hd, half = hd / 2;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    for (int pos = 0; pos < 3000; pos += 997) {
        fill(a, n, (unsigned)pos + 3u);
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++)
                for (int j = 0; j < 2; j++)
                    b[h * hd + 2 * i + j] = a[h * hd + j * half + i];
        sp_rope_apply(&r, a, heads, hd, pos);
        sp_rope_apply_interleaved(&r, b, heads, hd, pos);
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++)
                for (int j = 0; j < 2; j++)
                    /* Same float operations in the same order: exact. */
                    assert_true(b[h * hd + 2 * i + j] ==
                                a[h * hd + j * half + i]);
    }
    free(a);
    free(b);
    sp_rope_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_naive),
        cmocka_unit_test(test_permuted_equivalence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
