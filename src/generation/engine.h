/* The step engine's internals, shared by engine.c (the public calls, the
 * locked queue, the background thread) and engine_sched.c (one scheduler
 * step) and request.c (one request's tokens, sampler and stop rules).
 *
 * Ownership and threads: a request is allocated by submit and freed by the
 * stepping thread right after its on_finish. Fields marked (lock) are
 * guarded by spindle_engine.lock; fields marked (step) belong to the
 * stepping thread; the rest are written once by submit before the request
 * is visible to anyone else. */
#ifndef SP_GENERATION_ENGINE_H
#define SP_GENERATION_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "spindle.h"
#include "base/check.h"
#include "generation/sampler.h"

typedef struct sp_spec sp_spec;               /* speculative.h */
typedef struct sp_spec_engine sp_spec_engine;
typedef struct sp_mask_worker sp_mask_worker; /* mask_prefetch.c */
/* A request's grammar: its matcher and the mask buffer (grammar_mask.c). */
typedef struct sp_grammar_gate {
    spindle_grammar_matcher *matcher;   /* NULL: no grammar */
    uint32_t *bits;
    int words;
    int n_grammar_vocab;                /* ids its masks cover */
    int32_t bits_state;                 /* the matcher state `bits` is the
                                           mask of; -1: none */
    /* A mask the engine's mask thread failed to compute (mask_prefetch.c):
     * the state, -1 if none, and the error, returned when sampling reaches
     * that state as if it had failed there. */
    int32_t failed_state;
    spindle_error failed;
} sp_grammar_gate;

/* A request's life in the engine. r->state only moves along these
 * transitions, each made by the function named (sp_request_set_state
 * checks it in debug and sanitizer builds):
 *
 *   NEW     -> QUEUED    enqueue() (engine.c), under the lock: on the
 *                        incoming list, visible to cancel
 *   QUEUED  -> WAITING   take_incoming() (engine_sched.c): in the waiting
 *                        queue, first come first served
 *   WAITING -> RUNNING   admit() (engine_sched.c): its sequence and KV room
 *                        given, in running[]
 *   RUNNING -> ENDING    the step that ends it: take_results(),
 *                        forward_each(), sp_spec_take_round()
 *                        (speculative.c), retire_running() (cancelled),
 *                        sp_engine_cancel_all()
 *   ENDING  -> FINISHED  sp_engine_finish() from retire_running(), after
 *                        the step's pass
 *   WAITING -> FINISHED  sp_engine_finish() from drop_cancelled_waiting(),
 *                        plan_batch() (SP_ADMIT_FAIL), admit() (its
 *                        checkpoint did not restore), sp_engine_cancel_all()
 *
 * In FINISHED on_finish has run, and the request is freed right after. One
 * that spindle_engine_submit refuses is freed in NEW, without on_finish. */
typedef enum sp_request_state {
    SP_REQ_NEW = 0,
    SP_REQ_QUEUED,
    SP_REQ_WAITING,
    SP_REQ_RUNNING,
    SP_REQ_ENDING,
    SP_REQ_FINISHED
} sp_request_state;

/* One span of a request's prompt: its first position and the span (its
 * ids in the request's tokens, an embeddings span's rows its own copy). */
typedef struct sp_prompt_span {
    int start;
    spindle_span span;
} sp_prompt_span;

