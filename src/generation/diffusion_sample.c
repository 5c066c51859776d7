/* Masked-diffusion token choice, llama.cpp's way (diffusion_sample.h):
 * the chain top-k -> top-p -> temperature -> dist of its diffusion
 * example, each step computed as src/llama-sampler.cpp computes it (float
 * softmax sums where it sums in float, double where it sums in double),
 * and the confidences of examples/diffusion/diffusion.cpp. */
#include "generation/diffusion_sample.h"
#include "base/error.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------- mt19937 */

void sp_mt19937_seed(sp_mt19937 *r, uint32_t seed) {
    r->state[0] = seed;
    for (int i = 1; i < 624; i++)
        r->state[i] = 1812433253u * (r->state[i - 1] ^ (r->state[i - 1] >> 30)) +
                      (uint32_t)i;
    r->index = 624;
}

static void mt_twist(sp_mt19937 *r) {
    for (int i = 0; i < 624; i++) {
        uint32_t y = (r->state[i] & 0x80000000u) |
                     (r->state[(i + 1) % 624] & 0x7fffffffu);
        r->state[i] = r->state[(i + 397) % 624] ^ (y >> 1) ^
                      ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    r->index = 0;
}

uint32_t sp_mt19937_next(sp_mt19937 *r) {
    if (r->index >= 624) mt_twist(r);
    uint32_t y = r->state[r->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* generate_canonical: sum of words times powers of 2^32, over 2^(32k);
 * a result that rounds up to 1 becomes the largest value below it. */
double sp_mt19937_double(sp_mt19937 *r) {
    double sum = (double)sp_mt19937_next(r);
    sum += (double)sp_mt19937_next(r) * 4294967296.0;
    double x = sum / 18446744073709551616.0;
    return x >= 1.0 ? nextafter(1.0, 0.0) : x;
}

float sp_mt19937_float(sp_mt19937 *r) {
    float x = (float)sp_mt19937_next(r) / 4294967296.0f;
    return x >= 1.0f ? nextafterf(1.0f, 0.0f) : x;
}

/* ----------------------------------------------------------- the chain */

/* llama_token_data_array: the candidates in use and whether they are in
 * descending logit order. */
typedef struct cand_array {
    sp_diffusion_candidate *data;
    int size;
    bool sorted;
} cand_array;

static int by_logit_desc(const void *a, const void *b) {
    const sp_diffusion_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void sort_desc(cand_array *c) {
    qsort(c->data, (size_t)c->size, sizeof *c->data, by_logit_desc);
    c->sorted = true;
}

static float max_logit(const cand_array *c) {
    float m = c->data[0].logit;
    for (int i = 1; !c->sorted && i < c->size; i++)
        if (c->data[i].logit > m) m = c->data[i].logit;
    return m;
}

static void top_k(cand_array *c, int k) {
    if (k <= 0) return;
    if (k > c->size) k = c->size;
    if (!c->sorted) sort_desc(c);
    c->size = k;
}

/* llama_sampler_top_p_apply with min_keep 1: a float softmax, then the
 * shortest sorted prefix whose float running sum reaches p. */
static void top_p(cand_array *c, float p) {
    if (p >= 1.0f) return;
    const float m = max_logit(c);
    float sum = 0.0f;
    for (int i = 0; i < c->size; i++) {
        c->data[i].p = expf(c->data[i].logit - m);
        sum += c->data[i].p;
    }
    for (int i = 0; i < c->size; i++) c->data[i].p /= sum;
    if (!c->sorted) sort_desc(c);
    float cum = 0.0f;
    for (int i = 0; i < c->size; i++) {
        cum += c->data[i].p;
        if (cum >= p) {
            c->size = i + 1;
            break;
        }
    }
}

/* llama_sampler_dist_apply: float exponentials, double sums, one double
 * draw; leaves the probabilities normalized. */
static int dist(cand_array *c, sp_mt19937 *rng) {
    if (c->size == 1) {
        (void)sp_mt19937_double(rng);   /* llama.cpp draws here too */
        c->data[0].p = 1.0f;
        return 0;
    }
    const float m = max_logit(c);
    double sum = 0.0;
    for (int i = 0; i < c->size; i++) {
        c->data[i].p = expf(c->data[i].logit - m);
        sum += c->data[i].p;
    }
    const double target = sum * sp_mt19937_double(rng);
    double run = 0.0;
    int selected = -1;
    for (int i = 0; i < c->size; i++) {
        if (selected < 0) {
            run += c->data[i].p;
            if (run >= target) selected = i;
        }
        c->data[i].p = (float)(c->data[i].p / sum);
    }
    return selected < 0 ? c->size - 1 : selected;
}

static float confidence(const cand_array *c, int selected,
                        spindle_remasking r, sp_mt19937 *step_rng) {
    switch (r) {
    case SPINDLE_REMASK_ENTROPY: {
        float entropy = 0.0f;
        for (int i = 0; i < c->size; i++)
            entropy += c->data[i].p * logf(c->data[i].p + 1e-10f);
        return -entropy;
    }
    case SPINDLE_REMASK_MARGIN:
        /* the first two in the array's order, sorted or not */
        return c->size > 1 ? c->data[0].p - c->data[1].p : c->data[0].p;
    case SPINDLE_REMASK_RANDOM:
        return sp_mt19937_float(step_rng);
    case SPINDLE_REMASK_ORIGIN:
    case SPINDLE_REMASK_CONFIDENCE:
    default:
        return c->data[selected].p;
    }
}

int32_t sp_diffusion_sample(sp_diffusion_sampler *s, const float *logits,
                            float *conf) {
    for (int i = 0; i < s->n_vocab; i++)
        s->cand[i] = (sp_diffusion_candidate){i, logits[i], 0.0f};
    cand_array c = {s->cand, s->n_vocab, false};
    top_k(&c, s->params.top_k);
    top_p(&c, s->params.top_p);
    if (s->params.temperature > 0.0f)
        for (int i = 0; i < c.size; i++) c.data[i].logit /= s->params.temperature;
    const int selected = dist(&c, &s->chain_rng);
    if (conf) *conf = confidence(&c, selected, s->params.remasking, &s->step_rng);
    return c.data[selected].id;
}

spindle_status sp_diffusion_sampler_init(sp_diffusion_sampler *s,
                                         const spindle_diffusion_params *p,
                                         int n_vocab, spindle_error *err) {
    s->params = *p;
    if (s->params.top_p <= 0.0f) s->params.top_p = 1.0f;
    s->n_vocab = n_vocab;
    sp_mt19937_seed(&s->chain_rng, p->seed);
    sp_mt19937_seed(&s->step_rng, p->seed);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    return s->cand ? SPINDLE_OK : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
}

void sp_diffusion_sampler_free(sp_diffusion_sampler *s) {
    free(s->cand);
    s->cand = NULL;
}
