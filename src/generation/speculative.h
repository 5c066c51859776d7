/* Speculative decoding inside the step engine: the shared round every
 * drafter goes through (speculative.c), the n-gram prompt-lookup drafter
 * (drafter_ngram.c), the draft-model drafter (drafter_model.c), the MTP
 * drafter (drafter_mtp.c) and how the last two pick a draft from their
 * logits (draft_sampler.c).
 *
 * One round of a speculating request, within one engine step:
 *   1. before the batch is planned, its drafter proposes d <= K tokens
 *      (K from the adaptive rule, speculative.c); they are written after
 *      the pending token in the request's token buffer;
 *   2. the pending token and the d drafts are d + 1 rows of the step's
 *      one batched forward (SPINDLE_LOGITS_ALL), beside the other
 *      requests' decode rows and prompt chunks;
 *   3. row by row, the request's usual per-token rule (request.c:
 *      processors over prompt ++ accepted, sampler, logprobs, callbacks,
 *      stop rules) picks the target's token; the round goes on to the next
 *      row only while that token equals the draft. Every emitted token is
 *      thus the one plain decoding draws: y_j ~ p from the request's own
 *      random stream, in order, whatever the drafts were; the drafts only
 *      decide how many rows of the round are kept, so the output is
 *      exactly plain sampling (the same tokens for the same seed, up to
 *      the batched forward's rounding). With a deterministic drafter (q
 *      one-hot on x: n-gram, greedy model or MTP drafts) this is
 *      speculative sampling: x is accepted with probability p(x) =
 *      min(1, p(x)/q(x)) and on rejection y is p restricted to y != x,
 *      renormalized = norm(max(0, p - q)). The draft model and the MTP
 *      head at temperature > 0 sample their drafts with a clone of the
 *      request's sampler that reuses the uniforms row j will draw
 *      (draft_sampler.c), coupling x_j with y_j: accepted with probability
 *      near 1 when q is close to p instead of p(argmax q). Greedy is the special case "accept the
 *      longest prefix matching argmax"; the target's own token always
 *      follows the last accepted draft;
 *   4. the sequence is truncated back to what was accepted (every kind of
 *      layer state, spindle_seq_truncate), the drafter rewinds.
 * Drafts are capped so that the truncation stays within the model's
 * max_rollback when a layer's rollback is limited (window KV, recurrent). */
#ifndef SP_GENERATION_SPECULATIVE_H
#define SP_GENERATION_SPECULATIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "generation/engine.h"

typedef struct sp_ngram_index sp_ngram_index;
typedef struct sp_draft_seq sp_draft_seq;
typedef struct sp_mtp_draft sp_mtp_draft;

/* ---- speculative.c: the engine's side ---- */

/* The adaptive rule's probe schedule: a request that stopped drafting
 * probes after BACKOFF_MIN rounds, doubling up to BACKOFF_MAX. */
#define SP_SPEC_BACKOFF_MIN 8
#define SP_SPEC_BACKOFF_MAX 256

/* A request's speculation (speculative.c; drafter_state.c reads and
 * writes its drafter's part for checkpoints). */
struct sp_spec {
    spindle_spec_params p;
    int max_draft;                 /* K, capped by the target's rollback */
    sp_ngram_index *ngram;
    sp_draft_seq *dseq;
    sp_mtp_draft *mtp;
    int32_t draft[SPINDLE_MAX_DRAFT_TOKENS];
    int n_round;                   /* drafts in this step's round; -1: none */
    bool forced_round;             /* this round's drafts are a forced span */
    /* The adaptive rule's decayed counts per draft position and its
     * off / probe schedule (speculative.c's header comment). */
    double tried[SPINDLE_MAX_DRAFT_TOKENS], acc[SPINDLE_MAX_DRAFT_TOKENS];
    int off_rounds, backoff;
    spindle_spec_stats stats;
};


/* A request's speculation state from its parameters (*out NULL when the
 * mode is SPINDLE_SPEC_NONE and not jump_forward: a grammar's forced
 * spans alone, as drafts). Validates the parameters. `sampler` is the
 * request's (borrowed for the request's life: a draft model or an MTP
 * head samples its drafts after it, draft_sampler.c). With a grammar, every
 * round offers the span the grammar forces as its draft (the constraint
 * drafter), else the drafter's tokens cut before the first the grammar
 * rejects. */
spindle_status sp_spec_new(spindle_engine *e, const spindle_spec_params *p,
                           bool jump_forward, int cap,
                           const spindle_sampler *sampler, sp_spec **out,
                           spindle_error *err);
