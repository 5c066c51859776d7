/* One request of the step engine: what submit copies and validates, and
 * the per-token rule that every generation (engine requests and, through
 * them, spindle_generate) shares: logits processors over prompt ++
 * generated, the sampler, then the stop checks in mlx-lm's order. */
#include "generation/engine.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "generation/checkpoint.h"
#include "models/lora.h"
#include "generation/speculative.h"

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

/* The ids a grammar lets through only where it is complete. */
static spindle_status end_ids(sp_request *q, spindle_error *err) {
    q->n_end = q->n_eos + q->n_stop_ids;
    if (q->n_end == 0) return SPINDLE_OK;
    q->end_ids = malloc((size_t)q->n_end * sizeof *q->end_ids);
    if (!q->end_ids) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    memcpy(q->end_ids, q->eos, (size_t)q->n_eos * sizeof *q->eos);
    memcpy(q->end_ids + q->n_eos, q->stop_ids, (size_t)q->n_stop_ids * sizeof *q->stop_ids);
    return SPINDLE_OK;
}

static spindle_status check_request(const spindle_engine *e,
                                    const spindle_request *r,
                                    const spindle_gen_params *g,
                                    spindle_error *err) {
    if (!r->prompt || r->n_prompt < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the prompt must hold at least one token");
    /* its passes attend both ways: token-by-token decoding means nothing */
    if (spindle_model_diffusion_info(e->model, NULL))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "a diffusion model generates by denoising "
                       "(spindle_diffusion_generate), not token by token");
    if (g->max_tokens < 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "max_tokens is negative");
    if (r->top_logprobs < 0 || r->top_logprobs > SPINDLE_MAX_TOP_LOGPROBS)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "top_logprobs must be in [0, %d], got %d",
                       SPINDLE_MAX_TOP_LOGPROBS, r->top_logprobs);
    if (g->adapter && g->adapter->model != e->model)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the adapter belongs to another model");
    if (g->n_stop_ids < 0 || (g->n_stop_ids > 0 && !g->stop_ids))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "invalid stop id list");
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->vocab)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "prompt token %d is %d, outside the vocabulary (%d)",
                           i, (int)r->prompt[i], e->vocab);
    int start = spindle_seq_length(r->seq);
    if (e->context > 0 && r->n_prompt > e->context - start)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "a prompt of %d tokens does not fit in the context "
                       "(%d of %d left)", r->n_prompt, e->context - start,
                       e->context);
    return SPINDLE_OK;
}

/* Generated tokens the request can reach: max_tokens, or fewer when the
 * context ends first (the last token is never fed back). */
static int64_t max_generated(const spindle_engine *e, const spindle_request *r,
                             int max_tokens) {
    if (e->context <= 0) return max_tokens;
    int64_t room = (int64_t)e->context - spindle_seq_length(r->seq) - r->n_prompt + 1;
    return room < max_tokens ? room : max_tokens;
}

/* A resumed request's matcher, where the checkpoint's run left its own:
 * through every token generated before it. */
static spindle_status replay_grammar(sp_request *q, spindle_error *err) {
    for (int i = 0; i < q->n_generated; i++) {
        int32_t tok = q->tokens[q->n_prompt + i];
        bool end = false;
        for (int k = 0; k < q->n_end; k++) end |= q->end_ids[k] == tok;
        if (!end && sp_grammar_gate_accept(&q->grammar, tok, err))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "the checkpoint's token %d (generated #%d) does not follow the "
                           "request's grammar", (int)tok, i);
    }
    return SPINDLE_OK;
}

/* A prompt given as spans: the same request with their ids as its prompt
 * (*flat, freed by the caller) and the record of its embeddings spans. */