typedef struct sp_request {
    spindle_request_id id;
    sp_request_state state;         /* (step; NEW -> QUEUED under the lock) */
    atomic_bool cancelled;          /* set by spindle_engine_cancel */
    bool running_seen;              /* (lock) admitted as of the counts'
                                       snapshot (spindle_engine_is_running) */
    struct sp_request *next;        /* queue link: incoming (lock) or
                                       waiting (step) */

    /* The prompt, then every generated token: the processors' history and
     * what a decode row feeds (its last entry). Room for every token the
     * request can generate, so a step never grows it. */
    int32_t *tokens;
    int n_prompt, n_generated, cap;
    int max_tokens;
    const int32_t *eos;             /* the model's (none with ignore_eos) */
    int n_eos;
    int32_t *stop_ids;
    int n_stop_ids;
    int top_logprobs;
    bool want_logits;
    spindle_sampler *sampler;
    sp_logits_processors *procs;    /* NULL when none is active */
    sp_grammar_gate grammar;
    int32_t *end_ids;               /* eos ++ stop_ids, what a grammar gates */
    int n_end;
    spindle_seq *seq;               /* the caller's, or made at admission */
    bool owns_seq;
    sp_spec *spec;                  /* NULL: no speculative decoding */
    spindle_request_token_fn on_token;
    spindle_request_finish_fn on_finish;
    void *user;
    /* Durable checkpoints (checkpoint.c): the parameters, copied, that
     * every checkpoint of this request carries (NULL when it makes none),
     * and the checkpoint it resumes (borrowed; restored at admission). */
    int checkpoint_every;
    int checkpoint_at;   /* n_generated at the last checkpoint (or start) */
    spindle_checkpoint_fn on_checkpoint;
    void *checkpoint_user;
    spindle_checkpoint *ck;
    const spindle_checkpoint *resume;
    const spindle_adapter *adapter; /* a reference held until freed */
    float adapter_scale;
    /* A prompt submitted as spans (prompt_spans.c; NULL, 0 otherwise):
     * the spans, each prompt position's prefix-index key, room for one
     * chunk's spans (step), and the record of its embeddings spans that
     * its checkpoints carry (NULL when it has none). */
    sp_prompt_span *spans;
    int n_spans;
    uint64_t *keys;
    spindle_span *chunk;
    unsigned char *span_record;
    size_t span_record_n;

    /* (step) */
    int prefilled;                  /* prompt tokens already in seq */
    int cached_tokens;              /* of them, mapped from the prefix
                                       index at admission */
    int need_blocks;                /* KV blocks it may ever hold (written
                                       by submit) */
    double t_submit, t_first_chunk, t_first_token;
    /* SP_REQ_ENDING: how it ends (after the step's forward pass). */
    spindle_stop_reason reason;
    spindle_error error;            /* status SPINDLE_OK unless it failed */
} sp_request;

/* Deliberate misbehaviour of speculation, for the tests that must catch it
 * or compare against it (tests/tools/engine_harness.c): per engine, all off
 * unless sp_engine_set_testing turns them on. */
typedef struct sp_engine_testing {
    /* A wrong acceptance rule: every draft accepted, whatever the target
     * samples (the sampling-equality test must catch it). */
    bool always_accept;
    /* Each draft-model step takes this many seconds longer (a draft model
     * slower than its target, which the adaptive rule must turn off). */
    double draft_delay;
    /* The drafters draft their argmax at every temperature (as before
     * drafts were sampled), so that tests compare the acceptance rates. */
    bool greedy_drafts;
    /* The adaptive rule prices every step and draft at its prior and
     * never measures them, so that its choices depend on the acceptance
     * counts alone (tests compare drafting across runs). */
    bool fixed_costs;
} sp_engine_testing;

struct spindle_engine {
    spindle_model *model;
    sp_engine_testing testing;      /* set before the first submit */
    int vocab, context;
    int max_seqs, max_batch_tokens;
    bool background;
    bool no_prefix_cache;

    pthread_mutex_t lock;
    pthread_cond_t wake;            /* submit, cancel, free */
    pthread_t thread;
    bool thread_started;
    /* (lock) */
    sp_request *in_head, *in_tail;  /* submitted, not yet taken by a step */
    sp_request **live;              /* every unfinished request (cancel,
                                       the sequence-in-use check) */
    int n_live, cap_live;
    int n_incoming;
    int n_waiting_seen, n_running_seen; /* the step's counts, for counts() */
    bool kick;                      /* a cancel the idle thread must see */
    bool stopping;                  /* free has begun */
    spindle_request_id next_id;

