/* The sampler object: validated parameters, its own random stream
 * (xoshiro256** seeded through splitmix64) and a vocab-sized scratch, and
 * the step that chains log-softmax, the filters and the categorical draw in
 * the order of mlx_lm.sample_utils.make_sampler. */
#include "generation/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct spindle_sampler {
    spindle_sampler_params p;    /* p.xtc_special_tokens: NULL (see below) */
    int32_t *xtc_special;        /* the copy of the special ids */
    int n_xtc_special;
    uint64_t rng[4];
    float *scratch;   /* grows to the largest vocab seen */
    int scratch_cap;
};

spindle_sampler_params spindle_sampler_defaults(void) {
    /* mlx_lm.generate's command-line defaults. */
    spindle_sampler_params p = {
        .temperature = 0.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .min_tokens_to_keep = 1,
        .seed = 0,
        .xtc_probability = 0.0f,
        .xtc_threshold = 0.1f,
    };
    return p;
}

/* ------------------------------------------------------------------ rng */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double uniform01(uint64_t s[4]) {
    return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53;
}

void sp_sampler_get_rng(const spindle_sampler *s, uint64_t state[4]) {
    memcpy(state, s->rng, sizeof s->rng);
}

void sp_sampler_set_rng(spindle_sampler *s, const uint64_t state[4]) {
    memcpy(s->rng, state, sizeof s->rng);
}

/* -------------------------------------------------------------- creation */

/* The ranges mlx-lm checks when it builds the chain (top_p, min_p,
 * min_tokens_to_keep, XTC), and no negative or NaN temperature. */
static spindle_status validate(const spindle_sampler_params *p,
                               spindle_error *err) {
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "temperature must be finite and >= 0, got %g",
                       (double)p->temperature);
    if (p->temperature > 0.0f && isinf((float)(1.0 / p->temperature)))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "temperature %g is too small to invert in float",
                       (double)p->temperature);
    if (p->top_k < 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "top_k must be >= 0, got %d", p->top_k);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "top_p must be in [0, 1], got %g", (double)p->top_p);
    if (p->min_p != 0.0f) {
        if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "min_p must be in [0, 1], got %g",
                           (double)p->min_p);
        if (p->min_tokens_to_keep < 1)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "min_tokens_to_keep must be >= 1, got %d",
                           p->min_tokens_to_keep);
    }
    if (p->xtc_probability != 0.0f) {
        if (!(p->xtc_probability >= 0.0f && p->xtc_probability <= 1.0f))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "xtc probability must be in [0, 1], got %g",
                           (double)p->xtc_probability);
        if (!(p->xtc_threshold >= 0.0f && p->xtc_threshold <= 0.5f))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "xtc threshold must be in [0, 0.5], got %g",
                           (double)p->xtc_threshold);
    }
    if (p->n_xtc_special_tokens < 0 ||
        (p->n_xtc_special_tokens > 0 && !p->xtc_special_tokens))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "invalid xtc special token list (%d ids)",
                       p->n_xtc_special_tokens);
    return SPINDLE_OK;
}

spindle_status spindle_sampler_new(const spindle_sampler_params *params,
                                   spindle_sampler **out, spindle_error *err) {
    if (!out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "sampler: out must not be NULL");
    *out = NULL;
    spindle_sampler_params p = params ? *params : spindle_sampler_defaults();
    spindle_status st = validate(&p, err);
    if (st != SPINDLE_OK) return st;

    spindle_sampler *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(err, SPINDLE_ERR_MEMORY, "sampler: out of memory");
    if (p.n_xtc_special_tokens > 0) {
        size_t bytes = (size_t)p.n_xtc_special_tokens * sizeof(int32_t);
        s->xtc_special = malloc(bytes);
        if (!s->xtc_special) {
            free(s);
            return sp_fail(err, SPINDLE_ERR_MEMORY,
                           "sampler: out of memory for %d xtc special ids",
                           p.n_xtc_special_tokens);
        }
        memcpy(s->xtc_special, p.xtc_special_tokens, bytes);
        s->n_xtc_special = p.n_xtc_special_tokens;
    }
    /* The caller's array is borrowed only for this call. */
    p.xtc_special_tokens = NULL;
    p.n_xtc_special_tokens = 0;
    s->p = p;
    uint64_t seed = p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&seed);
    *out = s;
    return SPINDLE_OK;
}

spindle_status sp_sampler_clone(const spindle_sampler *sampler,
                                spindle_sampler **out, spindle_error *err) {
    spindle_sampler_params p = sampler->p;
    p.xtc_special_tokens = sampler->xtc_special;
    p.n_xtc_special_tokens = sampler->n_xtc_special;
    spindle_status st = spindle_sampler_new(&p, out, err);
    if (st == SPINDLE_OK) sp_sampler_set_rng(*out, sampler->rng);
    return st;
}

