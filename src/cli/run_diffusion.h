/* `spindle run` on a diffusion model (spindle_model_diffusion_info): its
 * options (--diffusion-steps, --block-length, --remasking), the
 * denoising run and its output (the canvas's text, or run --json's
 * tokens and "diffusion" statistics). */
#ifndef SP_CLI_RUN_DIFFUSION_H
#define SP_CLI_RUN_DIFFUSION_H

#include "spindle.h"

#define SP_ARG_DIFFUSION_HELP \
    "  --diffusion-steps N     diffusion models: denoising steps over the canvas\n" \
    "                          of -n tokens (default: one per token)\n" \
    "  --block-length N        diffusion: denoise the canvas in blocks of N\n" \
    "                          (default: one block)\n" \
    "  --diffusion-eps F       diffusion: Dream's timestep schedule over the\n" \
    "                          whole canvas instead of blocks (e.g. 0.001)\n" \
    "  --remasking ALG         diffusion: confidence (low-confidence, MaskGIT+;\n" \
    "                          default), margin (top-k margin), entropy, origin,\n" \
    "                          random; top-k 1 is greedy, --temp 0 is not\n"

typedef struct sp_diffusion_args {
    int steps;              /* 0: the canvas length */
    int block_length;
    double eps;
    const char *remasking;  /* NULL: confidence */
    bool given;             /* some option above was given */
} sp_diffusion_args;

/* argv[*i] as one of the options above: 1 consumed (with its value, *i
 * advanced), 0 not one of them, -1 a bad value (one line said why). */
int sp_arg_diffusion(int argc, char **argv, int *i, sp_diffusion_args *o);

/* What one diffusion run takes from `spindle run`'s options. */
typedef struct sp_diffusion_run {
    const int32_t *prompt;
    int n_prompt;
    const spindle_gen_params *gen;   /* max_tokens: the canvas; sampler */
    const sp_diffusion_args *args;
    const spindle_tokenizer *tok;    /* NULL: token ids are printed */
    bool json;
    const char *dump_logits;         /* the first step's canvas logits */
} sp_diffusion_run;

/* Denoise and print; a failure returns its status with err filled. */
spindle_status sp_run_diffusion(spindle_model *model, const sp_diffusion_run *r,
                                spindle_error *err);

#endif