    /* (step) */
    sp_request *wait_head, *wait_tail;  /* admitted in this order (FCFS) */
    int n_waiting;
    sp_request **running;           /* [max_seqs], in admission order */
    int n_running;
    spindle_batch_entry *entries;   /* [max_seqs], one per running request */
    sp_request **entry_req;
    float *logits;                  /* [max_seqs][vocab], more rows with
                                       speculation (speculative.c): the rows
                                       of the entries that want logits, in
                                       order */
    sp_spec_engine *spec;           /* (step) NULL until a request
                                       speculates */
    int n_logit_rows;
    /* The grammar mask thread, started at the first step that has a mask
     * to compute (NULL until then, and always when mask_overlap is off). */
    sp_mask_worker *masks;
    bool mask_overlap;              /* sp_mask_overlap_wanted */
    float *raw;                     /* [vocab]: want_logits' copy */
    spindle_token_logprob top[SPINDLE_MAX_TOP_LOGPROBS];
};

double sp_engine_now(void);
/* Set e's testing behaviour; before the first request is submitted. */
void sp_engine_set_testing(spindle_engine *e, const sp_engine_testing *t);

/* Whether the request's state table allows from -> to (engine.c). */
bool sp_request_transition_allowed(sp_request_state from, sp_request_state to);

static inline void sp_request_set_state(sp_request *r, sp_request_state to) {
    SP_DEBUG_CHECK(sp_request_transition_allowed(r->state, to));
    r->state = to;
}

/* Marked in this step to end after its pass. */
static inline bool sp_request_ending(const sp_request *r) {
    return r->state == SP_REQ_ENDING;
}

/* ---- request.c ---- */

/* A request from the caller's description, everything copied and
 * validated (the errors spindle_engine_submit documents except the
 * sequence-in-use check, which needs the lock). */
spindle_status sp_request_new(spindle_engine *e, const spindle_request *r,
                              sp_request **out, spindle_error *err);
void sp_request_free(sp_request *r);
/* Choose the next token from `logits` (the request's row, clobbered),
 * report it to on_token and decide whether the request stops: returns
 * true and sets *reason when it does. A failed sampler sets *st. */
bool sp_request_take_token(spindle_engine *e, sp_request *r, float *logits,
                           spindle_stop_reason *reason, spindle_status *st,
                           spindle_error *err);

/* ---- prompt_spans.c ---- */

/* The ids of r's spans, checked, in one malloc'd array (*n of them). */
spindle_status sp_prompt_spans_flatten(const spindle_engine *e,
                                       const spindle_request *r,
                                       int32_t **ids, int *n,
                                       spindle_error *err);
/* The record of the embeddings spans among spans[0..n) (malloc'd; NULL, 0
 * when there is none): positions, flags and digests, what a checkpoint
 * keeps and a resume must match. */
spindle_status sp_prompt_spans_record(const spindle_span *spans, int n,
                                      unsigned char **out, size_t *bytes,
                                      spindle_error *err);
/* q's copy of r's spans and its prompt's keys (q->tokens holds the ids). */
spindle_status sp_prompt_spans_copy(const spindle_engine *e, sp_request *q,
                                    const spindle_request *r,
                                    spindle_error *err);
void sp_prompt_spans_free(sp_request *q);
/* How many of the `take` prompt positions from q->prefilled one chunk
 * takes so that it does not end inside a bidirectional span: it stops
 * before one, or takes one that starts it whole (then more than `take`). */
int sp_prompt_chunk_take(const sp_request *q, int take);
/* The spans of prompt positions [from, from + n) into q->chunk; their
 * count. */
int sp_prompt_chunk_spans(const spindle_engine *e, sp_request *q, int from,
                          int n);

/* ---- grammar_mask.c ---- */

