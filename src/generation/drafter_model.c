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
 * How a draft is chosen. Greedy requests (temperature 0) draft the argmax
 * of the draft model's logits, as they always did. At temperature > 0 a
 * greedy draft x is accepted only with probability p(x), low where p is
 * flat, so the drafts are sampled instead, coupled with the target's own
 * draws. The request's sampler (sampler.c) draws one uniform per token
 * (the inverse CDF of `categorical`), plus one XTC coin flip before it
 * when xtc_probability > 0, whatever the logits are: verify row j of a
 * round therefore uses the j-th token's draws of the request's stream from
 * where it stands at the round's start. Draft j is sampled from the draft
 * model's logits (log-softmax, the same filter chain, temperature) by a
 * clone of the request's sampler (sp_sampler_clone: one per draft
 * sequence, made once; its stream is overwritten with the request's at the
 * start of every round, so it is a fresh per-round clone without an
 * allocation per round) that then consumes draws token by token exactly as
 * the target's rows 0..j will: when rows 0..j-1 were accepted, draft j and
 * target row j invert the same uniform, through q and p. The draft equals
 * the target's token unless the uniform falls where the two CDFs disagree
 * (the token order is the vocabulary's in both; a draft vocabulary larger
 * than the target's only adds ids at the end, which end the draft); when
 * q == p it always does. The output stays exactly plain sampling:
 * the target still draws every emitted token from p with the request's
 * own stream, which drafting never advances (the clone's stream is
 * discarded after the round, so durable checkpoints record what plain
 * decoding would); the drafts only decide how many rows are accepted.
 * Logits processors (penalties, bias) and the grammar are not applied to
 * the draft distribution: they only shift acceptance, never the output,
 * and the processors' history and the grammar's ids are the target's
 * (speculative.c cuts drafts the grammar rejects before verification). */
#include <stdlib.h>

#include "base/error.h"
#include "generation/sampler.h"
#include "generation/speculative.h"

struct sp_draft_seq {
    spindle_model *model;
    spindle_seq *seq;
    int vocab, target_vocab;
    float *logits;         /* [vocab] */
    int32_t fed;           /* the draft of the previous forward, to feed */
    const spindle_sampler *request; /* the request's sampler (borrowed) */
    spindle_sampler *sampler;       /* its clone; NULL for greedy drafts */
};

static bool greedy_drafts;

void sp_draft_set_greedy(bool on) { greedy_drafts = on; }

spindle_status sp_draft_seq_new(spindle_model *draft, int target_vocab,
                                const spindle_sampler *sampler,
                                sp_draft_seq **out, spindle_error *err) {
    *out = NULL;
    sp_draft_seq *d = calloc(1, sizeof *d);
    if (!d) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    d->model = draft;
    d->vocab = spindle_model_vocab_size(draft);
    d->target_vocab = target_vocab;
    d->request = sampler;
    d->logits = malloc((size_t)d->vocab * sizeof *d->logits);
    spindle_status st = d->logits ? spindle_seq_new(draft, &d->seq, err)
                                  : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st && !sp_sampler_greedy(sampler))
        st = sp_sampler_clone(sampler, &d->sampler, err);
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
    spindle_sampler_free(d->sampler);
    free(d->logits);
    free(d);
}

spindle_model *sp_draft_seq_model(const sp_draft_seq *d) { return d->model; }

/* The next draft from d->logits (clobbered when sampled): the argmax for
 * greedy requests, else a draw of the clone (one token's draws of the
 * request's stream, header comment). -1 ends the draft: a token outside
 * the target's vocabulary (the target could never accept it) or logits
 * the sampler refuses (nothing left to draw from). */
static int32_t draft_token(sp_draft_seq *d) {
    int32_t t;
    spindle_error err;
    if (!d->sampler || greedy_drafts)
        t = sp_sample_argmax(d->logits, d->vocab);
    else if (spindle_sampler_sample(d->sampler, d->logits, d->vocab, &t, NULL,
                                    &err))
        return -1;
    return t < d->target_vocab ? t : -1;
}

/* The clone's stream from where the request's stands before the round's
 * verify rows draw anything (the request's stream itself is only read). */
static void start_round(sp_draft_seq *d) {
    if (!d->sampler) return;
    uint64_t state[4];
    sp_sampler_get_rng(d->request, state);
    sp_sampler_set_rng(d->sampler, state);
}

void sp_draft_model_run(sp_draft_job *jobs, int n_jobs,
                        spindle_batch_entry *entries) {
    int n = 0;
    for (int i = 0; i < n_jobs; i++) {
        sp_draft_job *j = &jobs[i];
        int have = spindle_seq_length(j->seq->seq);
        j->got = 0;
        if (j->want < 1 || have >= j->n) continue;
        start_round(j->seq);
        entries[n++] = (spindle_batch_entry){
            .seq = j->seq->seq, .tokens = j->history + have,
            .n_tokens = j->n - have, .logits_mode = SPINDLE_LOGITS_LAST,
            .logits = j->seq->logits};
    }
    spindle_error err;
    for (int pos = 0; n > 0; pos++) {
        if (spindle_forward(jobs[0].seq->model, entries, n, &err)) return;
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
