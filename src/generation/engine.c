/* The step engine's public calls: creation and shutdown, the locked queue
 * that submit and cancel use from any thread, the background thread, and
 * the end of a request. The scheduler step itself is engine_sched.c. */
#include "generation/engine.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "generation/speculative.h"

double sp_engine_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool sp_request_transition_allowed(sp_request_state from, sp_request_state to) {
    static const unsigned next[] = {
        [SP_REQ_NEW] = 1u << SP_REQ_QUEUED,
        [SP_REQ_QUEUED] = 1u << SP_REQ_WAITING,
        [SP_REQ_WAITING] = 1u << SP_REQ_RUNNING | 1u << SP_REQ_FINISHED,
        [SP_REQ_RUNNING] = 1u << SP_REQ_ENDING,
        [SP_REQ_ENDING] = 1u << SP_REQ_FINISHED,
        [SP_REQ_FINISHED] = 0,
    };
    return from >= SP_REQ_NEW && from <= SP_REQ_FINISHED && (next[from] >> to & 1u);
}

spindle_engine_options spindle_engine_defaults(void) {
    return (spindle_engine_options){.max_seqs = 16, .max_batch_tokens = 512,
                                    .background = false};
}

/* The background thread: step while there is work, sleep on `wake` when
 * idle, and on free end what is left. */
static void *engine_thread(void *arg) {
    spindle_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->stopping && !e->in_head && !e->kick &&
               e->n_running == 0 && e->n_waiting == 0)
            pthread_cond_wait(&e->wake, &e->lock);
        if (e->stopping) break;
        e->kick = false;
        pthread_mutex_unlock(&e->lock);
        sp_engine_run_step(e);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    sp_engine_cancel_all(e);
    return NULL;
}

static spindle_status check_options(const spindle_engine_options *o,
                                    spindle_error *err) {
    if (o->max_seqs < 1 || o->max_seqs > 4096)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "max_seqs must be in [1, 4096], got %d", o->max_seqs);
    if (o->max_batch_tokens < o->max_seqs || o->max_batch_tokens > (1 << 20))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "max_batch_tokens must be in [max_seqs (%d), %d], "
                       "got %d", o->max_seqs, 1 << 20, o->max_batch_tokens);
    return SPINDLE_OK;
}

void sp_engine_set_testing(spindle_engine *e, const sp_engine_testing *t) {
    e->testing = *t;
}

spindle_status spindle_engine_new(spindle_model *model,
                                  const spindle_engine_options *options,
                                  spindle_engine **out, spindle_error *err) {
    sp_error_clear(err);
    if (!model || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    spindle_engine_options o = options ? *options : spindle_engine_defaults();
    if (o.max_seqs == 0) o.max_seqs = 16;
    if (o.max_batch_tokens == 0)
        o.max_batch_tokens = o.max_seqs > 512 ? o.max_seqs : 512;
    spindle_status st = check_options(&o, err);
    if (st) return st;
    spindle_engine *e = calloc(1, sizeof *e);
    if (!e) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    e->model = model;
    e->vocab = spindle_model_vocab_size(model);
    e->context = spindle_model_context_length(model);
    e->max_seqs = o.max_seqs;
    e->max_batch_tokens = o.max_batch_tokens;
    e->background = o.background;
    e->no_prefix_cache = o.no_prefix_cache;
    e->mask_overlap = sp_mask_overlap_wanted(model);
    e->next_id = 1;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    size_t n = (size_t)o.max_seqs;
    e->running = calloc(n, sizeof *e->running);
    e->entries = calloc(n, sizeof *e->entries);
    e->entry_req = calloc(n, sizeof *e->entry_req);
    e->logits = malloc(n * (size_t)e->vocab * sizeof *e->logits);
    e->raw = malloc((size_t)e->vocab * sizeof *e->raw);
    if (!e->running || !e->entries || !e->entry_req || !e->logits || !e->raw) {
        spindle_engine_free(e);
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "out of memory for %d logits rows of %d", o.max_seqs,
                       e->vocab);
    }
    if (e->background) {
        if (pthread_create(&e->thread, NULL, engine_thread, e) != 0) {
            spindle_engine_free(e);
            return sp_fail(err, SPINDLE_ERR_MEMORY, "cannot start the engine thread");
        }
        e->thread_started = true;
    }
    *out = e;
    return SPINDLE_OK;
}

void spindle_engine_free(spindle_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_broadcast(&e->wake);
    pthread_mutex_unlock(&e->lock);
    if (e->thread_started) pthread_join(e->thread, NULL);
    else sp_engine_cancel_all(e);
    sp_mask_prefetch_free(e);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->lock);
    free(e->live);
    free(e->running);
    free(e->entries);
    free(e->entry_req);
    free(e->logits);
    free(e->raw);
    sp_spec_engine_free(e->spec);
    free(e);
}

/* (lock) Whether an unfinished request holds `seq`. */
static bool seq_in_use(const spindle_engine *e, const spindle_seq *seq) {
    for (int i = 0; seq && i < e->n_live; i++)
        if (e->live[i]->seq == seq) return true;
    return false;
}

