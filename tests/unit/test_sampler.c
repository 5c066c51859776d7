/* Sampler and logits processors (src/generation/sampler.c,
 * sample_filters.c, logits_processors.c) against plain references written
 * here: full sorts for the keep sets, softmax in double for the sampling
 * distribution (chi-square), scalar formulas for the processors.
 * tests/unit_py/test_sampler_vs_mlx.py compares with mlx-lm itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "generation/sampler.h"

/* ------------------------------------------------------------- helpers */

static uint64_t test_rng = 12345;
static double test_uniform(void) {  /* LCG, independent of the sampler's */
    test_rng = test_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(test_rng >> 11) * 0x1.0p-53;
}

/* Random logits: normal-ish, or small integers (many ties). */
static void random_logits(float *x, int n, int ties) {
    for (int i = 0; i < n; i++) {
        if (ties) {
            x[i] = (float)(int)(test_uniform() * 7.0) - 3.0f;
        } else {
            double s = 0;
            for (int k = 0; k < 4; k++) s += test_uniform() - 0.5;
            x[i] = (float)(s * 4.0);
        }
    }
}

/* log-softmax in double, the reference for reported logprobs. */
static void ref_log_softmax(const float *x, int n, double *out) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    for (int i = 0; i < n; i++) out[i] = (double)x[i] - mx - log(sum);
}

static spindle_sampler *new_sampler(spindle_sampler_params p) {
    spindle_sampler *s = NULL;
    spindle_error err;
    assert_int_equal(spindle_sampler_new(&p, &s, &err), SPINDLE_OK);
    return s;
}

static int32_t sample_copy(spindle_sampler *s, const float *logits, int n,
                           float *logprob) {
    float buf[512];
    assert_true(n <= 512);
    memcpy(buf, logits, (size_t)n * sizeof *buf);
    int32_t tok = -1;
    spindle_error err;
    assert_int_equal(spindle_sampler_sample(s, buf, n, &tok, logprob, &err),
                     SPINDLE_OK);
    assert_true(tok >= 0 && tok < n);
    return tok;
}

/* -------------------------------------------------------------- greedy */

static void test_greedy_argmax_and_ties(void **state) {
    (void)state;
    spindle_sampler *s = new_sampler(spindle_sampler_defaults());
    const float x[] = {1.0f, 5.0f, -3.0f, 5.0f, 2.0f};
    double ref[5];
    ref_log_softmax(x, 5, ref);
    float lp;
    /* Ties go to the lowest index, as mx.argmax. */
    assert_int_equal(sample_copy(s, x, 5, &lp), 1);
    assert_true(fabs(lp - ref[1]) < 1e-6);
    const float y[] = {-INFINITY, -1.0f, 0.5f, 0.25f};
    assert_int_equal(sample_copy(s, y, 4, NULL), 2);
    const float z[] = {7.0f, 7.0f, 7.0f};
    assert_int_equal(sample_copy(s, z, 3, &lp), 0);
    assert_true(fabs(lp - log(1.0 / 3.0)) < 1e-6);
    spindle_sampler_free(s);
}

/* ------------------------------------------------------------ the seed */

static void draw_sequence(uint64_t seed, int32_t *out, int count) {
    spindle_sampler_params p = spindle_sampler_defaults();
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.seed = seed;
    spindle_sampler *s = new_sampler(p);
    float x[64];
    test_rng = 99;
    random_logits(x, 64, 0);
    for (int i = 0; i < count; i++) out[i] = sample_copy(s, x, 64, NULL);
    spindle_sampler_free(s);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    int32_t a[200], b[200], c[200];
    draw_sequence(42, a, 200);
    draw_sequence(42, b, 200);
    draw_sequence(43, c, 200);
    assert_memory_equal(a, b, sizeof a);
    int differ = 0;
    for (int i = 0; i < 200; i++) differ += a[i] != c[i];
    assert_true(differ > 20);
}

/* A clone (the draft-model drafter's) draws what the original would draw
 * next, XTC special ids and coin flips included, and cloning or drawing on
 * the clone leaves the original's stream where it was. */