bool sp_sampler_greedy(const spindle_sampler *sampler) {
    return sampler->p.temperature == 0.0f;
}

void spindle_sampler_free(spindle_sampler *sampler) {
    if (!sampler) return;
    free(sampler->xtc_special);
    free(sampler->scratch);
    free(sampler);
}

/* ---------------------------------------------------------------- sample */

/* mx.random.categorical(logprobs * (1 / temp)): a draw from the softmax of
 * the scaled finite entries, by inverse CDF over the vocabulary. */
static int32_t categorical(spindle_sampler *s, const float *logprobs, int n) {
    float inv_t = (float)(1.0 / (double)s->p.temperature);
    float *w = s->scratch;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        w[i] = logprobs[i] * inv_t;
        if (w[i] > mx) mx = w[i];
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        w[i] = expf(w[i] - mx);
        sum += w[i];
    }
    double r = uniform01(s->rng) * sum;
    double acc = 0.0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (w[i] <= 0.0f) continue;
        acc += w[i];
        last = i;
        if (r < acc) return i;
    }
    /* r landed on the rounding slack of the sum: the last nonzero weight. */
    return last;
}

static spindle_status ensure_scratch(spindle_sampler *s, int n,
                                     spindle_error *err) {
    if (n <= s->scratch_cap) return SPINDLE_OK;
    float *grown = realloc(s->scratch, (size_t)n * sizeof *grown);
    if (!grown)
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "sampler: no memory for %d-entry scratch", n);
    s->scratch = grown;
    s->scratch_cap = n;
    return SPINDLE_OK;
}

spindle_status sp_sampler_filter(spindle_sampler *sampler, float *logprobs,
                                 int n_vocab, spindle_error *err) {
    if (!sampler || !logprobs || n_vocab <= 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "sampler_filter: invalid arguments (vocab %d)", n_vocab);
    const spindle_sampler_params *p = &sampler->p;
    if (p->temperature == 0.0f) return SPINDLE_OK;
    spindle_status st = ensure_scratch(sampler, n_vocab, err);
    if (st != SPINDLE_OK) return st;
    float *scratch = sampler->scratch;
    if (p->top_p > 0.0f && p->top_p < 1.0f)
        sp_apply_top_p(logprobs, n_vocab, p->top_p, scratch);
    if (p->min_p != 0.0f)
        sp_apply_min_p(logprobs, n_vocab, p->min_p, p->min_tokens_to_keep,
                       scratch);
    /* mlx keeps the logits when uniform(0, 1) > probability. */
    if (sampler->p.xtc_probability > 0.0f &&
        uniform01(sampler->rng) <= (double)sampler->p.xtc_probability)
        sp_apply_xtc(logprobs, n_vocab, sampler->p.xtc_threshold,
                     sampler->xtc_special, sampler->n_xtc_special, scratch);
    if (p->top_k > 0) sp_apply_top_k(logprobs, n_vocab, p->top_k, scratch);
    return SPINDLE_OK;
}

spindle_status spindle_sampler_sample(spindle_sampler *sampler, float *logits,
                                      int n_vocab, int32_t *token,
                                      float *logprob, spindle_error *err) {
    return sp_sampler_sample_top(sampler, logits, n_vocab, token, logprob, 0,
                                 NULL, err);
}

spindle_status sp_sampler_sample_top(spindle_sampler *sampler, float *logits,
                                     int n_vocab, int32_t *token,
                                     float *logprob, int n_top,
                                     spindle_token_logprob *top,
                                     spindle_error *err) {
    if (!sampler || !logits || !token)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "sampler_sample: sampler, logits and token are required");
    if (n_vocab <= 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "sampler_sample: vocabulary size %d", n_vocab);
    spindle_status st = sp_sample_log_softmax(logits, n_vocab, NULL, err);
    if (st != SPINDLE_OK) return st;
    if (n_top > 0 && top) sp_sample_top_n(logits, n_vocab, n_top, top);

    int32_t tok;
    if (sampler->p.temperature == 0.0f) {
        tok = sp_sample_argmax(logits, n_vocab);
    } else {
        st = sp_sampler_filter(sampler, logits, n_vocab, err);
        if (st != SPINDLE_OK) return st;
        tok = categorical(sampler, logits, n_vocab);
        if (tok < 0)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "sampler: every token was filtered out");
    }
    *token = tok;
    /* The filters only mask entries to -inf, and never the chosen one, so
     * its entry still holds the unfiltered log-probability. */
    if (logprob) *logprob = logits[tok];
    return SPINDLE_OK;
}