void sp_spec_free(sp_spec *s);
void sp_spec_engine_free(sp_spec_engine *se);

/* Step 1 for every running request that speculates and decodes this step
 * (drafts batched over requests where the drafter runs a model), within
 * `spare` draft rows; grows e->logits to hold the verify rows. */
void sp_spec_draft_round(spindle_engine *e, int spare);
/* The drafts the last sp_spec_draft_round wrote for r (0: a plain row). */
int sp_spec_round_drafts(const sp_request *r);
/* Steps 3 and 4 for r's decode entry after the forward pass. */
void sp_spec_take_round(spindle_engine *e, sp_request *r,
                        const spindle_batch_entry *en);
/* The step's forward over e->entries[0..n_entries) took `seconds`: the cost model of
 * the adaptive rule. */
void sp_spec_observe_step(spindle_engine *e, int n_entries, double seconds);
void sp_spec_stats(const sp_request *r, spindle_spec_stats *out);


/* ---- drafter_ngram.c ---- */

spindle_status sp_ngram_new(int ngram_min, int ngram_max, sp_ngram_index **out,
                            spindle_error *err);
void sp_ngram_free(sp_ngram_index *ix);
/* Index history[0..n) (only what is new since the last call: the history
 * must only grow, its indexed prefix unchanged) and propose up to `max`
 * tokens into `out`: the tokens after the FIRST earlier occurrence of the
 * longest trailing k-gram (k from ngram_max down to ngram_min). Returns
 * their count; 0 for no match (or when the index cannot grow). */
int sp_ngram_propose(sp_ngram_index *ix, const int32_t *history, int n,
                     int max, int32_t *out);

/* ---- draft_sampler.c ---- */

/* How a drafter with logits picks its drafts for one request: the argmax
 * when the request is greedy, else a draw of `clone`, a copy of the
 * request's sampler whose stream restarts each round from the request's,
 * so that draft j uses the uniforms verify row j will draw (the coupling
 * is explained in draft_sampler.c). */
typedef struct sp_draft_sampler {
    const spindle_sampler *request; /* borrowed; NULL: greedy drafts */
    spindle_sampler *clone;         /* NULL for greedy drafts */
} sp_draft_sampler;

/* `request` is borrowed for the drafter's life (NULL drafts greedily). */
spindle_status sp_draft_sampler_init(sp_draft_sampler *ds,
                                     const spindle_sampler *request,
                                     spindle_error *err);
void sp_draft_sampler_free(sp_draft_sampler *ds);
/* Before a round's first draft: the clone's stream := the request's as it
 * stands before the round's verify rows draw (the request's is only
 * read). */
void sp_draft_sampler_start_round(sp_draft_sampler *ds);
/* The next draft from logits[0..vocab) (clobbered when sampled: they end
 * as the filtered log-probabilities); -1 when the sampler refuses them
 * (nothing left to draw from). */
int32_t sp_draft_sampler_pick(sp_draft_sampler *ds, float *logits, int vocab);

/* ---- drafter_model.c ---- */

/* A draft sequence for a request whose sampler is `sampler` (borrowed: its
 * parameters are cloned, its stream read at each round's start; greedy
 * samplers draft the argmax). */
spindle_status sp_draft_seq_new(spindle_model *draft, int target_vocab,
                                const spindle_sampler *sampler,
                                sp_draft_seq **out, spindle_error *err);
void sp_draft_seq_free(sp_draft_seq *d);
spindle_model *sp_draft_seq_model(const sp_draft_seq *d);

/* One drafting job: request r wants up to `want` tokens after its history
 * history[0..n) into out. */
typedef struct sp_draft_job {
    sp_draft_seq *seq;
    const int32_t *history;
    int n, want;
    int32_t *out;
    int got;            /* filled by sp_draft_model_run */
} sp_draft_job;
/* Run the jobs that share one draft model: the catch-up of each sequence
 * and its first draft in one batched forward, then one batched forward per
 * further draft position (drafts sampled with the request's sampler on the
 * uniforms its verify rows will draw, argmax when greedy; the request's
 * stream is not advanced). A sequence more than SP_DRAFT_CATCH_UP tokens
 * behind (the prompt, or what a request decoded with drafting off) is
 * first fed all but its last one in a forward of their own, which is
 * prompt processing, not drafting: the seconds returned are those of the
 * drafting forwards only (what the adaptive rule prices a draft step by).
 * A failing forward ends the drafting of that round (what was drafted
 * stays). `entries` has room for n_jobs. */
#define SP_DRAFT_CATCH_UP 8
double sp_draft_model_run(sp_draft_job *jobs, int n_jobs,
                          spindle_batch_entry *entries);
