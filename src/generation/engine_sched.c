/* One scheduler step of the engine, on the stepping thread:
 *   1. take what was submitted into the waiting queue, end what was
 *      cancelled;
 *   2. plan one batch: a decode row per running request, then prompt
 *      chunks of the running requests still prefilling (oldest first),
 *      then new requests from the queue (FCFS) while fewer than max_seqs
 *      run and the KV pool has room for them (engine_admit.c; a prompt
 *      whose first blocks are in the prefix index starts after them), all
 *      within max_batch_tokens rows;
 *   3. one spindle_forward over the whole batch (per entry again only when
 *      it fails, to find the requests that fail alone), while the engine's
 *      mask thread computes the grammar masks its rows sample from
 *      (mask_prefetch.c);
 *   4. per request whose last prompt token or decode row was in it: pick a
 *      token (request.c), call on_token, apply the stop rules; end the
 *      requests that stopped.
 * Nothing here allocates except admission (a new request's sequence) and
 * speculation (speculative.c: its first round, more logits rows, a longer
 * n-gram index). */
#include "generation/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "generation/checkpoint.h"
#include "generation/speculative.h"
#include "models/model.h"
#include "runtime/kv_pool.h"

/* Move the submitted requests to the end of the waiting queue. */
static void take_incoming(spindle_engine *e) {
    pthread_mutex_lock(&e->lock);
    for (sp_request *r = e->in_head; r; r = r->next) sp_request_set_state(r, SP_REQ_WAITING);
    if (e->in_head) {
        if (e->wait_tail) e->wait_tail->next = e->in_head;
        else e->wait_head = e->in_head;
        e->wait_tail = e->in_tail;
        e->n_waiting += e->n_incoming;
        e->n_waiting_seen += e->n_incoming;
        e->in_head = e->in_tail = NULL;
        e->n_incoming = 0;
    }
    pthread_mutex_unlock(&e->lock);
}

/* End, in order, the running requests marked ENDING (or, with `cancel`,
 * every one that was cancelled), keeping the others in admission order. */
static void retire_running(spindle_engine *e, bool cancel) {
    int kept = 0;
    for (int i = 0; i < e->n_running; i++) {
        sp_request *r = e->running[i];
        if (cancel && atomic_load(&r->cancelled)) {
            sp_request_set_state(r, SP_REQ_ENDING);
            r->reason = SPINDLE_STOP_CANCELLED;
        }
        if (sp_request_ending(r))
            sp_engine_finish(e, r, r->reason, r->error.status,
                             r->error.message);
        else
            e->running[kept++] = r;
    }
    e->n_running = kept;
}

static void drop_cancelled_waiting(spindle_engine *e) {
    sp_request **link = &e->wait_head, *last = NULL;
    while (*link) {
        sp_request *r = *link;
        if (atomic_load(&r->cancelled)) {
            *link = r->next;
            e->n_waiting--;
            sp_engine_finish(e, r, SPINDLE_STOP_CANCELLED, SPINDLE_OK, NULL);
        } else {
            last = r;
            link = &r->next;
        }
    }
    e->wait_tail = last;
}

/* Logits rows go to the entries that ask for them in order, one after the
 * other, so the forward pass runs the lm_head once over all of them.
 * logit_rows: 0 none, 1 the last token's, n_tokens every token's (a
 * speculative round's verify rows). */
static void add_entry(spindle_engine *e, int *n, sp_request *r,
                      const int32_t *tokens, int n_tokens, int logit_rows) {
    int i = (*n)++;
    e->entries[i] = (spindle_batch_entry){
        .seq = r->seq, .tokens = tokens, .n_tokens = n_tokens,
        .logits_mode = logit_rows > 1 ? SPINDLE_LOGITS_ALL
                       : logit_rows    ? SPINDLE_LOGITS_LAST
                                       : SPINDLE_LOGITS_NONE,
        .logits = logit_rows ? e->logits + (size_t)e->n_logit_rows * e->vocab
                             : NULL,
        .adapter = r->adapter, .adapter_scale = r->adapter_scale,
        .hidden = sp_spec_hidden_rows(r, n_tokens)};
    e->n_logit_rows += logit_rows;
    e->entry_req[i] = r;
}