static spindle_status enqueue(spindle_engine *e, sp_request *r,
                              spindle_error *err) {
    if (e->stopping)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "the engine is shutting down");
    if (seq_in_use(e, r->seq))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the sequence belongs to an unfinished request");
    if (e->n_live == e->cap_live) {
        int cap = e->cap_live ? 2 * e->cap_live : 64;
        sp_request **grown = realloc(e->live, (size_t)cap * sizeof *grown);
        if (!grown) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        e->live = grown;
        e->cap_live = cap;
    }
    e->live[e->n_live++] = r;
    sp_request_set_state(r, SP_REQ_QUEUED);
    r->id = e->next_id++;
    r->t_submit = sp_engine_now();
    if (e->in_tail) e->in_tail->next = r;
    else e->in_head = r;
    e->in_tail = r;
    e->n_incoming++;
    pthread_cond_signal(&e->wake);
    return SPINDLE_OK;
}

spindle_status spindle_engine_submit(spindle_engine *e,
                                     const spindle_request *request,
                                     spindle_request_id *id,
                                     spindle_error *err) {
    sp_error_clear(err);
    if (id) *id = 0;
    if (!e || !request) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    sp_request *r;
    spindle_status st = sp_request_new(e, request, &r, err);
    if (!st && (st = sp_engine_size_request(e, r, err))) sp_request_free(r);
    if (st) return st;
    pthread_mutex_lock(&e->lock);
    st = enqueue(e, r, err);
    spindle_request_id got = r->id;
    pthread_mutex_unlock(&e->lock);
    if (st) {
        sp_request_free(r);
        return st;
    }
    if (id) *id = got;
    return SPINDLE_OK;
}

bool spindle_engine_cancel(spindle_engine *e, spindle_request_id id) {
    if (!e) return false;
    bool found = false;
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_live && !found; i++)
        if (e->live[i]->id == id) {
            atomic_store(&e->live[i]->cancelled, true);
            found = true;
        }
    if (found) {
        e->kick = true;
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    return found;
}

void spindle_engine_counts(spindle_engine *e, int *queued, int *running) {
    int q = 0, r = 0;
    if (e) {
        pthread_mutex_lock(&e->lock);
        q = e->n_incoming + e->n_waiting_seen;
        r = e->n_running_seen;
        pthread_mutex_unlock(&e->lock);
    }
    if (queued) *queued = q;
    if (running) *running = r;
}

bool spindle_engine_is_running(spindle_engine *e, spindle_request_id id) {
    bool running = false;
    if (!e) return false;
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_live; i++)
        if (e->live[i]->id == id) {
            running = e->live[i]->running_seen;
            break;
        }
    pthread_mutex_unlock(&e->lock);
    return running;
}

spindle_status spindle_engine_step(spindle_engine *e, int *active,
                                   spindle_error *err) {
    sp_error_clear(err);
    if (active) *active = 0;
    if (!e) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL engine");
    if (e->background)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the engine steps on its own thread (background mode)");
    int n = sp_engine_run_step(e);
    if (active) *active = n;
    return SPINDLE_OK;
}

static void fill_stats(const sp_request *r, double now,
                       spindle_request_stats *s) {
    memset(s, 0, sizeof *s);
    s->prompt_tokens = r->n_prompt;
    s->cached_tokens = r->cached_tokens;
    s->generated_tokens = r->n_generated;
    s->total_seconds = now - r->t_submit;
    if (r->t_first_chunk > 0) s->queue_seconds = r->t_first_chunk - r->t_submit;
    if (r->n_generated > 0) {
        s->ttft_seconds = r->t_first_token - r->t_submit;
        s->prefill_seconds = r->t_first_token - r->t_first_chunk;
        s->decode_seconds = now - r->t_first_token;
    } else if (r->t_first_chunk > 0) {
        s->prefill_seconds = now - r->t_first_chunk;
    }
    if (s->prefill_seconds > 0 && r->prefilled == r->n_prompt)
        s->prefill_tps = r->n_prompt / s->prefill_seconds;
    if (r->n_generated > 1 && s->decode_seconds > 0)
        s->decode_tps = (r->n_generated - 1) / s->decode_seconds;
    sp_spec_stats(r, &s->spec);
}

void sp_engine_finish(spindle_engine *e, sp_request *r,
                      spindle_stop_reason reason, spindle_status status,
                      const char *error) {
    sp_request_set_state(r, SP_REQ_FINISHED);
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_live; i++)
        if (e->live[i] == r) {
            e->live[i] = e->live[--e->n_live];
            break;
        }
    pthread_mutex_unlock(&e->lock);
    if (r->on_finish) {
        spindle_request_result res = {
            .stop_reason = reason, .status = status,
            .error = error ? error : "", .tokens = r->tokens + r->n_prompt,
            .n_tokens = r->n_generated};
        fill_stats(r, sp_engine_now(), &res.stats);
        r->on_finish(r->id, &res, r->user);
    }
    sp_request_free(r);
}
