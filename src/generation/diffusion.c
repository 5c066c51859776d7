/* Masked-diffusion generation (LLaDA), as llama.cpp's diffusion example
 * schedules it with block-based transfer: the canvas after the prompt
 * starts as mask tokens and is denoised block by block, left to right;
 * each of a block's steps is one forward pass over prompt + canvas (the
 * family attends bidirectionally within a pass, sp_arch.diffusion), then
 * the step commits get_num_transfer_tokens' share of the block's masked
 * positions: the ones the remasking algorithm scores highest (or, for
 * origin, each with probability share / masked). The token choice at a
 * position is diffusion_sample.c's.
 *
 * Every step recomputes the prompt's keys and values too: with
 * bidirectional attention they depend on the canvas, so nothing of an
 * earlier step can be kept (llama.cpp runs these models without a KV
 * cache for the same reason). */
#include "spindle.h"
#include "base/error.h"
#include "generation/diffusion_sample.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const remasking_names[] = {"origin", "entropy", "margin",
                                              "random", "confidence"};

const char *spindle_remasking_name(spindle_remasking r) {
    return (unsigned)r < 5 ? remasking_names[r] : NULL;
}

bool spindle_remasking_parse(const char *text, spindle_remasking *out) {
    static const struct { const char *name; spindle_remasking r; } names[] = {
        {"origin", SPINDLE_REMASK_ORIGIN}, {"0", SPINDLE_REMASK_ORIGIN},
        {"entropy", SPINDLE_REMASK_ENTROPY}, {"1", SPINDLE_REMASK_ENTROPY},
        {"margin", SPINDLE_REMASK_MARGIN}, {"topk-margin", SPINDLE_REMASK_MARGIN},
        {"2", SPINDLE_REMASK_MARGIN},
        {"random", SPINDLE_REMASK_RANDOM}, {"3", SPINDLE_REMASK_RANDOM},
        {"confidence", SPINDLE_REMASK_CONFIDENCE},
        {"low-confidence", SPINDLE_REMASK_CONFIDENCE},
        {"maskgit", SPINDLE_REMASK_CONFIDENCE}, {"4", SPINDLE_REMASK_CONFIDENCE}};
    for (size_t i = 0; text && i < sizeof names / sizeof *names; i++)
        if (!strcmp(text, names[i].name)) {
            *out = names[i].r;
            return true;
        }
    return false;
}

spindle_diffusion_params spindle_diffusion_defaults(void) {
    return (spindle_diffusion_params){.canvas = 64, .steps = 64,
                                      .remasking = SPINDLE_REMASK_CONFIDENCE,
                                      .top_p = 1.0f};
}

/* A masked position's confidence and its index among the block's masked
 * positions. */
typedef struct scored {
    float conf;
    int index;
} scored;

/* The run's buffers and schedule. */
typedef struct diffusion_run {
    spindle_model *model;
    spindle_seq *seq;
    spindle_diffusion_info info;
    int n_prompt, length, vocab;     /* length = prompt + canvas */
    int block_length, blocks, steps_per_block;
    int32_t *x;                      /* [length] prompt, then the canvas */
    float *logits;                   /* [length][vocab] */
    int *masked;                     /* the block's masked positions */
    int32_t *sampled;                /* the token drawn at each */
    scored *order;                   /* their confidences, best first */
    int *transfer;                   /* [steps_per_block] tokens to commit */
    sp_diffusion_sampler sampler;
    spindle_diffusion_stats stats;
} diffusion_run;

static spindle_status check_params(const diffusion_run *r,
                                   const spindle_diffusion_params *p,
                                   spindle_error *err) {
    if (!spindle_model_diffusion_info(r->model, NULL))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: the model does not generate by denoising");
    const int ctx = spindle_model_context_length(r->model);
    if (p->canvas < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: the canvas needs at least 1 token, got %d", p->canvas);
    if (p->steps < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: steps must be at least 1, got %d", p->steps);
    if (p->block_length < 0 || p->block_length > p->canvas)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: block length %d is outside 0..%d (the canvas)",
                       p->block_length, p->canvas);
    if (!spindle_remasking_name(p->remasking))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: unknown remasking algorithm %d", (int)p->remasking);
    if (!(p->temperature >= 0.0f) || p->top_k < 0 || !(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: temperature must be >= 0, top_k >= 0, top_p in [0, 1]");
    if (!(p->eps >= 0.0f && p->eps < 1.0f) || (p->eps > 0.0f && p->block_length > 0))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: eps must be in [0, 1) and excludes a block length");
    if (p->steps % r->blocks)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: %d steps are not a multiple of the %d blocks",
                       p->steps, r->blocks);
    if ((int64_t)r->n_prompt + p->canvas > ctx)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "diffusion: prompt (%d) + canvas (%d) tokens exceed the "
                       "context of %d", r->n_prompt, p->canvas, ctx);
    return SPINDLE_OK;
}

/* The block layout check_params needs. */
static void plan_blocks(diffusion_run *r, const spindle_diffusion_params *p) {
    r->block_length = p->block_length > 0 ? p->block_length : p->canvas;
    r->blocks = p->canvas > 0 ? (p->canvas + r->block_length - 1) / r->block_length : 1;
}

spindle_status spindle_diffusion_check(const spindle_model *model, int n_prompt,
                                       const spindle_diffusion_params *params,
                                       spindle_error *err) {
    if (!model || !params)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "diffusion: a model and parameters are required");
    diffusion_run r = {.model = (spindle_model *)model, .n_prompt = n_prompt};
    plan_blocks(&r, params);
    return check_params(&r, params, err);
}

