/* spindle/engine.h: the step engine: many requests in one batched forward
 * per step. Part of the public API: include "spindle.h", whose opening
 * comment states the conventions every call here follows. */
#ifndef SPINDLE_ENGINE_H
#define SPINDLE_ENGINE_H

#include "spindle/generate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ engine
 *
 * A step engine runs many requests on one model at once (continuous
 * batching). Each spindle_engine_step is ONE spindle_forward over several
 * batch entries, so the weights are read once for all sequences:
 *   1. one decode row for every running sequence that has a token to feed;
 *   2. then prompt chunks of the sequences still prefilling, oldest first,
 *      up to max_batch_tokens rows in all (chunked prefill: a long prompt
 *      takes several steps and never stalls the others' decodes);
 *   3. then new requests, first come first served, while fewer than
 *      max_seqs are running and the token budget lasts.
 * Each request has its own sampler (its own seeded random stream), logits
 * processors, stop ids and sequence, so its tokens do not depend on what
 * else is in the batch (up to summation order in the logits).
 *
 * Threads. spindle_engine_submit, spindle_engine_cancel and
 * spindle_engine_counts are thread-safe (a locked queue) and may be called
 * from any thread, also from inside the callbacks. The steps run on one
 * thread: the engine's own thread in background mode, else whichever thread
 * calls spindle_engine_step (one at a time). The callbacks run on that
 * stepping thread, between forward passes; they stall every request while
 * they run, so keep them short, and they must not call spindle_engine_step
 * or spindle_engine_free (only submit, cancel and counts).
 *
 * The engine uses the model's forward scratch and thread pool: while an
 * engine exists, nothing else runs spindle_forward or spindle_generate on
 * its model. The model must outlive the engine. */
typedef struct spindle_engine spindle_engine;

typedef struct spindle_engine_options {
    int max_seqs;          /* requests running at once; 0: 16 */
    int max_batch_tokens;  /* rows per step (decode rows + prompt chunks);
                              0: 512; must be >= max_seqs */
    /* true: the engine owns a thread that steps while there is work and
     * sleeps when idle; spindle_engine_step is then refused. false: the
     * caller drives it with spindle_engine_step. */
    bool background;
    /* true: never map cached prompt blocks (every prompt is computed in
     * full; the blocks are still published for others). */
    bool no_prefix_cache;
} spindle_engine_options;

/* max_seqs 16, max_batch_tokens 512, no background thread. Thread-safe. */
spindle_engine_options spindle_engine_defaults(void);

/* `options` NULL: the defaults. Allocates the step scratch (max_seqs
 * logits rows) and, in background mode, starts the thread. Thread-safe as
 * spindle_forward is (one user of the model at a time). */
spindle_status spindle_engine_new(spindle_model *model,
                                  const spindle_engine_options *options,
                                  spindle_engine **out, spindle_error *err);
/* Stops the thread (after the step in progress), then ends every request
 * not yet finished (queued or running) with SPINDLE_STOP_CANCELLED, its
 * on_finish running on the thread that stepped (the engine's own thread in
 * background mode, else the caller of free). Submits made during or after
 * free are refused. Not concurrently with spindle_engine_step; no other
 * call may use the engine once free has returned. */
void spindle_engine_free(spindle_engine *engine);

/* Engine-assigned, unique per engine, counting from 1. */
typedef uint64_t spindle_request_id;

/* The most alternatives a request can ask for (OpenAI's top_logprobs). */
#define SPINDLE_MAX_TOP_LOGPROBS 20

typedef struct spindle_token_logprob {
    int32_t token;
    float logprob;
} spindle_token_logprob;

/* What on_token receives for each generated token. Every pointer is
 * borrowed and valid only during the callback. */
typedef struct spindle_token_info {
    int32_t token;
    /* log-softmax of the logits after the logits processors and before the
     * sampler's filters and temperature: what mlx-lm reports. */
    float logprob;
    int index;        /* 0 for the first generated token */
    /* The request's top_logprobs most likely tokens of that same
     * distribution, most likely first (ties: lower id first). */
    int n_top;
    const spindle_token_logprob *top;
    /* want_logits: the raw logits (vocab floats) this token was chosen from,
     * before any processor (index 0: the last prompt position); else
     * NULL. */
    const float *logits;
} spindle_token_info;

typedef struct spindle_request_stats {
    int prompt_tokens;
    int cached_tokens;       /* as in spindle_gen_stats */
    int generated_tokens;
    double queue_seconds;    /* submit -> first prompt chunk in a step */
    double ttft_seconds;     /* submit -> first generated token */
    double prefill_seconds;  /* first prompt chunk -> first token */
    double decode_seconds;   /* first token -> finish */
    double prefill_tps;      /* prompt_tokens / prefill_seconds */
    double decode_tps;       /* tokens after the first / decode_seconds */
    double total_seconds;    /* submit -> finish */
    spindle_spec_stats spec; /* params.spec.mode != SPINDLE_SPEC_NONE */
} spindle_request_stats;

/* What on_finish receives, exactly once per accepted request. Pointers are
 * borrowed and valid only during the callback. */
typedef struct spindle_request_result {
    spindle_stop_reason stop_reason;
    /* SPINDLE_OK unless stop_reason is SPINDLE_STOP_ERROR: then why this
     * request failed (one line in `error`); the other requests go on. */
    spindle_status status;
    const char *error;       /* "" when status is SPINDLE_OK */
    const int32_t *tokens;   /* every generated token, in order */
    int n_tokens;
    spindle_request_stats stats;
} spindle_request_result;

/* Return false to stop the request (stop reason "callback"; this token is
 * kept). */
typedef bool (*spindle_request_token_fn)(spindle_request_id id,
                                         const spindle_token_info *info,
                                         void *user);
typedef void (*spindle_request_finish_fn)(spindle_request_id id,
                                          const spindle_request_result *result,
                                          void *user);

typedef struct spindle_request {
    const int32_t *prompt;   /* copied by submit; at least one token */
    int n_prompt;
    /* Instead of `prompt` (then NULL, n_prompt 0): the prompt as spans
     * (sequence.h), copied by submit with their rows. A bidirectional
     * span is computed in one step even when it is longer than what is
     * left of max_batch_tokens. With params->resume, the spans' digests
     * must be the checkpoint's (SPINDLE_ERR_ARGUMENT otherwise). */
    const spindle_span *spans;
    int n_spans;
    /* NULL: spindle_gen_defaults(). Copied by submit, with every array it
     * points to. The engine's max_batch_tokens replaces prefill_chunk. */
    const spindle_gen_params *params;
    int top_logprobs;        /* 0..SPINDLE_MAX_TOP_LOGPROBS alternatives */
    bool want_logits;        /* give on_token the raw logits of each step */
    /* NULL: a fresh sequence, made at admission and freed at the end.
     * Otherwise a caller-owned sequence of the same model to continue (as
     * spindle_generate does): the prompt goes in at its current length;
     * the caller must not touch it until on_finish has run. It ends holding
     * the prompt and every generated token except the last (after a cancel
     * or an error: what was computed until then). */
    spindle_seq *seq;
    spindle_request_token_fn on_token;   /* may be NULL */
    spindle_request_finish_fn on_finish; /* may be NULL */
    void *user;                          /* passed to both callbacks */
} spindle_request;

/* Queue a request; `*id` (may be NULL) receives its id. Validates the
 * prompt (ids in the vocabulary), the parameters (as spindle_sampler_new
 * and the logits processors do) and top_logprobs at once, with
 * SPINDLE_ERR_ARGUMENT; a prompt that can never fit (longer than the
 * context left in the sequence) fails with SPINDLE_ERR_LIMIT; a `seq`
 * that an unfinished request holds is SPINDLE_ERR_ARGUMENT, and so is a
 * submit during spindle_engine_free (a `seq` of another model is accepted
 * and ends the request with an error at its first step). On error
 * nothing is queued and no callback runs; on success on_finish will run
 * exactly once. In background mode the callbacks may run before submit
 * returns: find the caller's state through `user`, not through *id.
 * Thread-safe. */
spindle_status spindle_engine_submit(spindle_engine *engine,
                                     const spindle_request *request,
                                     spindle_request_id *id,
                                     spindle_error *err);
/* Ask that request `id` stop: at the start of the next step it ends with
 * SPINDLE_STOP_CANCELLED, queued or running (a sequence the engine made
 * is freed then; a caller's keeps what was computed). True when
 * the request had not finished yet (a request finishing in the step that
 * is running keeps its own stop reason); false for an unknown or finished
 * id. Thread-safe. */
bool spindle_engine_cancel(spindle_engine *engine, spindle_request_id id);

/* Requests queued (not yet admitted) and running; either pointer may be
 * NULL. A snapshot, taken between steps. Thread-safe. */
void spindle_engine_counts(spindle_engine *engine, int *queued, int *running);
/* Whether request `id` is one of the `running` that spindle_engine_counts
 * reports (admitted: prefilling or decoding, in the same snapshot); false
 * while it is queued, and for a finished or unknown id. Thread-safe. */
bool spindle_engine_is_running(spindle_engine *engine, spindle_request_id id);

/* One scheduler step: cancellations, admission, one batched forward pass,
 * sampling and the callbacks. `*active` (may be NULL) receives the number
 * of requests still queued or running afterwards; 0 means idle (the step
 * did nothing more than drain the queue). A failing forward pass is retried
 * per request so that only the requests that fail alone end in error;
 * the call itself fails only on invalid use (NULL, or background mode).
 * One thread at a time; not in background mode. */
spindle_status spindle_engine_step(spindle_engine *engine, int *active,
                                   spindle_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_ENGINE_H */
