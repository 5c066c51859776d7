/* The draft-model drafter: a second, smaller model with the target's
 * tokenizer keeps one sequence per speculating request (its own pool: the
 * draft model's sequences), and samples its drafts with the request's
 * sampler.
 *
 * Per round, the draft sequences of every request that shares a draft
 * model go through one batched forward per draft position: the first one
 * feeds each sequence what it has not seen of the history (the prompt at
 * the first round, then the accepted tokens), the next ones one draft
 * each. The draft sequence never holds the round's last draft, which is
 * only fed, with the target's next token, on the next round when it was
 * accepted (mlx-lm's rule).
 *
 * Greedy requests draft the argmax of the draft model's logits; at
 * temperature > 0 the drafts are sampled on the uniforms the target's
 * verify rows will draw (draft_sampler.c, which the MTP drafter shares). */
#include <stdlib.h>

#include "base/error.h"
#include "generation/speculative.h"

struct sp_draft_seq {
    spindle_model *model;
    spindle_seq *seq;
    int vocab, target_vocab;
    float *logits;         /* [vocab] */
    int32_t fed;           /* the draft of the previous forward, to feed */
    sp_draft_sampler pick; /* argmax, or the request's sampler's clone */
};

spindle_status sp_draft_seq_new(spindle_model *draft, int target_vocab,
                                const spindle_sampler *sampler,
                                sp_draft_seq **out, spindle_error *err) {
    *out = NULL;
    sp_draft_seq *d = calloc(1, sizeof *d);
    if (!d) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    d->model = draft;
    d->vocab = spindle_model_vocab_size(draft);
    d->target_vocab = target_vocab;
    d->logits = malloc((size_t)d->vocab * sizeof *d->logits);
    spindle_status st = d->logits ? spindle_seq_new(draft, &d->seq, err)
                                  : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = sp_draft_sampler_init(&d->pick, sampler, err);
    if (st) {
        sp_draft_seq_free(d);
        return st;
    }
    *out = d;
    return SPINDLE_OK;
}

void sp_draft_seq_free(sp_draft_seq *d) {
    if (!d) return;
    spindle_seq_free(d->seq);
    sp_draft_sampler_free(&d->pick);
    free(d->logits);
    free(d);
}

spindle_model *sp_draft_seq_model(const sp_draft_seq *d) { return d->model; }

/* The next draft from d->logits (clobbered when sampled), or -1, which
 * ends the draft: a token outside the target's vocabulary (the target
 * could never accept it) or logits the sampler refuses. */
static int32_t draft_token(sp_draft_seq *d) {
    int32_t t = sp_draft_sampler_pick(&d->pick, d->logits, d->vocab);
    return t < d->target_vocab ? t : -1;
}

/* Feed the sequences far behind all but the last token they miss. */
static bool catch_up(sp_draft_job *jobs, int n_jobs, spindle_batch_entry *entries) {
    int n = 0;
    for (int i = 0; i < n_jobs; i++) {
        sp_draft_job *j = &jobs[i];
        int have = spindle_seq_length(j->seq->seq);
        if (j->want < 1 || j->n - have <= SP_DRAFT_CATCH_UP) continue;
        entries[n++] = (spindle_batch_entry){
            .seq = j->seq->seq, .tokens = j->history + have,
            .n_tokens = j->n - 1 - have, .logits_mode = SPINDLE_LOGITS_NONE};
    }
    spindle_error err;
    return n == 0 || !spindle_forward(jobs[0].seq->model, entries, n, &err);
}

double sp_draft_model_run(sp_draft_job *jobs, int n_jobs,
                          spindle_batch_entry *entries) {
    for (int i = 0; i < n_jobs; i++) jobs[i].got = 0;
    if (!catch_up(jobs, n_jobs, entries)) return 0;
    int n = 0;
    for (int i = 0; i < n_jobs; i++) {
        sp_draft_job *j = &jobs[i];
        int have = spindle_seq_length(j->seq->seq);
        if (j->want < 1 || have >= j->n) continue;
        sp_draft_sampler_start_round(&j->seq->pick);
        entries[n++] = (spindle_batch_entry){
            .seq = j->seq->seq, .tokens = j->history + have,
            .n_tokens = j->n - have, .logits_mode = SPINDLE_LOGITS_LAST,
            .logits = j->seq->logits};
    }
    spindle_error err;
    double t0 = sp_engine_now();
    for (int pos = 0; n > 0; pos++) {
        if (spindle_forward(jobs[0].seq->model, entries, n, &err)) break;
        int kept = 0;
        for (int i = 0, e = 0; i < n_jobs; i++) {
            sp_draft_job *j = &jobs[i];
            if (j->got != pos || e >= n || entries[e].seq != j->seq->seq)
                continue;
            e++;
            int32_t t = draft_token(j->seq);
            if (t < 0) { j->want = j->got; continue; }
            j->out[j->got++] = t;
            if (j->got >= j->want) continue;
            j->seq->fed = t;
            entries[kept++] = (spindle_batch_entry){
                .seq = j->seq->seq, .tokens = &j->seq->fed, .n_tokens = 1,
                .logits_mode = SPINDLE_LOGITS_LAST, .logits = j->seq->logits};
        }
        n = kept;
    }
    return sp_engine_now() - t0;
}

void sp_draft_seq_rewind(sp_draft_seq *d, int n_before, int drafted,
                         int accepted) {
    (void)drafted;
    int valid = n_before + accepted;
    if (spindle_seq_length(d->seq) <= valid) return;
    spindle_error err;
    /* A failed truncation (beyond the draft model's rollback) restarts the
     * draft sequence: the next round feeds it the whole history again. */
    if (spindle_seq_truncate(d->seq, valid, &err))
        spindle_seq_truncate(d->seq, 0, &err);
}
