/* Token sampling and logits processing with mlx-lm's semantics
 * (mlx_lm/sample_utils.py, mlx_lm/generate.py:generate_step).
 *
 * Per step, as generate_step does it:
 *   logits  = logits processors (bias, repetition, presence, frequency)
 *   logprobs = logits - logsumexp(logits)          <- the reported logprob
 *   temp == 0: argmax(logprobs)
 *   else: top_p -> min_p -> XTC -> top_k (each masks entries to -inf),
 *         then a draw from softmax(logprobs / temp).
 * Only the random stream differs from mlx (xoshiro256** here): the kept
 * sets and the reported logprobs follow mlx-lm. */
#ifndef SP_GENERATION_SAMPLER_H
#define SP_GENERATION_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "spindle.h"

/* The chain of filters of a sampler with temperature > 0 (top_p, min_p,
 * XTC with its coin flip, top_k) on log-probabilities, in place; a no-op for
 * greedy samplers. spindle_sampler_sample runs it between the log-softmax
 * and the draw. */
spindle_status sp_sampler_filter(spindle_sampler *sampler, float *logprobs,
                                 int n_vocab, spindle_error *err);

/* spindle_sampler_sample, also writing the n_top most likely entries of the
 * same log-softmax (before any filter) to `top`, most likely first (ties:
 * lower id first). */
spindle_status sp_sampler_sample_top(spindle_sampler *sampler, float *logits,
                                     int n_vocab, int32_t *token,
                                     float *logprob, int n_top,
                                     spindle_token_logprob *top,
                                     spindle_error *err);

/* The random stream's state (xoshiro256**), for checkpoints: a sampler
 * given the state of another continues its stream exactly. */
void sp_sampler_get_rng(const spindle_sampler *sampler, uint64_t state[4]);
void sp_sampler_set_rng(spindle_sampler *sampler, const uint64_t state[4]);

/* A new sampler with `sampler`'s parameters (XTC special ids included) and
 * its random stream's current state: sampling with the copy draws the
 * uniforms the original would draw next, without advancing the original
 * (the draft model and the MTP head sample their drafts so,
 * draft_sampler.c). */
spindle_status sp_sampler_clone(const spindle_sampler *sampler,
                                spindle_sampler **out, spindle_error *err);
/* True when the sampler is greedy (temperature 0: argmax, no draw). */
bool sp_sampler_greedy(const spindle_sampler *sampler);

/* --------------------------------------------------- individual transforms
 * Each takes log-probabilities (entries may already be -inf), masks entries
 * to -inf in place, and never changes a kept value. `scratch` holds at least
 * `n` floats. They are exposed for the comparison harness and assume the
 * arguments were validated (no NaN, n > 0). */

/* logits -> logits - logsumexp(logits), in place, with mlx's CPU float32
 * arithmetic (the values generate_step reports). `lse` (may be NULL)
 * receives the logsumexp. Fails on NaN, on +inf, and when every entry is
 * -inf. */
spindle_status sp_sample_log_softmax(float *logits, int n, float *lse,
                                     spindle_error *err);
/* The k largest entries of x (k <= n), largest first, ties broken toward
 * lower ids; returns how many were written (min(k, n)). */
int sp_sample_top_n(const float *x, int n, int k, spindle_token_logprob *top);
/* Index of the first maximum (mx.argmax). */
int32_t sp_sample_argmax(const float *x, int n);
/* apply_top_p: keeps the smallest set of most likely tokens whose mass
 * reaches top_p, plus every token tied with the least likely kept one. */
void sp_apply_top_p(float *logprobs, int n, float top_p, float *scratch);
/* apply_min_p: removes tokens with p < min_p * p_max, but never the
 * min_tokens_to_keep most likely ones (ties broken toward higher ids, as
 * mlx's argpartition leaves them). */
void sp_apply_min_p(float *logprobs, int n, float min_p,
                    int min_tokens_to_keep, float *scratch);
/* apply_top_k: keeps exactly k tokens (ties broken toward lower ids);
 * k >= n keeps everything. */
void sp_apply_top_k(float *logprobs, int n, int k, float *scratch);
/* apply_xtc's mask (the caller decides, by probability, whether to call):
 * removes every token with probability above the threshold except the
 * least likely of them, never touching the special ids (in range). */
void sp_apply_xtc(float *logprobs, int n, float threshold,
                  const int32_t *special, int n_special, float *scratch);

/* ------------------------------------------------------ logits processors */

typedef struct sp_logit_bias {
    int32_t token;
    float bias;
} sp_logit_bias;

/* make_logits_processors' arguments. A penalty of 0 is off (mlx: None or
 * 0). A context size is how many of the most recent history tokens count;
 * 0 means the whole history, as Python's tokens[-0:] does. */
typedef struct sp_logits_params {
    const sp_logit_bias *logit_bias;  /* copied by sp_logits_processors_new */
    int n_logit_bias;
    float repetition_penalty;         /* >= 0; x<0: x*p, else x/p */
    int repetition_context_size;      /* default 20 */
    float presence_penalty;           /* subtracted once per distinct token */
    int presence_context_size;        /* default 20 */
    float frequency_penalty;          /* subtracted once per occurrence */
    int frequency_context_size;       /* default 20 */
} sp_logits_params;

sp_logits_params sp_logits_params_defaults(void);

typedef struct sp_logits_processors sp_logits_processors;

spindle_status sp_logits_processors_new(const sp_logits_params *params,
                                        sp_logits_processors **out,
                                        spindle_error *err);
void sp_logits_processors_free(sp_logits_processors *procs);
/* False when no processor is configured (the call would be a no-op). */
bool sp_logits_processors_active(const sp_logits_processors *procs);

/* Apply the processors in make_logits_processors' order to one row of
 * logits. `history` is every token of the sequence so far (prompt and
 * generated), oldest first. Fails on ids outside [0, n_vocab). The
 * processors keep a vocab-sized scratch, so one object serves one thread. */
spindle_status sp_logits_process(sp_logits_processors *procs,
                                 const int32_t *history, int n_history,
                                 float *logits, int n_vocab,
                                 spindle_error *err);

#endif