static spindle_status run_init(diffusion_run *r, const int32_t *prompt,
                               const spindle_diffusion_params *p,
                               spindle_error *err) {
    if (!prompt || r->n_prompt < 1 || !r->seq)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: a sequence and a prompt of at least one token are required");
    plan_blocks(r, p);
    spindle_status st = check_params(r, p, err);
    if (st) return st;
    spindle_model_diffusion_info(r->model, &r->info);
    r->steps_per_block = p->steps / r->blocks;
    r->vocab = spindle_model_vocab_size(r->model);
    r->length = r->n_prompt + p->canvas;
    for (int i = 0; i < r->n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= r->vocab)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "diffusion: prompt token %d is outside the vocabulary", prompt[i]);
    const size_t b = (size_t)r->block_length;
    r->x = malloc((size_t)r->length * sizeof *r->x);
    r->logits = malloc((size_t)r->length * (size_t)r->vocab * sizeof *r->logits);
    r->masked = malloc(b * sizeof *r->masked);
    r->sampled = malloc(b * sizeof *r->sampled);
    r->order = malloc(b * sizeof *r->order);
    r->transfer = malloc((size_t)r->steps_per_block * sizeof *r->transfer);
    r->stats.committed = calloc((size_t)p->steps, sizeof *r->stats.committed);
    if (!r->x || !r->logits || !r->masked || !r->sampled ||
        !r->order || !r->transfer || !r->stats.committed)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    memcpy(r->x, prompt, (size_t)r->n_prompt * sizeof *r->x);
    for (int i = r->n_prompt; i < r->length; i++) r->x[i] = r->info.mask_token;
    r->stats.blocks = r->blocks;
    r->stats.steps_per_block = r->steps_per_block;
    return sp_diffusion_sampler_init(&r->sampler, p, r->vocab, err);
}

static void run_free(diffusion_run *r) {
    free(r->x);
    free(r->logits);
    free(r->masked);
    free(r->sampled);
    free(r->order);
    free(r->transfer);
    free(r->stats.committed);
    sp_diffusion_sampler_free(&r->sampler);
}

/* One pass over prompt + canvas from an empty sequence: logits of every
 * position. */
static spindle_status forward(diffusion_run *r, spindle_error *err) {
    spindle_status st = spindle_seq_truncate(r->seq, 0, err);
    if (st) return st;
    spindle_batch_entry e = {.seq = r->seq, .tokens = r->x, .n_tokens = r->length,
                             .logits_mode = SPINDLE_LOGITS_ALL, .logits = r->logits};
    st = spindle_forward(r->model, &e, 1, err);
    if (!st) r->stats.forwards++;
    return st;
}

/* The logits that predict position pos (a shift_logits model's position
 * pos - 1 predicts it; position 0 reuses its own row, as llama.cpp). */
static const float *logits_for(const diffusion_run *r, int pos) {
    if (r->info.shift_logits && pos > 0) pos--;
    return r->logits + (size_t)pos * (size_t)r->vocab;
}

/* calculate_transfer_count's timestep schedule, in its float arithmetic. */
static int timestep_count(const diffusion_run *r, int step, int masked) {
    const int steps = r->steps_per_block;
    const float eps = r->sampler.params.eps;
    const float t = 1.0f - (float)step / (float)steps * (1.0f - eps);
    const float s = 1.0f - (float)(step + 1) / (float)steps * (1.0f - eps);
    const float share = step < steps - 1 ? 1.0f - s / t : 1.0f;
    return (int)((float)masked * share);
}

