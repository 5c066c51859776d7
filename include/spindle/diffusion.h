/* spindle/diffusion.h: masked-diffusion generation (LLaDA): a canvas of
 * mask tokens after the prompt, refined over denoising steps. Part of the
 * public API: include "spindle.h", whose opening comment states the
 * conventions every call here follows. */
#ifndef SPINDLE_DIFFUSION_H
#define SPINDLE_DIFFUSION_H

#include "spindle/sequence.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A diffusion model's own settings. */
typedef struct spindle_diffusion_info {
    int32_t mask_token;   /* the canvas's placeholder id */
    bool shift_logits;    /* position i's logits predict token i + 1 (Dream) */
} spindle_diffusion_info;

/* true, filling *out (may be NULL), when `model` generates by denoising
 * (its family declares it: GGUF "llada"); such a model's forward passes
 * attend bidirectionally within each pass, and spindle_generate and the
 * step engine refuse it. Thread-safe. */
bool spindle_model_diffusion_info(const spindle_model *model,
                                  spindle_diffusion_info *out);

/* Which masked positions a step commits, as llama.cpp's
 * llama-diffusion-cli numbers them (--diffusion-algorithm). */
typedef enum spindle_remasking {
    SPINDLE_REMASK_ORIGIN = 0,     /* each with probability count/masked */
    SPINDLE_REMASK_ENTROPY = 1,    /* lowest entropy of its distribution */
    SPINDLE_REMASK_MARGIN = 2,     /* largest top-1 - top-2 margin */
    SPINDLE_REMASK_RANDOM = 3,     /* a random confidence */
    SPINDLE_REMASK_CONFIDENCE = 4  /* low-confidence remasking (MaskGIT+):
                                      highest probability of its token */
} spindle_remasking;

/* The name of r ("origin", "entropy", "margin", "random", "confidence"),
 * or NULL. Thread-safe. */
const char *spindle_remasking_name(spindle_remasking r);
/* Parse a name above, an alias ("low-confidence", "maskgit", "topk-margin")
 * or llama.cpp's number 0-4; false for anything else. Thread-safe. */
bool spindle_remasking_parse(const char *text, spindle_remasking *out);

typedef struct spindle_diffusion_params {
    int canvas;          /* tokens generated after the prompt, >= 1 */
    /* Denoising steps over the whole canvas, a multiple of the number of
     * blocks (each block gets steps / blocks). */
    int steps;
    /* The canvas is denoised in blocks of this many positions, left to
     * right (the last may be shorter); 0: one block. */
    int block_length;
    /* > 0 (block_length 0): Dream's timestep schedule instead: step s of
     * S commits (int)(masked * (1 - t(s + 1) / t(s))) positions, with
     * t(s) = 1 - s / S * (1 - eps), and the last step all that are left
     * (llama.cpp's --diffusion-eps). 0: the block schedule. */
    float eps;
    spindle_remasking remasking;
    /* Token choice at a masked position, as llama.cpp's diffusion
     * sampler chain: top-k (0: off), top-p (0 or 1: off), temperature (0:
     * the logits unscaled, NOT greedy), then a draw from the softmax of
     * what is left; top_k = 1 is greedy (every confidence is then 1, so
     * the canvas fills left to right). */
    float temperature;
    int top_k;
    float top_p;
    uint32_t seed;       /* the draws' mt19937 seed, as llama.cpp's --seed */
    /* NULL, or called on the calling thread after each block is denoised
     * (the eps schedule's single block: at the end) with the canvas so far
     * (params->canvas ids) and how many of its positions, from its start,
     * are final. Returning false stops the generation there: it returns
     * SPINDLE_OK with the later positions still the mask token. A server
     * streams each block's text this way. */
    bool (*on_block)(const int32_t *canvas, int n_final, void *user);
    void *on_block_user;
} spindle_diffusion_params;

/* canvas 64, steps 64, one block, confidence, temperature 0, top-k 0,
 * top-p 1, seed 0 (llama-diffusion-cli's sampling at --temp 0 --top-k 0
 * --top-p 1). Thread-safe. */
spindle_diffusion_params spindle_diffusion_defaults(void);

typedef struct spindle_diffusion_stats {
    int blocks;
    int steps_per_block;
    int forwards;          /* forward passes run */
    /* Tokens committed at each step, n_steps entries (spindle_free). */
    int *committed;
    int n_steps;
    double seconds;        /* the whole generation */
} spindle_diffusion_stats;

/* Whether spindle_diffusion_generate would accept `params` for a prompt
 * of n_prompt tokens: its errors below (but the prompt's ids), without
 * generating. Thread-safe. */
spindle_status spindle_diffusion_check(const spindle_model *model, int n_prompt,
                                       const spindle_diffusion_params *params,
                                       spindle_error *err);

/* Denoise params->canvas tokens after `prompt` in `seq` (reset to empty
 * first; on return it holds prompt + canvas as the last step saw them).
 * Each step is one forward pass over prompt + canvas, every position
 * seeing every other. *tokens receives the canvas (params->canvas ids,
 * spindle_free). first_logits: NULL, or canvas * vocab floats receiving
 * the canvas positions' logits at the first step (after the shift of a
 * shift_logits model). stats: NULL, or filled (free stats->committed).
 * Errors: SPINDLE_ERR_ARGUMENT for a model that is not a diffusion model
 * or malformed parameters (no steps, steps not a multiple of the blocks, a
 * block longer than the canvas, eps outside [0, 1) or with blocks, an
 * unknown remasking, sampling ranges),
 * SPINDLE_ERR_LIMIT when prompt + canvas exceed the context, each with a
 * one-line message. Thread-safety: as spindle_forward (one generation at a
 * time per model). */
spindle_status spindle_diffusion_generate(spindle_model *model,
                                          spindle_seq *seq,
                                          const int32_t *prompt, int n_prompt,
                                          const spindle_diffusion_params *params,
                                          int32_t **tokens, float *first_logits,
                                          spindle_diffusion_stats *stats,
                                          spindle_error *err);

#ifdef __cplusplus
}
#endif

#endif /* SPINDLE_DIFFUSION_H */
