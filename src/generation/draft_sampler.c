/* How the drafters that have logits (the draft model, drafter_model.c,
 * and the MTP head, drafter_mtp.c) pick their drafts: one code path for
 * both.
 *
 * Greedy requests (temperature 0) draft the argmax of the drafter's
 * logits. At temperature > 0 a greedy draft x is accepted only with
 * probability p(x), low where p is flat, so the drafts are sampled
 * instead, coupled with the target's own draws. The request's sampler
 * (sampler.c) draws one uniform per token (the inverse CDF of
 * `categorical`), plus one XTC coin flip before it when xtc_probability >
 * 0, whatever the logits are: verify row j of a round therefore uses the
 * j-th token's draws of the request's stream from where it stands at the
 * round's start. Draft j is sampled from the drafter's logits (log-softmax,
 * the same filter chain, temperature) by a clone of the request's sampler
 * (sp_sampler_clone: made once per drafter; its stream is overwritten
 * with the request's at the start of every round, so it is a fresh
 * per-round clone without an allocation per round) that then consumes
 * draws token by token exactly as the target's rows 0..j will: when rows
 * 0..j-1 were accepted, draft j and target row j invert the same uniform,
 * through q and p. The draft equals the target's token unless the uniform
 * falls where the two CDFs disagree (the token order is the vocabulary's
 * in both; a draft vocabulary larger than the target's only adds ids at
 * the end, which end the draft); when q == p it always does. The output
 * stays exactly plain sampling: the target still draws every emitted
 * token from p with the request's own stream, which drafting never
 * advances (the clone's stream is discarded after the round, so durable
 * checkpoints record what plain decoding would); the drafts only decide
 * how many rows are accepted. Logits processors (penalties, bias) and the
 * grammar are not applied to the draft distribution: they only shift
 * acceptance, never the output, and the processors' history and the
 * grammar's ids are the target's (speculative.c cuts drafts the grammar
 * rejects before verification). */
#include "generation/sampler.h"
#include "generation/speculative.h"

spindle_status sp_draft_sampler_init(sp_draft_sampler *ds,
                                     const spindle_sampler *request,
                                     spindle_error *err) {
    *ds = (sp_draft_sampler){.request = request};
    if (!request || sp_sampler_greedy(request)) return SPINDLE_OK;
    return sp_sampler_clone(request, &ds->clone, err);
}

void sp_draft_sampler_free(sp_draft_sampler *ds) {
    spindle_sampler_free(ds->clone);
    ds->clone = NULL;
}

void sp_draft_sampler_start_round(sp_draft_sampler *ds) {
    if (!ds->clone) return;
    uint64_t state[4];
    sp_sampler_get_rng(ds->request, state);
    sp_sampler_set_rng(ds->clone, state);
}

int32_t sp_draft_sampler_pick(sp_draft_sampler *ds, float *logits, int vocab) {
    if (!ds->clone) return sp_sample_argmax(logits, vocab);
    int32_t t;
    spindle_error err;
    return spindle_sampler_sample(ds->clone, logits, vocab, &t, NULL, &err)
               ? -1 : t;
}
