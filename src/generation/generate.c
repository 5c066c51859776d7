/* The generation loop: chunked prefill, then one token per forward pass
 * until an end-of-sequence id or the token budget. */
#include "spindle.h"
#include "base/error.h"
#include "generation/sampler.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

const char *spindle_stop_reason_name(spindle_stop_reason reason) {
    static const char *const names[] = {"length", "eos", "callback",
                                        "context", "error", "cancelled"};
    return (unsigned)reason < sizeof names / sizeof *names ? names[reason]
                                                           : NULL;
}

spindle_gen_params spindle_gen_defaults(void) {
    spindle_gen_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 256;
    p.prefill_chunk = 512;
    p.sampler = spindle_sampler_defaults();
    p.repetition_context_size = 20;
    p.presence_context_size = 20;
    p.frequency_context_size = 20;
    return p;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int64_t peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (int64_t)ru.ru_maxrss * 1024;   /* Linux reports KiB */
}

static bool is_eos(const int32_t *eos, int n_eos, int32_t t) {
    for (int i = 0; i < n_eos; i++)
        if (eos[i] == t) return true;
    return false;
}

/* Feed the prompt in chunks; only the last chunk asks for logits. */
static spindle_status prefill(spindle_model *model, spindle_seq *seq,
                              const int32_t *prompt, int n, int chunk,
                              float *logits, spindle_error *err) {
    for (int done = 0; done < n;) {
        int take = n - done < chunk ? n - done : chunk;
        bool last = done + take == n;
        spindle_batch_entry e = {
            .seq = seq, .tokens = prompt + done, .n_tokens = take,
            .logits_mode = last ? SPINDLE_LOGITS_LAST : SPINDLE_LOGITS_NONE,
            .logits = last ? logits : NULL};
        spindle_status st = spindle_forward(model, &e, 1, err);
        if (st) return st;
        done += take;
    }
    return SPINDLE_OK;
}

/* The processors the parameters ask for, or NULL when none is active. */
static spindle_status make_processors(const spindle_gen_params *g,
                                      sp_logits_processors **out,
                                      spindle_error *err) {
    *out = NULL;
    bool any = g->n_logit_bias > 0 ||
               (g->repetition_penalty != 0 && g->repetition_penalty != 1) ||
               g->presence_penalty != 0 || g->frequency_penalty != 0;
    if (!any) return SPINDLE_OK;
    sp_logits_params p = sp_logits_params_defaults();
    sp_logit_bias *bias = NULL;
    if (g->n_logit_bias > 0) {
        if (!g->logit_bias_ids || !g->logit_bias_values)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT, "logit bias without ids or values");
        bias = malloc((size_t)g->n_logit_bias * sizeof *bias);
        if (!bias) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        for (int i = 0; i < g->n_logit_bias; i++)
            bias[i] = (sp_logit_bias){g->logit_bias_ids[i], g->logit_bias_values[i]};
    }
    p.logit_bias = bias;
    p.n_logit_bias = g->n_logit_bias > 0 ? g->n_logit_bias : 0;
    p.repetition_penalty = g->repetition_penalty;
    p.repetition_context_size = g->repetition_context_size;
    p.presence_penalty = g->presence_penalty;
    p.presence_context_size = g->presence_context_size;
    p.frequency_penalty = g->frequency_penalty;
    p.frequency_context_size = g->frequency_context_size;
    spindle_status st = sp_logits_processors_new(&p, out, err);
    free(bias);
    return st;
}

spindle_status spindle_generate(spindle_model *model, spindle_seq *seq,
                                const int32_t *prompt, int n_prompt,
                                const spindle_gen_params *params,
                                spindle_token_callback callback, void *user,
                                int32_t **tokens, int *n_tokens,
                                float *prompt_logits, spindle_gen_stats *stats,
                                spindle_error *err) {
    sp_error_clear(err);
    if (tokens) *tokens = NULL;
    if (n_tokens) *n_tokens = 0;
    if (!model || !seq || !params || (!prompt && n_prompt > 0))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    if (n_prompt < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the prompt must hold at least one token");
    if (params->max_tokens < 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "max_tokens is negative");

    int vocab = spindle_model_vocab_size(model);
    int chunk = params->prefill_chunk > 0 ? params->prefill_chunk : 512;
    float *logits = malloc((size_t)vocab * sizeof(float));
    int32_t *out = malloc(((size_t)params->max_tokens + 1) * sizeof(int32_t));
    spindle_sampler *sampler = NULL;
    spindle_status st = (!logits || !out)
        ? sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory")
        : spindle_sampler_new(&params->sampler, &sampler, err);
    sp_logits_processors *procs = NULL;
    int32_t *history = NULL;   /* prompt ++ generated, for the processors */
    if (!st) st = make_processors(params, &procs, err);
    if (!st && procs) {
        history = malloc(((size_t)n_prompt + params->max_tokens + 1) * sizeof *history);
        if (!history) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        else memcpy(history, prompt, (size_t)n_prompt * sizeof *history);
    }
    const int32_t *eos = NULL;
    int n_eos = params->ignore_eos ? 0 : spindle_model_eos_ids(model, &eos);
    int limit = spindle_model_context_length(model);
    spindle_stop_reason reason = SPINDLE_STOP_LENGTH;

    double t0 = now_seconds();
    if (!st) st = prefill(model, seq, prompt, n_prompt, chunk, logits, err);
    double t1 = now_seconds();
    if (!st && prompt_logits)
        memcpy(prompt_logits, logits, (size_t)vocab * sizeof(float));

    int n = 0;
    while (!st && n < params->max_tokens) {
        int32_t tok;
        if (procs) {
            st = sp_logits_process(procs, history, n_prompt + n, logits, vocab, err);
            if (st) break;
        }
        st = spindle_sampler_sample(sampler, logits, vocab, &tok, NULL, err);
        if (st) break;
        if (history) history[n_prompt + n] = tok;
        out[n++] = tok;
        if (callback && !callback(tok, user)) { reason = SPINDLE_STOP_CALLBACK; break; }
        if (is_eos(eos, n_eos, tok) ||
            (!params->ignore_eos &&
             is_eos(params->stop_ids, params->n_stop_ids, tok))) {
            reason = SPINDLE_STOP_EOS;
            break;
        }
        if (n == params->max_tokens) break;
        if (limit > 0 && spindle_seq_length(seq) >= limit) {
            reason = SPINDLE_STOP_CONTEXT;
            break;
        }
        spindle_batch_entry e = {.seq = seq, .tokens = &tok, .n_tokens = 1,
                                 .logits_mode = SPINDLE_LOGITS_LAST,
                                 .logits = logits};
        st = spindle_forward(model, &e, 1, err);
    }
    double t2 = now_seconds();

    spindle_sampler_free(sampler);
    sp_logits_processors_free(procs);
    free(history);
    free(logits);
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->prompt_tokens = n_prompt;
        stats->generated_tokens = n;
        stats->prefill_seconds = t1 - t0;
        stats->decode_seconds = t2 - t1;
        stats->prefill_tps = t1 > t0 ? n_prompt / (t1 - t0) : 0;
        /* The first token comes from the prefill's logits; decode speed
         * counts the forward passes after it. */
        stats->decode_tps = (n > 1 && t2 > t1) ? (n - 1) / (t2 - t1) : 0;
        stats->peak_rss_bytes = peak_rss_bytes();
        stats->stop_reason = st ? SPINDLE_STOP_ERROR : reason;
    }
    if (st) { free(out); return st; }
    if (tokens) *tokens = out; else free(out);
    if (n_tokens) *n_tokens = n;
    return SPINDLE_OK;
}