static spindle_status flatten_spans(const spindle_engine *e,
                                    const spindle_request *r,
                                    spindle_request *flat_r, int32_t **flat,
                                    unsigned char **record, size_t *record_n,
                                    spindle_error *err) {
    if (r->n_spans < 1 || !r->spans)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "invalid span list");
    int n = 0;
    spindle_status st = sp_prompt_spans_flatten(e, r, flat, &n, err);
    if (!st) st = sp_prompt_spans_record(r->spans, r->n_spans, record,
                                         record_n, err);
    *flat_r = *r;
    flat_r->prompt = *flat;
    flat_r->n_prompt = n;
    return st;
}

spindle_status sp_request_new(spindle_engine *e, const spindle_request *r,
                              sp_request **out, spindle_error *err) {
    *out = NULL;
    spindle_gen_params defaults = spindle_gen_defaults(), resumed;
    const spindle_gen_params *g = r->params ? r->params : &defaults;
    spindle_request from_checkpoint, from_spans;
    int32_t *flat = NULL;
    unsigned char *record = NULL;
    size_t record_n = 0;
    spindle_status st = SPINDLE_OK;
    if (r->spans || r->n_spans) {
        st = flatten_spans(e, r, &from_spans, &flat, &record, &record_n, err);
        r = &from_spans;
    }
    if (!st && g->resume) { /* the prompt and parameters are the checkpoint's */
        resumed = sp_checkpoint_resume_params(g->resume, g);
        from_checkpoint = *r;
        from_checkpoint.prompt = g->resume->tokens;
        from_checkpoint.n_prompt = g->resume->n_prompt;
        from_checkpoint.spans = NULL; /* the state is the checkpoint's */
        from_checkpoint.n_spans = 0;
        from_checkpoint.params = g = &resumed;
        r = &from_checkpoint;
    }
    if (!st) st = check_request(e, r, g, err);
    sp_request *q = st ? NULL : calloc(1, sizeof *q);
    if (!q) {
        free(flat);
        free(record);
        return st ? st : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    q->span_record = record;
    q->span_record_n = record_n;
    atomic_init(&q->cancelled, false);
    q->n_prompt = r->n_prompt;
    q->max_tokens = g->max_tokens;
    int64_t cap = r->n_prompt + max_generated(e, r, g->max_tokens);
    q->cap = cap > INT32_MAX ? INT32_MAX : (int)cap;
    q->tokens = cap > INT32_MAX ? NULL : malloc((size_t)cap * sizeof *q->tokens);
    if (!g->ignore_eos) {
        q->n_eos = spindle_model_eos_ids(e->model, &q->eos);
        q->n_stop_ids = g->n_stop_ids;
        if (g->n_stop_ids > 0)
            q->stop_ids = malloc((size_t)g->n_stop_ids * sizeof *q->stop_ids);
    }
    if (!q->tokens || (q->n_stop_ids > 0 && !q->stop_ids)) {
        free(flat);
        sp_request_free(q);
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "out of memory for a request of %lld tokens",
                       (long long)cap);
    }
    memcpy(q->tokens, r->prompt, (size_t)r->n_prompt * sizeof *q->tokens);
    free(flat);
    if (q->n_stop_ids > 0)
        memcpy(q->stop_ids, g->stop_ids, (size_t)q->n_stop_ids * sizeof *q->stop_ids);
    q->top_logprobs = r->top_logprobs;
    q->want_logits = r->want_logits;
    q->seq = r->seq;
    q->on_token = r->on_token;
    q->on_finish = r->on_finish;
    q->user = r->user;
    q->adapter = g->adapter;
    q->adapter_scale = g->adapter_scale;
    sp_adapter_retain(q->adapter);
    st = r->spans ? sp_prompt_spans_copy(e, q, r, err) : SPINDLE_OK;
    if (!st) st = spindle_sampler_new(&g->sampler, &q->sampler, err);
    if (!st) st = make_processors(g, &q->procs, err);
    /* A resume gets its sequence now rather than at admission, so that a
     * checkpoint the sequence cannot take is refused at submit. */
    if (!st && g->resume && !q->seq) {
        st = spindle_seq_new(e->model, &q->seq, err);
        q->owns_seq = !st;
    }
    if (!st) st = sp_request_set_checkpoints(q, g, err);
    /* Jump-forward is on by default only for greedy sampling; at
     * temperature > 0 only when asked for (jump_forward > 0), because
     * elsewhere a forced span skips the sampler (here each forced token
     * still goes through it). */
    bool jump = g->grammar && (g->jump_forward > 0 ||
                               (g->jump_forward == 0 && g->sampler.temperature == 0));
    if (!st)
        st = sp_spec_new(e, &g->spec, jump, q->cap, q->sampler, &q->spec, err);
    if (!st) st = sp_grammar_gate_new(g->grammar, e->vocab, &q->grammar, err);
    if (!st && g->grammar) st = end_ids(q, err);
    if (!st && q->resume && q->grammar.matcher) st = replay_grammar(q, err);
    if (st) {
        sp_request_free(q);
        return st;
    }
    *out = q;
    return SPINDLE_OK;
}