/* How much of the next `take` prompt tokens of r one pass should take
 * for a model whose prefix index needs boundary states
 * (runtime/prefix_states.h): a state is kept only where a pass ends on a
 * block boundary, so a chunk that does not finish the prompt ends on one,
 * and the final chunk stops at the prompt's last boundary first (one
 * extra pass per prompt), so that a later prompt sharing this one finds a
 * state as far in as it can. Positions are the sequence's (a caller's
 * sequence may start the prompt anywhere). */
static int aligned_take(const spindle_engine *e, const sp_request *r,
                        int take) {
    const sp_kv_pool *pool = e->model->kv_pool;
    if (!pool || !sp_kv_pool_states(pool)) return take;
    const int block = SP_KV_BLOCK_TOKENS;
    const int start = spindle_seq_length(r->seq);
    const int end = start + take, prompt_end = start + r->n_prompt - r->prefilled;
    const int cut = (end < prompt_end ? end : prompt_end) / block * block;
    return cut > start && cut < end ? cut - start : take;
}

/* The next prompt chunk of r, as much as the budget allows (a
 * bidirectional span is never cut: the chunk stops before it, or takes it
 * whole beyond the budget when it starts the chunk). */
static void add_chunk(spindle_engine *e, int *n, sp_request *r, int *budget) {
    const int left = r->n_prompt - r->prefilled;
    int take = left < *budget ? left : *budget;
    if (take <= 0) return;
    take = aligned_take(e, r, take);
    if (r->spans) take = sp_prompt_chunk_take(r, take);
    add_entry(e, n, r, r->tokens + r->prefilled, take, take == left);
    if (r->spans) {
        spindle_batch_entry *en = &e->entries[*n - 1];
        en->tokens = NULL;
        en->spans = r->chunk;
        en->n_spans = sp_prompt_chunk_spans(e, r, r->prefilled, take);
    }
    *budget -= take;
}

/* Admit r, just taken from the queue (engine_admit.c gave it its
 * sequence and its room in the KV pool). False when it could not start
 * (it has been ended): a checkpoint it resumes did not restore. */
static bool admit(spindle_engine *e, sp_request *r) {
    r->t_first_chunk = sp_engine_now();
    if (r->resume && sp_checkpoint_restore(r, &r->error)) {
        sp_engine_finish(e, r, SPINDLE_STOP_ERROR, r->error.status,
                         r->error.message);
        return false;
    }
    sp_request_set_state(r, SP_REQ_RUNNING);
    e->running[e->n_running++] = r;
    return true;
}

/* Fill e->entries for this step; returns their count. */
static int plan_batch(spindle_engine *e) {
    int n = 0, budget = e->max_batch_tokens;
    e->n_logit_rows = 0;
    sp_spec_draft_round(e, budget);
    for (int i = 0; i < e->n_running; i++) {
        sp_request *r = e->running[i];
        if (r->prefilled == r->n_prompt) {
            int rows = 1 + (sp_spec_round_drafts(r) > 0 ? sp_spec_round_drafts(r) : 0);
            add_entry(e, &n, r, r->tokens + r->n_prompt + r->n_generated - 1,
                      rows, rows);
            budget -= rows;
        }
    }
    for (int i = 0; i < e->n_running && budget > 0; i++)
        if (e->running[i]->prefilled < e->running[i]->n_prompt)
            add_chunk(e, &n, e->running[i], &budget);
    while (budget > 0 && e->n_running < e->max_seqs && e->wait_head) {
        sp_request *r = e->wait_head;
        const sp_admit_verdict v = sp_engine_make_room(e, r);
        if (v == SP_ADMIT_WAIT) break; /* FCFS: nobody overtakes it */
        e->wait_head = r->next;
        if (!e->wait_head) e->wait_tail = NULL;
        r->next = NULL;
        e->n_waiting--;
        if (v == SP_ADMIT_FAIL) {
            sp_engine_finish(e, r, SPINDLE_STOP_ERROR, r->error.status,
                             r->error.message);
            continue;
        }
        if (admit(e, r)) add_chunk(e, &n, r, &budget);
    }
    return n;
}

/* The batch failed as a whole: run each entry alone, so that only the
 * requests that fail by themselves end (a failed pass extends no
 * sequence, so the retry starts from the same state). */