static void test_clone_continues_stream(void **state) {
    (void)state;
    spindle_sampler_params p = spindle_sampler_defaults();
    p.temperature = 0.9f;
    p.top_p = 0.99f;
    p.top_k = 3;
    p.seed = 7;
    p.xtc_probability = 0.5f;
    p.xtc_threshold = 0.1f;
    p.xtc_special_tokens = (const int32_t[]){0};
    p.n_xtc_special_tokens = 1;
    spindle_sampler *s = new_sampler(p);
    /* p = 0.5, 0.3, 0.15, 0.05: XTC keeps id 0 only as a special id */
    const float x[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    for (int i = 0; i < 5; i++) sample_copy(s, x, 4, NULL);
    uint64_t before[4], after[4];
    sp_sampler_get_rng(s, before);
    spindle_sampler *c = NULL;
    spindle_error err;
    assert_int_equal(sp_sampler_clone(s, &c, &err), SPINDLE_OK);
    assert_false(sp_sampler_greedy(c));
    int32_t a[200], b[200];
    for (int i = 0; i < 200; i++) b[i] = sample_copy(c, x, 4, NULL);
    sp_sampler_get_rng(s, after);
    assert_memory_equal(before, after, sizeof before);
    int zeros = 0;
    for (int i = 0; i < 200; i++) {
        a[i] = sample_copy(s, x, 4, NULL);
        zeros += a[i] == 0;
    }
    assert_memory_equal(a, b, sizeof a);
    assert_true(zeros > 90);   /* id 0 survived XTC as a special id */
    spindle_sampler_free(c);
    spindle_sampler_free(s);
    spindle_sampler *g = new_sampler(spindle_sampler_defaults());
    assert_true(sp_sampler_greedy(g));
    spindle_sampler_free(g);
}

/* ---------------------------------------------------------- chi-square */

/* Pearson's statistic of `counts` against probabilities `p` (categories
 * with p == 0 must stay empty). */
static double chi_square(const long *counts, const double *p, int n,
                         long draws) {
    double chi = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] == 0) {
            assert_int_equal(counts[i], 0);
            continue;
        }
        double e = p[i] * (double)draws;
        chi += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
    }
    return chi;
}

static void check_distribution(spindle_sampler_params params, const float *x,
                               int n, const double *expected, double critical) {
    spindle_sampler *s = new_sampler(params);
    long counts[16] = {0};
    const long draws = 200000;
    for (long d = 0; d < draws; d++) counts[sample_copy(s, x, n, NULL)]++;
    spindle_sampler_free(s);
    double chi = chi_square(counts, expected, n, draws);
    if (!(chi < critical)) fail_msg("chi-square %.2f >= %.2f", chi, critical);
}

static void test_temperature_distribution(void **state) {
    (void)state;
    const float x[8] = {0.3f, -1.2f, 2.0f, 0.0f, 1.1f, -0.4f, 0.9f, -2.5f};
    const float temps[] = {0.7f, 1.0f, 1.8f};
    for (int t = 0; t < 3; t++) {
        double p[8], sum = 0;
        for (int i = 0; i < 8; i++) sum += p[i] = exp((double)x[i] / temps[t]);
        for (int i = 0; i < 8; i++) p[i] /= sum;
        spindle_sampler_params params = spindle_sampler_defaults();
        params.temperature = temps[t];
        params.seed = 1000 + (uint64_t)t;
        /* 7 degrees of freedom, p = 0.001 */
        check_distribution(params, x, 8, p, 24.32);
    }
}

static void test_top_k_distribution(void **state) {
    (void)state;
    const float x[8] = {0.3f, -1.2f, 2.0f, 0.0f, 1.1f, -0.4f, 0.9f, -2.5f};
    /* top 3: ids 2, 4, 6; renormalized softmax(x / T) over them */
    const float temp = 1.3f;
    double p[8] = {0}, sum = 0;
    const int keep[3] = {2, 4, 6};
    for (int j = 0; j < 3; j++) sum += p[keep[j]] = exp(x[keep[j]] / temp);
    for (int j = 0; j < 3; j++) p[keep[j]] /= sum;
    spindle_sampler_params params = spindle_sampler_defaults();
    params.temperature = temp;
    params.top_k = 3;
    params.seed = 7;
    check_distribution(params, x, 8, p, 13.82);  /* 2 dof, p = 0.001 */
}

