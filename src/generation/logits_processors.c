/* Logits processors of mlx_lm.sample_utils.make_logits_processors, applied
 * in its order: logit bias, repetition penalty, presence penalty, frequency
 * penalty. mlx gathers the penalized logits, transforms them and scatters
 * them back, so a token repeated in the window is penalized once by the
 * repetition and presence penalties; the frequency penalty uses a
 * scatter-add and counts every occurrence. A vocab-sized stamp array
 * (owned by the object) finds distinct tokens in O(window). */
#include "generation/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct sp_logits_processors {
    sp_logit_bias *bias;
    int n_bias;
    float repetition, presence, frequency;
    int repetition_ctx, presence_ctx, frequency_ctx;
    uint32_t *stamp;  /* stamp[token] == epoch: seen in the current pass */
    int stamp_cap;
    uint32_t epoch;
};

sp_logits_params sp_logits_params_defaults(void) {
    sp_logits_params p = {
        .logit_bias = NULL,
        .n_logit_bias = 0,
        .repetition_penalty = 0.0f,
        .repetition_context_size = 20,
        .presence_penalty = 0.0f,
        .presence_context_size = 20,
        .frequency_penalty = 0.0f,
        .frequency_context_size = 20,
    };
    return p;
}

spindle_status sp_logits_processors_new(const sp_logits_params *params,
                                        sp_logits_processors **out,
                                        spindle_error *err) {
    if (!params || !out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "logits processors: params and out must not be NULL");
    *out = NULL;
    if (params->n_logit_bias < 0 ||
        (params->n_logit_bias > 0 && !params->logit_bias))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "invalid logit bias list (%d entries)",
                       params->n_logit_bias);
    for (int i = 0; i < params->n_logit_bias; i++)
        if (params->logit_bias[i].token < 0 || isnan(params->logit_bias[i].bias))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "logit bias entry %d (token %d) is invalid", i,
                           (int)params->logit_bias[i].token);
    if (!(params->repetition_penalty >= 0.0f) ||
        isinf(params->repetition_penalty))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "repetition penalty must be finite and >= 0, got %g",
                       (double)params->repetition_penalty);
    if (!isfinite(params->presence_penalty) ||
        !isfinite(params->frequency_penalty))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "presence/frequency penalties must be finite");
    if (params->repetition_context_size < 0 ||
        params->presence_context_size < 0 ||
        params->frequency_context_size < 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "penalty context sizes must be >= 0");

    sp_logits_processors *p = calloc(1, sizeof *p);
    if (!p)
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "logits processors: out of memory");
    if (params->n_logit_bias > 0) {
        size_t bytes = (size_t)params->n_logit_bias * sizeof *p->bias;
        p->bias = malloc(bytes);
        if (!p->bias) {
            free(p);
            return sp_fail(err, SPINDLE_ERR_MEMORY,
                           "logits processors: out of memory for %d biases",
                           params->n_logit_bias);
        }
        memcpy(p->bias, params->logit_bias, bytes);
        p->n_bias = params->n_logit_bias;
    }
    p->repetition = params->repetition_penalty;
    p->presence = params->presence_penalty;
    p->frequency = params->frequency_penalty;
    p->repetition_ctx = params->repetition_context_size;
    p->presence_ctx = params->presence_context_size;
    p->frequency_ctx = params->frequency_context_size;
    *out = p;
    return SPINDLE_OK;
}

void sp_logits_processors_free(sp_logits_processors *procs) {
    if (!procs) return;
    free(procs->bias);
    free(procs->stamp);
    free(procs);
}

bool sp_logits_processors_active(const sp_logits_processors *procs) {
    return procs && (procs->n_bias > 0 || procs->repetition != 0.0f ||
                     procs->presence != 0.0f || procs->frequency != 0.0f);
}

/* Start of the window tokens[-ctx:] in Python's slicing (ctx 0: all). */
static int window_start(int n_history, int ctx) {
    return (ctx == 0 || ctx >= n_history) ? 0 : n_history - ctx;
}

/* A fresh epoch, so that no token counts as seen. */
static void next_epoch(sp_logits_processors *p) {
    if (++p->epoch == 0) {
        memset(p->stamp, 0, (size_t)p->stamp_cap * sizeof *p->stamp);
        p->epoch = 1;
    }
}

/* True the first time `token` is seen in the current epoch. */
static bool first_sighting(sp_logits_processors *p, int32_t token) {
    if (p->stamp[token] == p->epoch) return false;
    p->stamp[token] = p->epoch;
    return true;
}

spindle_status sp_logits_process(sp_logits_processors *procs,
                                 const int32_t *history, int n_history,
                                 float *logits, int n_vocab,
                                 spindle_error *err) {
    if (!procs || !logits || n_vocab <= 0 || n_history < 0 ||
        (n_history > 0 && !history))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "logits_process: invalid arguments (vocab %d, "
                       "history %d)", n_vocab, n_history);
    for (int i = 0; i < procs->n_bias; i++)
        if (procs->bias[i].token >= n_vocab)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "logit bias token %d outside vocabulary of %d",
                           (int)procs->bias[i].token, n_vocab);
    bool penalties = n_history > 0 &&
                     (procs->repetition != 0.0f || procs->presence != 0.0f ||
                      procs->frequency != 0.0f);
    if (penalties) {
        /* Check every id any window may touch before changing anything. */
        int first = n_history;
        if (procs->repetition != 0.0f)
            first = window_start(n_history, procs->repetition_ctx);
        if (procs->presence != 0.0f) {
            int w = window_start(n_history, procs->presence_ctx);
            if (w < first) first = w;
        }
        if (procs->frequency != 0.0f) {
            int w = window_start(n_history, procs->frequency_ctx);
            if (w < first) first = w;
        }
        for (int i = first; i < n_history; i++)
            if (history[i] < 0 || history[i] >= n_vocab)
                return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                               "history token %d at position %d outside "
                               "vocabulary of %d", (int)history[i], i, n_vocab);
        if (n_vocab > procs->stamp_cap) {
            uint32_t *grown = calloc((size_t)n_vocab, sizeof *grown);
            if (!grown)
                return sp_fail(err, SPINDLE_ERR_MEMORY,
                               "logits processors: no memory for %d stamps",
                               n_vocab);
            free(procs->stamp);
            procs->stamp = grown;
            procs->stamp_cap = n_vocab;
            procs->epoch = 0;
        }
    }

    for (int i = 0; i < procs->n_bias; i++)
        logits[procs->bias[i].token] += procs->bias[i].bias;
    if (!penalties) return SPINDLE_OK;

    if (procs->repetition != 0.0f) {
        float pen = procs->repetition;
        next_epoch(procs);
        for (int i = window_start(n_history, procs->repetition_ctx);
             i < n_history; i++) {
            int32_t t = history[i];
            if (!first_sighting(procs, t)) continue;
            float x = logits[t];
            logits[t] = x < 0.0f ? x * pen : x / pen;
        }
    }
    if (procs->presence != 0.0f) {
        next_epoch(procs);
        for (int i = window_start(n_history, procs->presence_ctx);
             i < n_history; i++)
            if (first_sighting(procs, history[i]))
                logits[history[i]] -= procs->presence;
    }
    if (procs->frequency != 0.0f) {
        for (int i = window_start(n_history, procs->frequency_ctx);
             i < n_history; i++)
            logits[history[i]] -= procs->frequency;
    }
    return SPINDLE_OK;
}