static void forward_each(spindle_engine *e, int n) {
    for (int i = 0; i < n; i++) {
        sp_request *r = e->entry_req[i];
        if (spindle_forward(e->model, &e->entries[i], 1, &r->error)) {
            sp_request_set_state(r, SP_REQ_ENDING);
            r->reason = SPINDLE_STOP_ERROR;
        }
    }
}

/* After the pass: advance the prompts, pick the tokens, apply the stop
 * rules (request.c). */
static void take_results(spindle_engine *e, int n) {
    for (int i = 0; i < n; i++) {
        sp_request *r = e->entry_req[i];
        const spindle_batch_entry *en = &e->entries[i];
        if (sp_request_ending(r)) continue;
        if (r->prefilled < r->n_prompt) r->prefilled += en->n_tokens;
        if (en->logits_mode == SPINDLE_LOGITS_NONE) continue;
        spindle_status st = SPINDLE_OK;
        if (r->max_tokens == 0) {
            sp_request_set_state(r, SP_REQ_ENDING);
            r->reason = SPINDLE_STOP_LENGTH;
        } else if (sp_spec_round_drafts(r) >= 0) {
            sp_spec_take_round(e, r, en);
            if (!sp_request_ending(r)) sp_checkpoint_maybe_emit(e, r);
        } else if (sp_request_take_token(e, r, en->logits, &r->reason, &st,
                                         &r->error)) {
            sp_request_set_state(r, SP_REQ_ENDING);
            if (st) r->reason = SPINDLE_STOP_ERROR;
        } else {
            sp_checkpoint_maybe_emit(e, r);
        }
    }
}

#ifdef SPINDLE_INVARIANTS
/* The test builds' assertion after every step (SQLite's sanity walkers):
 * the model's KV pool with its prefix index, boundary states and disk
 * tier, and every running request's sequence state. A violation is a bug
 * in the library: it stops the process there, where the state is still
 * the one that broke, rather than some steps later. */
static void check_invariants(spindle_engine *e) {
    spindle_error err = {0};
    spindle_status st = e->model->kv_pool
                            ? sp_kv_pool_check(e->model->kv_pool, &err)
                            : SPINDLE_OK;
    for (int i = 0; i < e->n_running && !st; i++)
        if (e->running[i]->seq)
            st = sp_seq_state_check(e->running[i]->seq->state, &err);
    if (st) {
        fprintf(stderr, "spindle: invariant violated after an engine step: "
                        "%s\n", err.message);
        abort();
    }
}
#endif

int sp_engine_run_step(spindle_engine *e) {
    take_incoming(e);
    retire_running(e, true);
    drop_cancelled_waiting(e);
    int n = plan_batch(e);
    if (n > 0) {
        spindle_error err;
        sp_mask_prefetch_start(e, n);
        double t0 = sp_engine_now();
        if (spindle_forward(e->model, e->entries, n, &err)) forward_each(e, n);
        else sp_spec_observe_step(e, n, sp_engine_now() - t0);
        sp_mask_prefetch_wait(e);
        take_results(e, n);
        retire_running(e, false);
    }
#ifdef SPINDLE_INVARIANTS
    check_invariants(e);
#endif
    pthread_mutex_lock(&e->lock);
    e->n_waiting_seen = e->n_waiting;
    e->n_running_seen = e->n_running;
    for (int i = 0; i < e->n_running; i++) e->running[i]->running_seen = true;
    int active = e->n_incoming + e->n_waiting + e->n_running;
    pthread_mutex_unlock(&e->lock);
    return active;
}

void sp_engine_cancel_all(spindle_engine *e) {
    take_incoming(e);
    for (int i = 0; i < e->n_running; i++) {
        sp_request_set_state(e->running[i], SP_REQ_ENDING);
        e->running[i]->reason = SPINDLE_STOP_CANCELLED;
    }
    retire_running(e, false);
    for (sp_request *r = e->wait_head; r; r = e->wait_head) {
        e->wait_head = r->next;
        sp_engine_finish(e, r, SPINDLE_STOP_CANCELLED, SPINDLE_OK, NULL);
    }
    e->wait_tail = NULL;
    e->n_waiting = 0;
}