/* After verification of a round that drafted `drafted` tokens after a
 * history of n_before tokens, `accepted` of them accepted: rewind the draft
 * sequence to what is still valid (mlx-lm's rule: when everything was
 * accepted the last draft was never fed; it is fed with the next target
 * token on the next round). */
void sp_draft_seq_rewind(sp_draft_seq *d, int n_before, int drafted,
                         int accepted);

/* ---- drafter_mtp.c ---- */

typedef struct spindle_mtp_head sp_mtp;

/* A request's MTP drafter over `head` (a reference is kept), with room
 * for the target's hidden states at positions 0 .. cap - 1, drafting
 * after the request's `sampler` (borrowed; NULL or greedy: the argmax). */
spindle_status sp_mtp_draft_new(sp_mtp *head, int cap,
                                const spindle_sampler *sampler,
                                sp_mtp_draft **out, spindle_error *err);
void sp_mtp_draft_free(sp_mtp_draft *d);
/* Where a target forward pass writes the hidden states of its n rows from
 * position pos (spindle_batch_entry.hidden); NULL when they do not fit. */
float *sp_mtp_draft_taps(sp_mtp_draft *d, int pos, int n);
/* Up to `want` drafts after history[0..n_hist) (its last token the
 * pending one, the target sequence target_length = n_hist - 1 long) into
 * out, picked by sp_draft_sampler_pick (argmax, or sampled on the
 * uniforms the verify rows will draw); their count (0 when it cannot
 * draft). */
int sp_mtp_draft_propose(sp_mtp_draft *d, const int32_t *history, int n_hist,
                         int target_length, int want, int32_t *out);
/* The logits of the head's last row of the last proposal ([vocab]; test
 * harnesses compare them; a sampled draft leaves them filtered
 * log-probabilities). */
const float *sp_mtp_draft_last_logits(const sp_mtp_draft *d);
/* The head's state for a checkpoint, appended to b: its sequence's
 * snapshot and the target's hidden states at the positions it has not
 * consumed yet (its length .. target_length - 1). */
void sp_mtp_draft_save(const sp_mtp_draft *d, int target_length, sp_strbuf *b);
/* Restore what sp_mtp_draft_save wrote (data[0..n), for a target sequence
 * target_length long); false (the drafter left cold) on any mismatch. */
bool sp_mtp_draft_restore(sp_mtp_draft *d, int target_length,
                          const unsigned char *data, size_t n);
/* The content fingerprint of the files the head comes from (the target's,
 * or its companion directory's); false when it cannot be computed. */
bool sp_mtp_draft_fingerprint(const sp_mtp_draft *d,
                              char out[SPINDLE_FINGERPRINT_LEN + 1]);
/* The hidden-state rows for an entry of r's n_tokens from its sequence's
 * current length (NULL: r has no MTP drafter). */
float *sp_spec_hidden_rows(sp_request *r, int n_tokens);

/* ---- drafter_state.c: the drafter's state in durable checkpoints ---- */

/* The checkpoint extension holding it (the name spindle_checkpoint_set_
 * extension reserves for the engine). */
#define SP_CHECKPOINT_DRAFTER_EXT "drafter"
/* r's drafter state (the record drafter_state.c describes) into b; false
 * when r has nothing to record or it could not be written. */
bool sp_spec_state_save(sp_request *r, sp_strbuf *b);
/* At a resume's admission, after r's sequence was restored: continue r's
 * drafter from the record data[0..n). A record for another drafter,
 * policy or model, or one that does not fit, is ignored with one logged
 * line naming why: the drafter then starts cold, as without a record. */
void sp_spec_state_restore(sp_request *r, const void *data, size_t n);

/* A record's fields, parsed and range-checked (no request needed: the
 * fuzz harness of the checkpoint file runs it on "drafter" extensions). */
#define SP_DRAFTER_NAMESPACE_MAX 96
typedef struct sp_drafter_record {
    char ns[SP_DRAFTER_NAMESPACE_MAX];
    uint32_t n_hist;
    double tried[SPINDLE_MAX_DRAFT_TOKENS], acc[SPINDLE_MAX_DRAFT_TOKENS];
    int32_t off_rounds, backoff;
    const unsigned char *rest;    /* the drafter's own part (borrowed) */
    size_t n_rest;
} sp_drafter_record;
/* NULL when data[0..n) is a well-formed record (into *out), else why not. */
const char *sp_drafter_record_parse(const void *data, size_t n,
                                    sp_drafter_record *out);

#endif
