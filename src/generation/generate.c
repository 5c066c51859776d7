/* spindle_generate: one request through a private step engine, stepped on
 * the caller's thread (chunked prefill, then one token per forward pass
 * until an end-of-sequence id or the token budget), so that a single
 * generation and a batched one share one loop (engine_sched.c, request.c). */
#include "spindle.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

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

static int64_t peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (int64_t)ru.ru_maxrss * 1024;   /* Linux reports KiB */
}

/* The one request's link to spindle_generate's arguments and results. */
typedef struct gen_run {
    spindle_token_callback callback;
    void *user;
    float *prompt_logits;
    int vocab;
    bool logits_only;        /* max_tokens 0: one token asked, then dropped */
    spindle_stop_reason reason;
    spindle_status status;
    spindle_error error;
    int32_t *tokens;
    int n_tokens;
    spindle_request_stats stats;
} gen_run;

static bool gen_on_token(spindle_request_id id, const spindle_token_info *info,
                         void *user) {
    (void)id;
    gen_run *g = user;
    if (info->index == 0 && g->prompt_logits)
        memcpy(g->prompt_logits, info->logits, (size_t)g->vocab * sizeof(float));
    if (g->logits_only) return false;
    return g->callback ? g->callback(info->token, g->user) : true;
}

static void gen_on_finish(spindle_request_id id,
                          const spindle_request_result *res, void *user) {
    (void)id;
    gen_run *g = user;
    g->reason = res->stop_reason;
    g->status = res->status;
    g->stats = res->stats;
    if (res->status) {
        sp_fail(&g->error, res->status, "%s", res->error);
        return;
    }
    int n = g->logits_only ? 0 : res->n_tokens;
    g->tokens = malloc(((size_t)n + 1) * sizeof *g->tokens);
    if (!g->tokens) {
        g->status = sp_fail(&g->error, SPINDLE_ERR_MEMORY, "out of memory");
        return;
    }
    memcpy(g->tokens, res->tokens, (size_t)n * sizeof *g->tokens);
    g->n_tokens = n;
    if (g->logits_only) {
        g->reason = SPINDLE_STOP_LENGTH;
        g->stats.generated_tokens = 0;
        g->stats.prefill_seconds += g->stats.decode_seconds;
    }
}

/* The prompt as ids or as spans (spindle_request's two forms). */
typedef struct gen_prompt {
    const int32_t *ids;
    int n_ids;
    const spindle_span *spans;
    int n_spans;
} gen_prompt;

/* Submit the request and step the engine until it has ended. */
static spindle_status run_one(spindle_model *model, spindle_seq *seq,
                              const gen_prompt *prompt,
                              const spindle_gen_params *params, gen_run *g,
                              spindle_error *err) {
    spindle_gen_params p = *params;
    g->logits_only = p.max_tokens == 0 && g->prompt_logits;
    if (g->logits_only) p.max_tokens = 1;
    spindle_engine_options eo = spindle_engine_defaults();
    eo.max_seqs = 1;
    eo.max_batch_tokens = p.prefill_chunk > 0 ? p.prefill_chunk : 512;
    spindle_engine *engine = NULL;
    spindle_status st = spindle_engine_new(model, &eo, &engine, err);
    spindle_request req = {
        .prompt = prompt->ids, .n_prompt = prompt->n_ids,
        .spans = prompt->spans, .n_spans = prompt->n_spans, .params = &p,
        .want_logits = g->prompt_logits != NULL, .seq = seq,
        .on_token = gen_on_token, .on_finish = gen_on_finish, .user = g};
    if (!st) st = spindle_engine_submit(engine, &req, NULL, err);
    for (int active = !st; active && !st;)
        st = spindle_engine_step(engine, &active, err);
    spindle_engine_free(engine);
    if (!st && g->status) {
        *err = g->error;
        st = g->status;
    }
    return st;
}

static spindle_status generate(spindle_model *model, spindle_seq *seq,
                               const gen_prompt *prompt,
                               const spindle_gen_params *params,
                               spindle_token_callback callback, void *user,
                               int32_t **tokens, int *n_tokens,
                               float *prompt_logits, spindle_gen_stats *stats,
                               spindle_error *err) {
    sp_error_clear(err);
    if (tokens) *tokens = NULL;
    if (n_tokens) *n_tokens = 0;
    if (!model || !seq || !params || (!prompt->ids && prompt->n_ids > 0) ||
        (!prompt->spans && prompt->n_spans > 0))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    int n_prompt = prompt->n_ids;
    for (int i = 0; i < prompt->n_spans; i++) n_prompt += prompt->spans[i].n;
    gen_run g = {.callback = callback, .user = user,
                 .prompt_logits = prompt_logits,
                 .vocab = spindle_model_vocab_size(model),
                 .reason = SPINDLE_STOP_ERROR};
    spindle_error local;
    spindle_status st = run_one(model, seq, prompt, params, &g,
                                err ? err : &local);
    if (stats) {
        const spindle_request_stats *r = &g.stats;
        memset(stats, 0, sizeof *stats);
        stats->prompt_tokens = params->resume ? r->prompt_tokens : n_prompt;
        stats->cached_tokens = r->cached_tokens;
        stats->generated_tokens = r->generated_tokens;
        stats->prefill_seconds = r->prefill_seconds;
        stats->ttft_seconds = r->ttft_seconds;
        stats->decode_seconds = r->decode_seconds;
        stats->prefill_tps = r->prefill_tps;
        stats->decode_tps = r->decode_tps;
        stats->peak_rss_bytes = peak_rss_bytes();
        stats->stop_reason = st ? SPINDLE_STOP_ERROR : g.reason;
        stats->spec = r->spec;
    }
    if (st) { free(g.tokens); return st; }
    if (tokens) *tokens = g.tokens; else free(g.tokens);
    if (n_tokens) *n_tokens = g.n_tokens;
    return SPINDLE_OK;
}

spindle_status spindle_generate(spindle_model *model, spindle_seq *seq,
                                const int32_t *prompt, int n_prompt,
                                const spindle_gen_params *params,
                                spindle_token_callback callback, void *user,
                                int32_t **tokens, int *n_tokens,
                                float *prompt_logits, spindle_gen_stats *stats,
                                spindle_error *err) {
    const gen_prompt p = {.ids = prompt, .n_ids = n_prompt};
    return generate(model, seq, &p, params, callback, user, tokens, n_tokens,
                    prompt_logits, stats, err);
}

spindle_status spindle_generate_spans(spindle_model *model, spindle_seq *seq,
                                      const spindle_span *spans, int n_spans,
                                      const spindle_gen_params *params,
                                      spindle_token_callback callback,
                                      void *user, int32_t **tokens,
                                      int *n_tokens, float *prompt_logits,
                                      spindle_gen_stats *stats,
                                      spindle_error *err) {
    const gen_prompt p = {.spans = spans, .n_spans = n_spans};
    return generate(model, seq, &p, params, callback, user, tokens, n_tokens,
                    prompt_logits, stats, err);
}