/* ------------------------------------------- keep sets vs full-sort refs */

typedef struct {
    float v;
    int i;
} vi_t;

static int by_value_desc_index_asc(const void *pa, const void *pb) {
    const vi_t *a = pa, *b = pb;
    if (a->v != b->v) return a->v < b->v ? 1 : -1;
    return a->i - b->i;
}

static int by_value_desc_index_desc(const void *pa, const void *pb) {
    const vi_t *a = pa, *b = pb;
    if (a->v != b->v) return a->v < b->v ? 1 : -1;
    return b->i - a->i;
}

static void sorted_pairs(const float *lp, int n, vi_t *out,
                         int (*cmp)(const void *, const void *)) {
    for (int i = 0; i < n; i++) out[i] = (vi_t){lp[i], i};
    qsort(out, (size_t)n, sizeof *out, cmp);
}

/* Random log-probabilities as the sampler sees them. */
static int make_case(int c, float *lp) {
    const int sizes[] = {1, 2, 3, 7, 50, 300};
    int n = sizes[c % 6];
    random_logits(lp, n, c % 2);
    spindle_error err;
    assert_int_equal(sp_sample_log_softmax(lp, n, NULL, &err), SPINDLE_OK);
    return n;
}

static void assert_same_keep(const float *got, const float *orig,
                             const char *keep, int n, int c) {
    for (int i = 0; i < n; i++) {
        if (keep[i]) {
            if (got[i] != orig[i])
                fail_msg("case %d: token %d should be kept unchanged", c, i);
        } else if (got[i] != -INFINITY) {
            fail_msg("case %d: token %d should be removed", c, i);
        }
    }
}

static void test_top_k_keep_set(void **state) {
    (void)state;
    float lp[300], got[300], scratch[300];
    vi_t pairs[300];
    char keep[300];
    test_rng = 1;
    for (int c = 0; c < 300; c++) {
        int n = make_case(c, lp);
        int k = 1 + (int)(test_uniform() * n);
        sorted_pairs(lp, n, pairs, by_value_desc_index_asc);
        memset(keep, 0, sizeof keep);
        for (int j = 0; j < k; j++) keep[pairs[j].i] = 1;
        memcpy(got, lp, sizeof lp);
        sp_apply_top_k(got, n, k, scratch);
        assert_same_keep(got, lp, keep, n, c);
    }
}

static void test_top_p_keep_set(void **state) {
    (void)state;
    float lp[300], got[300], scratch[300];
    vi_t pairs[300];
    char keep[300];
    test_rng = 2;
    for (int c = 0; c < 300; c++) {
        int n = make_case(c, lp);
        float top_p = (float)(0.02 + 0.97 * test_uniform());
        /* Walk down the sorted probabilities while the mass strictly above
         * stays below top_p; then keep everything tied with the last. */
        sorted_pairs(lp, n, pairs, by_value_desc_index_asc);
        double total = 0, above = 0;
        for (int j = 0; j < n; j++) total += exp((double)pairs[j].v);
        float cut = pairs[0].v;
        for (int j = 0; j < n && above < top_p * total; j++) {
            cut = pairs[j].v;
            above += exp((double)pairs[j].v);
        }
        for (int i = 0; i < n; i++) keep[i] = lp[i] >= cut;
        memcpy(got, lp, sizeof lp);
        sp_apply_top_p(got, n, top_p, scratch);
        assert_same_keep(got, lp, keep, n, c);
    }
}

static void test_min_p_keep_set(void **state) {
    (void)state;
    float lp[300], got[300], scratch[300];
    vi_t pairs[300];
    char keep[300];
    test_rng = 3;
    for (int c = 0; c < 300; c++) {
        int n = make_case(c, lp);
        float min_p = (float)(0.001 + 0.999 * test_uniform());
        int min_keep = 1 + (int)(test_uniform() * 4);
        sorted_pairs(lp, n, pairs, by_value_desc_index_desc);
        float cut = pairs[0].v + (float)log(min_p);
        for (int i = 0; i < n; i++) keep[i] = !(lp[i] < cut);
        for (int j = 0; j < min_keep && j < n; j++) keep[pairs[j].i] = 1;
        memcpy(got, lp, sizeof lp);
        sp_apply_min_p(got, n, min_p, min_keep, scratch);
        assert_same_keep(got, lp, keep, n, c);
    }
}