void sp_request_free(sp_request *r) {
    if (!r) return;
    if (r->owns_seq) spindle_seq_free(r->seq);
    spindle_checkpoint_free(r->ck);
    spindle_sampler_free(r->sampler);
    sp_logits_processors_free(r->procs);
    sp_spec_free(r->spec);
    sp_grammar_gate_free(&r->grammar);
    free(r->end_ids);
    free(r->stop_ids);
    free(r->tokens);
    sp_prompt_spans_free(r);
    sp_adapter_release(r->adapter);
    free(r);
}

static bool contains(const int32_t *ids, int n, int32_t t) {
    for (int i = 0; i < n; i++)
        if (ids[i] == t) return true;
    return false;
}

bool sp_request_take_token(spindle_engine *e, sp_request *r, float *logits,
                           spindle_stop_reason *reason, spindle_status *st,
                           spindle_error *err) {
    const float *raw = NULL;
    if (r->want_logits) {
        memcpy(e->raw, logits, (size_t)e->vocab * sizeof *e->raw);
        raw = e->raw;
    }
    int n_history = r->n_prompt + r->n_generated;
    *st = r->procs ? sp_logits_process(r->procs, r->tokens, n_history, logits,
                                       e->vocab, err)
                   : SPINDLE_OK;
    bool nothing_left = false;
    if (!*st && r->grammar.matcher)
        *st = sp_grammar_gate_mask(&r->grammar, logits, e->vocab, r->end_ids,
                                   r->n_end, &nothing_left, err);
    if (!*st && nothing_left) {
        *reason = SPINDLE_STOP_EOS;
        return true;
    }
    int32_t tok = 0;
    float logprob = 0;
    if (!*st)
        *st = sp_sampler_sample_top(r->sampler, logits, e->vocab, &tok,
                                    &logprob, r->top_logprobs, e->top, err);
    if (!*st && r->grammar.matcher && !contains(r->end_ids, r->n_end, tok))
        *st = sp_grammar_gate_accept(&r->grammar, tok, err);
    if (*st) return true;
    r->tokens[n_history] = tok;
    if (r->n_generated++ == 0) r->t_first_token = sp_engine_now();
    if (r->on_token) {
        spindle_token_info info = {
            .token = tok, .logprob = logprob, .index = r->n_generated - 1,
            .n_top = r->top_logprobs, .top = r->top_logprobs ? e->top : NULL,
            .logits = raw};
        if (!r->on_token(r->id, &info, r->user)) {
            *reason = SPINDLE_STOP_CALLBACK;
            return true;
        }
    }
    if (contains(r->eos, r->n_eos, tok) ||
        contains(r->stop_ids, r->n_stop_ids, tok)) {
        *reason = SPINDLE_STOP_EOS;
        return true;
    }
    if (r->n_generated == r->max_tokens) {
        *reason = SPINDLE_STOP_LENGTH;
        return true;
    }
    if (e->context > 0 && spindle_seq_length(r->seq) >= e->context) {
        *reason = SPINDLE_STOP_CONTEXT;
        return true;
    }
    return false;
}