/* get_num_transfer_tokens: the block's masks spread over its steps, the
 * first (masks % steps) steps taking one more. */
static void plan_transfers(diffusion_run *r, int masks) {
    for (int s = 0; s < r->steps_per_block; s++)
        r->transfer[s] = masks / r->steps_per_block + (s < masks % r->steps_per_block);
}

static int masked_in(diffusion_run *r, int lo, int hi) {
    int n = 0;
    for (int i = lo; i < hi; i++)
        if (r->x[i] == r->info.mask_token) r->masked[n++] = i;
    return n;
}

/* Origin: each masked position independently, with probability
 * count / masked, gets a token. */
static int commit_origin(diffusion_run *r, int n, int count) {
    const float share = (float)count / (float)n;
    int committed = 0;
    for (int i = 0; i < n; i++)
        if (sp_mt19937_float(&r->sampler.step_rng) < share) {
            r->x[r->masked[i]] = sp_diffusion_sample(&r->sampler,
                                                     logits_for(r, r->masked[i]), NULL);
            committed++;
        }
    return committed;
}

/* Confidence descending, then index ascending: a total order, so the
 * sort's instability cannot matter (llama.cpp's partial_sort comparator). */
static int by_confidence(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->conf != y->conf) return x->conf > y->conf ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The other algorithms: a token and a confidence at every masked
 * position, then the `count` most confident commit. */
static int commit_confident(diffusion_run *r, int n, int count) {
    for (int i = 0; i < n; i++) {
        r->sampled[i] = sp_diffusion_sample(&r->sampler, logits_for(r, r->masked[i]),
                                            &r->order[i].conf);
        r->order[i].index = i;
    }
    if (count > n) count = n;
    if (count <= 0) return 0;
    qsort(r->order, (size_t)n, sizeof *r->order, by_confidence);
    for (int k = 0; k < count; k++)
        r->x[r->masked[r->order[k].index]] = r->sampled[r->order[k].index];
    return count;
}

static spindle_status denoise_block(diffusion_run *r, int b, float *first_logits,
                                    spindle_error *err) {
    const int lo = r->n_prompt + b * r->block_length;
    const int hi = lo + r->block_length < r->length ? lo + r->block_length : r->length;
    plan_transfers(r, masked_in(r, lo, hi));
    for (int s = 0; s < r->steps_per_block; s++) {
        spindle_status st = forward(r, err);
        if (st) return st;
        if (first_logits && r->stats.forwards == 1)
            for (int i = r->n_prompt; i < r->length; i++)
                memcpy(first_logits + (size_t)(i - r->n_prompt) * (size_t)r->vocab,
                       logits_for(r, i), (size_t)r->vocab * sizeof *first_logits);
        const int n = masked_in(r, lo, hi);
        if (!n) break;
        const int count = r->sampler.params.eps > 0.0f ? timestep_count(r, s, n)
                                                       : r->transfer[s];
        r->stats.committed[r->stats.n_steps++] =
            r->sampler.params.remasking == SPINDLE_REMASK_ORIGIN
                ? commit_origin(r, n, count)
                : commit_confident(r, n, count);
    }
    return SPINDLE_OK;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

spindle_status spindle_diffusion_generate(spindle_model *model, spindle_seq *seq,
                                          const int32_t *prompt, int n_prompt,
                                          const spindle_diffusion_params *params,
                                          int32_t **tokens, float *first_logits,
                                          spindle_diffusion_stats *stats,
                                          spindle_error *err) {
    if (tokens) *tokens = NULL;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!model || !params || !tokens)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "diffusion: a model, parameters and an output are required");
    const double t0 = now_seconds();
    diffusion_run r = {.model = model, .seq = seq, .n_prompt = n_prompt};
    spindle_status st = run_init(&r, prompt, params, err);
    bool go_on = true;
    for (int b = 0; !st && go_on && b < r.blocks; b++) {
        st = denoise_block(&r, b, first_logits, err);
        if (!st && params->on_block) {
            const int end = (b + 1) * r.block_length;
            go_on = params->on_block(r.x + n_prompt, end < params->canvas ? end : params->canvas,
                                     params->on_block_user);
        }
    }
    if (!st) {
        *tokens = malloc((size_t)params->canvas * sizeof **tokens);
        if (!*tokens) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        else memcpy(*tokens, r.x + n_prompt, (size_t)params->canvas * sizeof **tokens);
    }
    if (!st && stats) {
        *stats = r.stats;
        stats->seconds = now_seconds() - t0;
        r.stats.committed = NULL;   /* the caller's now */
    }
    run_free(&r);
    return st;
}
