/* The token choice of masked-diffusion generation, as llama.cpp's
 * diffusion example makes it (examples/diffusion/diffusion.cpp and its
 * sampler chain, src/llama-sampler.cpp), down to the random stream: the
 * same std::mt19937 words turned into the same doubles and floats as
 * libstdc++'s uniform_real_distribution, so a seeded run commits the
 * tokens llama-diffusion-cli commits. */
#ifndef SP_GENERATION_DIFFUSION_SAMPLE_H
#define SP_GENERATION_DIFFUSION_SAMPLE_H

#include "spindle.h"

#include <stdint.h>

/* std::mt19937. */
typedef struct sp_mt19937 {
    uint32_t state[624];
    int index;
} sp_mt19937;

void sp_mt19937_seed(sp_mt19937 *r, uint32_t seed);
uint32_t sp_mt19937_next(sp_mt19937 *r);
/* std::uniform_real_distribution<double>(0, 1) (two words) and <float>
 * (one word) over r, as libstdc++'s generate_canonical computes them. */
double sp_mt19937_double(sp_mt19937 *r);
float sp_mt19937_float(sp_mt19937 *r);

typedef struct sp_diffusion_candidate {
    int32_t id;
    float logit;
    float p;
} sp_diffusion_candidate;

typedef struct sp_diffusion_sampler {
    spindle_diffusion_params params;
    sp_mt19937 chain_rng;   /* the sampler chain's draw (llama_sampler_dist) */
    sp_mt19937 step_rng;    /* origin's coin flips, random's confidences */
    sp_diffusion_candidate *cand;   /* [n_vocab] */
    int n_vocab;
} sp_diffusion_sampler;

spindle_status sp_diffusion_sampler_init(sp_diffusion_sampler *s,
                                         const spindle_diffusion_params *p,
                                         int n_vocab, spindle_error *err);
void sp_diffusion_sampler_free(sp_diffusion_sampler *s);

/* One masked position: the token the chain draws from `logits` and, in
 * *confidence, the remasking algorithm's score of it (higher commits
 * first). */
int32_t sp_diffusion_sample(sp_diffusion_sampler *s, const float *logits,
                            float *confidence);

#endif