spindle_status sp_grammar_gate_new(const spindle_grammar *g, int n_vocab,
                                   sp_grammar_gate *out, spindle_error *err);
void sp_grammar_gate_free(sp_grammar_gate *gate);
/* Set the logits of tokens the grammar rejects to -inf; the end ids keep
 * theirs only where the grammar is complete. *nothing_left: the grammar is
 * complete and no end id can be sampled (the request ends, no token). */
spindle_status sp_grammar_gate_mask(sp_grammar_gate *gate, float *logits,
                                    int n_vocab, const int32_t *end_ids,
                                    int n_end, bool *nothing_left,
                                    spindle_error *err);
/* The span the grammar forces from its current state (exactly one token
 * allowed at each position, the grammar not complete), at most `max`
 * tokens into out; the matcher is left where it was. */
int sp_grammar_gate_forced(sp_grammar_gate *gate, int max, int32_t *out);
/* How many of draft[0..n) the grammar accepts in a row from its current
 * state (an end id counts where the grammar is complete, and ends the
 * run); the matcher is left where it was. */
int sp_grammar_gate_valid_prefix(sp_grammar_gate *gate, const int32_t *draft, int n,
                                 const int32_t *end_ids, int n_end);
spindle_status sp_grammar_gate_accept(sp_grammar_gate *gate, int32_t token,
                                      spindle_error *err);
/* Whether the mask of the matcher's current state is still to compute. */
bool sp_grammar_gate_mask_stale(const sp_grammar_gate *gate);
/* Compute it now (on the mask thread); a failure is kept in the gate and
 * reported by the sp_grammar_gate_mask that samples at this state. */
void sp_grammar_gate_prefetch(sp_grammar_gate *gate);

/* ---- mask_prefetch.c ---- */

/* Whether the engine of m computes masks during the forward:
 * SPINDLE_GRAMMAR_OVERLAP=1 on, =0 off, else (the default) on only when
 * m's compute threads are fewer than the online cores. */
bool sp_mask_overlap_wanted(const spindle_model *m);
/* Hand the masks this step's planned logits rows sample first (those of
 * constrained requests whose mask is stale) to the engine's mask thread,
 * so that they are computed while the forward pass runs. Starts nothing
 * when there is none. */
void sp_mask_prefetch_start(spindle_engine *e, int n_entries);
/* Compute here those the mask thread has not started and wait for the
 * rest: before any token is sampled, any matcher touched or any request
 * freed. */
void sp_mask_prefetch_wait(spindle_engine *e);
/* Stop and join the mask thread (spindle_engine_free). */
void sp_mask_prefetch_free(spindle_engine *e);

/* ---- engine.c ---- */

/* End request r: remove it from the live set, call on_finish, free it. */
void sp_engine_finish(spindle_engine *e, sp_request *r,
                      spindle_stop_reason reason, spindle_status status,
                      const char *error);

/* ---- engine_admit.c ---- */

/* Set r->need_blocks; SPINDLE_ERR_LIMIT when the pool can never hold
 * them. */
spindle_status sp_engine_size_request(spindle_engine *e, sp_request *r,
                                      spindle_error *err);
typedef enum sp_admit_verdict {
    SP_ADMIT_OK,    /* r has its sequence (prefix mapped) and its room */
    SP_ADMIT_WAIT,  /* not now: leave it at the head of the queue */
    SP_ADMIT_FAIL,  /* r->error says why; end it */
} sp_admit_verdict;
sp_admit_verdict sp_engine_make_room(spindle_engine *e, sp_request *r);

/* ---- engine_sched.c ---- */

/* One scheduler step on the stepping thread; returns the requests still
 * queued or running. */
int sp_engine_run_step(spindle_engine *e);
/* Finish every unfinished request as cancelled (spindle_engine_free). */
void sp_engine_cancel_all(spindle_engine *e);

#endif
