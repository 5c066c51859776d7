/* spindle/sampling.h: samplers: logits to a token. Part of the public API:
 * include "spindle.h", whose opening comment states the conventions every
 * call here follows. */
#ifndef SPINDLE_SAMPLING_H
#define SPINDLE_SAMPLING_H

#include "spindle/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------- sampling */

typedef struct spindle_sampler_params {
    float temperature;     /* 0: greedy (argmax) */
    int top_k;             /* 0: off */
    float top_p;           /* 0 or 1: off */
    float min_p;           /* 0: off */
    int min_tokens_to_keep;/* for min_p; default 1 */
    uint64_t seed;         /* same seed -> same tokens */
    /* XTC ("exclude top choices"): with this probability per step, drop
     * every token above xtc_threshold except the least likely of them. */
    float xtc_probability; /* 0: off */
    float xtc_threshold;   /* default 0.1 */
    const int32_t *xtc_special_tokens; /* never dropped (copied) */
    int n_xtc_special_tokens;
} spindle_sampler_params;

/* The defaults of mlx_lm.generate: greedy. Thread-safe. */
spindle_sampler_params spindle_sampler_defaults(void);

/* A sampler holds its random stream and scratch: one thread at a time per
 * sampler; distinct samplers are independent. spindle_sampler_new copies
 * everything it keeps from `params` (NULL: the defaults) and validates the
 * ranges mlx-lm checks. */
typedef struct spindle_sampler spindle_sampler;

spindle_status spindle_sampler_new(const spindle_sampler_params *params,
                                   spindle_sampler **out, spindle_error *err);
void spindle_sampler_free(spindle_sampler *sampler);
/* Choose a token from raw logits. `logits` is used as scratch (clobbered).
 * If `logprob` is not NULL it receives log-softmax(logits)[token] before the
 * sampler's own transforms, as mlx-lm reports it. */
spindle_status spindle_sampler_sample(spindle_sampler *sampler, float *logits,
                                      int n_vocab, int32_t *token,
                                      float *logprob, spindle_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_SAMPLING_H */