static void test_xtc_rule(void **state) {
    (void)state;
    /* probabilities 0.5, 0.3, 0.15, 0.05: above 0.1 are ids 0, 1, 2; all
     * but the least likely of them (id 2) go. */
    float lp[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    float got[4], scratch[4];
    memcpy(got, lp, sizeof lp);
    sp_apply_xtc(got, 4, 0.1f, NULL, 0, scratch);
    assert_same_keep(got, lp, (const char[]){0, 0, 1, 1}, 4, 0);
    /* A special id is never removed. */
    memcpy(got, lp, sizeof lp);
    sp_apply_xtc(got, 4, 0.1f, (const int32_t[]){0}, 1, scratch);
    assert_same_keep(got, lp, (const char[]){1, 0, 1, 1}, 4, 1);
    /* Nothing above the threshold: nothing removed. */
    memcpy(got, lp, sizeof lp);
    sp_apply_xtc(got, 4, 0.5f, NULL, 0, scratch);
    assert_same_keep(got, lp, (const char[]){1, 1, 1, 1}, 4, 2);
}

/* The reported logprob is the unfiltered log-softmax, whatever is kept. */
static void test_reported_logprob(void **state) {
    (void)state;
    float x[300];
    double ref[300];
    test_rng = 5;
    random_logits(x, 300, 0);
    ref_log_softmax(x, 300, ref);
    spindle_sampler_params p = spindle_sampler_defaults();
    p.temperature = 0.8f;
    p.top_k = 20;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    spindle_sampler *s = new_sampler(p);
    for (int d = 0; d < 100; d++) {
        float lp;
        int32_t t = sample_copy(s, x, 300, &lp);
        assert_true(fabs(lp - ref[t]) <= 1e-5 * fmax(1.0, fabs(ref[t])));
    }
    spindle_sampler_free(s);
}

/* ------------------------------------------------------------ processors */

static void test_processors_formulas(void **state) {
    (void)state;
    const sp_logit_bias bias[] = {{3, 1.0f}, {0, -0.5f}};
    sp_logits_params lp = sp_logits_params_defaults();
    lp.logit_bias = bias;
    lp.n_logit_bias = 2;
    lp.repetition_penalty = 1.5f;
    lp.repetition_context_size = 4;  /* window: 0, 2, 1, 0 */
    lp.presence_penalty = 0.5f;
    lp.presence_context_size = 0;    /* whole history */
    lp.frequency_penalty = 0.25f;
    lp.frequency_context_size = 4;   /* window: 0, 2, 1, 0 */
    sp_logits_processors *p = NULL;
    spindle_error err;
    assert_int_equal(sp_logits_processors_new(&lp, &p, &err), SPINDLE_OK);
    assert_true(sp_logits_processors_active(p));
    const int32_t hist[] = {4, 0, 2, 1, 0};
    float x[5] = {1.0f, -2.0f, 3.0f, 0.5f, 2.0f};
    assert_int_equal(sp_logits_process(p, hist, 5, x, 5, &err), SPINDLE_OK);

    float want[5] = {1.0f, -2.0f, 3.0f, 0.5f, 2.0f};
    want[3] += 1.0f;                       /* bias, first */
    want[0] += -0.5f;
    want[2] = want[2] / 1.5f;              /* repetition: once per id */
    want[1] = want[1] * 1.5f;
    want[0] = want[0] / 1.5f;
    want[0] -= 0.5f;                       /* presence: once per id */
    want[1] -= 0.5f;
    want[2] -= 0.5f;
    want[4] -= 0.5f;
    want[0] -= 0.25f;                      /* frequency: per occurrence */
    want[0] -= 0.25f;
    want[1] -= 0.25f;
    want[2] -= 0.25f;
    for (int i = 0; i < 5; i++)
        if (x[i] != want[i]) fail_msg("logit %d: %g != %g", i, x[i], want[i]);

    /* An empty history only applies the bias. */
    float y[5] = {0, 0, 0, 0, 0};
    assert_int_equal(sp_logits_process(p, NULL, 0, y, 5, &err), SPINDLE_OK);
    assert_true(y[3] == 1.0f && y[0] == -0.5f && y[1] == 0.0f);
    /* Out-of-range ids are rejected before anything changes. */
    const int32_t bad[] = {1, 9};
    float z[5] = {0, 0, 0, 0, 0};
    assert_int_equal(sp_logits_process(p, bad, 2, z, 5, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_true(z[3] == 0.0f);
    assert_int_equal(sp_logits_process(p, hist, 5, z, 3, &err),
                     SPINDLE_ERR_ARGUMENT);  /* bias id 3 outside 3 */
    sp_logits_processors_free(p);
}

/* ---------------------------------------------------------------- errors */

static void test_rejects(void **state) {
    (void)state;
    spindle_sampler *s = NULL;
    spindle_error err;
    spindle_sampler_params p = spindle_sampler_defaults();
    p.temperature = -1.0f;
    assert_int_equal(spindle_sampler_new(&p, &s, &err), SPINDLE_ERR_ARGUMENT);
    assert_null(s);
    p = spindle_sampler_defaults();
    p.temperature = NAN;
    assert_int_equal(spindle_sampler_new(&p, &s, &err), SPINDLE_ERR_ARGUMENT);
    p = spindle_sampler_defaults();
    p.min_p = 1.5f;
    assert_int_equal(spindle_sampler_new(&p, &s, &err), SPINDLE_ERR_ARGUMENT);
    p = spindle_sampler_defaults();
    p.min_p = 0.1f;
    p.min_tokens_to_keep = 0;
    assert_int_equal(spindle_sampler_new(&p, &s, &err), SPINDLE_ERR_ARGUMENT);
    p = spindle_sampler_defaults();
    p.top_k = -2;
    assert_int_equal(spindle_sampler_new(&p, &s, &err), SPINDLE_ERR_ARGUMENT);
    p = spindle_sampler_defaults();
    p.xtc_probability = 0.5f;
    p.xtc_threshold = 0.7f;
    assert_int_equal(spindle_sampler_new(&p, &s, &err), SPINDLE_ERR_ARGUMENT);

    s = new_sampler(spindle_sampler_defaults());
    int32_t tok;
    float nan_logits[3] = {0.0f, NAN, 1.0f};
    assert_int_equal(spindle_sampler_sample(s, nan_logits, 3, &tok, NULL, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_non_null(strstr(err.message, "NaN"));
    float dead[2] = {-INFINITY, -INFINITY};
    assert_int_equal(spindle_sampler_sample(s, dead, 2, &tok, NULL, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_int_equal(spindle_sampler_sample(s, dead, 0, &tok, NULL, &err),
                     SPINDLE_ERR_ARGUMENT);
    spindle_sampler_free(s);
    spindle_sampler_free(NULL);

    sp_logits_params lp = sp_logits_params_defaults();
    lp.repetition_penalty = -1.0f;
    sp_logits_processors *procs = NULL;
    assert_int_equal(sp_logits_processors_new(&lp, &procs, &err),
                     SPINDLE_ERR_ARGUMENT);
    lp = sp_logits_params_defaults();
    lp.presence_context_size = -1;
    assert_int_equal(sp_logits_processors_new(&lp, &procs, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_null(procs);
    sp_logits_processors_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_argmax_and_ties),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_clone_continues_stream),
        cmocka_unit_test(test_temperature_distribution),
        cmocka_unit_test(test_top_k_distribution),
        cmocka_unit_test(test_top_k_keep_set),
        cmocka_unit_test(test_top_p_keep_set),
        cmocka_unit_test(test_min_p_keep_set),
        cmocka_unit_test(test_xtc_rule),
        cmocka_unit_test(test_reported_logprob),
        cmocka_unit_test(test_processors_formulas),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
