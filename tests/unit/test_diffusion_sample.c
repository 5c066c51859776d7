/* The diffusion token choice (src/generation/diffusion_sample.c): its
 * mt19937 against the standard's reference values, libstdc++'s canonical
 * double / float built from the words, and the chain's edge cases (top-k
 * 1 is greedy with confidence 1; the draw follows the softmax). Token-for-
 * token agreement with llama.cpp is tests/diffusion/test_llama_diffusion.py's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "generation/diffusion_sample.h"

/* C++11 [rand.predef]: the 10000th invocation of a default-constructed
 * std::mt19937 (seed 5489) produces 4123659995. */
static void test_mt19937_reference(void **state) {
    (void)state;
    sp_mt19937 r;
    sp_mt19937_seed(&r, 5489u);
    uint32_t x = 0;
    for (int i = 0; i < 10000; i++) x = sp_mt19937_next(&r);
    assert_int_equal(x, 4123659995u);
    sp_mt19937_seed(&r, 0u);
    assert_int_equal(sp_mt19937_next(&r), 2357136044u);
}

static void test_canonical_from_words(void **state) {
    (void)state;
    sp_mt19937 a, b;
    sp_mt19937_seed(&a, 42u);
    sp_mt19937_seed(&b, 42u);
    for (int i = 0; i < 1000; i++) {
        uint32_t lo = sp_mt19937_next(&b), hi = sp_mt19937_next(&b);
        double want = ((double)lo + (double)hi * 4294967296.0) / 18446744073709551616.0;
        double got = sp_mt19937_double(&a);
        assert_true(got == want && got >= 0.0 && got < 1.0);
    }
    for (int i = 0; i < 1000; i++) {
        float want = (float)sp_mt19937_next(&b) / 4294967296.0f;
        if (want >= 1.0f) want = nextafterf(1.0f, 0.0f);
        float got = sp_mt19937_float(&a);
        assert_true(got == want && got < 1.0f);
    }
}

static void test_top_k_one_is_greedy(void **state) {
    (void)state;
    spindle_diffusion_params p = spindle_diffusion_defaults();
    p.top_k = 1;
    p.remasking = SPINDLE_REMASK_ENTROPY;
    sp_diffusion_sampler s;
    assert_int_equal(sp_diffusion_sampler_init(&s, &p, 5, NULL), SPINDLE_OK);
    const float logits[5] = {0.5f, 2.0f, -1.0f, 1.9f, 0.0f};
    float conf = 1.0f;
    for (int i = 0; i < 20; i++) {
        assert_int_equal(sp_diffusion_sample(&s, logits, &conf), 1);
        /* one candidate: probability 1, entropy -(1 * log(1 + 1e-10)) */
        assert_true(fabsf(conf) < 1e-6f);
    }
    sp_diffusion_sampler_free(&s);
}

/* The draw follows the softmax: counts of a 3-token distribution. */
static void test_draw_follows_softmax(void **state) {
    (void)state;
    spindle_diffusion_params p = spindle_diffusion_defaults();
    p.seed = 7;
    sp_diffusion_sampler s;
    assert_int_equal(sp_diffusion_sampler_init(&s, &p, 3, NULL), SPINDLE_OK);
    const float logits[3] = {0.0f, logf(2.0f), logf(5.0f)};
    int counts[3] = {0, 0, 0};
    float conf;
    const int n = 40000;
    for (int i = 0; i < n; i++) {
        int t = sp_diffusion_sample(&s, logits, &conf);
        counts[t]++;
        assert_true(fabsf(conf - (t == 0 ? 0.125f : t == 1 ? 0.25f : 0.625f)) < 1e-6f);
    }
    assert_true(fabs(counts[0] / (double)n - 0.125) < 0.01);
    assert_true(fabs(counts[2] / (double)n - 0.625) < 0.01);
    sp_diffusion_sampler_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mt19937_reference),
        cmocka_unit_test(test_canonical_from_words),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_draw_follows_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
