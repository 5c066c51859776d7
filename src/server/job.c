/* One generation request from its parsed body to its last byte: the prompt
 * (chat template or text or ids), admission (the queue bound), the engine
 * requests (one per choice) and their callbacks; job_output.c formats the
 * response, whole or streamed.
 *
 * Two threads touch a job (job.h). The connection's thread (MHD runs one
 * per connection) waits on the engine's signal 50 ms at a time so that it
 * notices a client that has gone (then it cancels every choice). A job is
 * freed only after each submitted choice's on_finish has run.
 *
 * With n > 1 choices the first is submitted alone; once it has its first
 * token its prompt's full KV blocks are in the prefix index, and the other
 * choices, submitted then, map them instead of computing the prompt again,
 * and decode in the same batches. Choice i samples with seed + i. */
#include "base/check.h"
#include "server/job.h"
#include "server/diffusion_job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A job's life. j->state only moves along these transitions, each made
 * by the function named (job_set_state checks it in debug and sanitizer
 * builds):
 *
 *   NEW       -> ADMITTED   admit(): counted in the server's in_flight and
 *                           on its list (else 429)
 *   ADMITTED  -> SUBMITTED  job_submit(): the first choice handed to the
 *                           engine, whose callbacks may run from then on
 *   SUBMITTED -> FINISHED   choice_done(), when the last choice is done:
 *                           on_finish() on the engine's thread (a
 *                           diffusion model's: its own thread), or a choice
 *                           the engine refused or that was never submitted
 *                           (no callback runs for those)
 *   ADMITTED  -> FINISHED   job_submit(): refused before the engine (the
 *                           draft length, the adapter, the detokenizer)
 *   NEW       -> FINISHED   job_release(): admission refused
 *
 * Until SUBMITTED only the connection's thread knows the job; from then
 * on the state is read and written under j->mu. A job is freed only in
 * FINISHED (job_release waits for it). */

static bool job_transition_allowed(job_state from, job_state to) {
    switch (to) {
    case JOB_ADMITTED: return from == JOB_NEW;
    case JOB_SUBMITTED: return from == JOB_ADMITTED;
    case JOB_FINISHED: return from != JOB_FINISHED;
    default: return false;
    }
}

static void job_set_state(sp_job *j, job_state to) {
    SP_DEBUG_CHECK(job_transition_allowed(j->state, to));
    j->state = to;
}

static bool finished(const sp_job *j) { return j->state == JOB_FINISHED; }

bool sp_job_finished(const sp_job *j) { return finished(j); }

/* Choice c will report nothing more (under j->mu): the job finishes with
 * its last choice. */
static void choice_done(sp_job *j, sp_choice *c) {
    c->finished = true;
    for (int i = 0; i < j->n_choices; i++)
        if (!j->choices[i].finished) return;
    job_set_state(j, JOB_FINISHED);
}

/* ------------------------------------------------------- engine callbacks */

/* Append a detokenized piece; a decoded U+0000 becomes U+FFFD, since the
 * JSON strings are built from NUL-terminated text. */
static bool feed_text(sp_choice *c, const char *piece, size_t len) {
    bool stopped = false;
    size_t at = 0;
    while (at < len && !stopped) {
        const char *nul = memchr(piece + at, '\0', len - at);
        size_t n = nul ? (size_t)(nul - (piece + at)) : len - at;
        stopped = sp_stop_feed(&c->stop, piece + at, n, &c->text);
        if (nul && !stopped) stopped = sp_stop_feed(&c->stop, "\xEF\xBF\xBD", 3, &c->text);
        at += n + (nul ? 1 : 0);
    }
    return stopped;
}

static void keep_logprob(sp_choice *c, const spindle_token_info *info) {
    if (c->n_logprobs == c->cap_logprobs) {
        int cap = c->cap_logprobs ? c->cap_logprobs * 2 : 16;
        sp_api_logprob *p = realloc(c->logprobs, (size_t)cap * sizeof *p);
        if (!p) return;   /* the text goes on; this token's logprob is lost */
        c->logprobs = p;
        c->cap_logprobs = cap;
    }
    sp_api_logprob *lp = &c->logprobs[c->n_logprobs++];
    lp->token = info->token;
    lp->logprob = info->logprob;
    /* Alternatives a grammar or bias masked out (-inf) could never have
     * been sampled: they are left out (OpenAI never sends a null logprob). */
    lp->n_top = 0;
    for (int k = 0; k < info->n_top && k < SPINDLE_MAX_TOP_LOGPROBS; k++)
        if (isfinite(info->top[k].logprob)) lp->top[lp->n_top++] = info->top[k];
}

/* Chat logprobs cover the tokens of the reply; the end-of-turn token that
 * stops it is not part of it (as in OpenAI's and vLLM's replies). */
static bool wants_logprob(const sp_job *j, int32_t token) {
    return j->req.logprobs &&
           !(j->req.kind == SP_API_CHAT && sp_server_is_end_token(j->srv, token));
}

bool sp_job_on_token(spindle_request_id id, const spindle_token_info *info, void *user) {
    sp_choice *c = user;
    sp_job *j = c->job;
    (void)id;
    pthread_mutex_lock(&j->mu);
    c->n_tokens++;
    if (wants_logprob(j, info->token)) keep_logprob(c, info);
    const char *piece = NULL;
    bool stopped = false;
    int32_t token = sp_job_reply_token(&c->reply, info->token, &stopped);
    if (!sp_job_reply_hides(j->srv, &c->reply, token) &&
        spindle_detokenizer_push(c->detok, token, &piece, NULL) == SPINDLE_OK)
        stopped |= feed_text(c, piece, spindle_detokenizer_piece_len(c->detok));
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return !stopped;
}

void sp_job_on_finish(spindle_request_id id, const spindle_request_result *r, void *user) {
    sp_choice *c = user;
    sp_job *j = c->job;
    (void)id;
    sp_metrics_count_generation(j->srv->metrics, &r->stats, r->n_tokens);
    pthread_mutex_lock(&j->mu);
    const char *piece = NULL;
    if (!c->stop.matched &&
        spindle_detokenizer_flush(c->detok, &piece, NULL) == SPINDLE_OK)
        feed_text(c, piece, spindle_detokenizer_piece_len(c->detok));
    sp_stop_flush(&c->stop, &c->text);
    sp_durable_end(&j->durable, r->stop_reason);
    if (j->seq && r->stop_reason != SPINDLE_STOP_ERROR && r->stop_reason != SPINDLE_STOP_CANCELLED)
        sp_slot_end(j->srv, j->req.id_slot, j->seq, j->prompt, j->n_prompt, r->tokens, r->n_tokens,
                    &j->slot_adapter);
    c->stop_reason = r->stop_reason;
    c->status = r->status;
    snprintf(c->error, sizeof c->error, "%s", r->error ? r->error : "");
    c->n_generated = r->n_tokens;
    c->cached_tokens = r->stats.cached_tokens;
    choice_done(j, c);
    /* Broadcast before unlocking: the connection's thread may free the job
     * as soon as it sees `finished`. */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* ------------------------------------------------------------ job life */

static sp_job *job_new(sp_server *s, struct MHD_Connection *c, sp_api_request *req,
                       sp_job_durable *durable) {
    const int n = req->n_choices > 0 ? req->n_choices : 1;
    sp_job *j = calloc(1, sizeof *j);
    sp_choice *choices = calloc((size_t)n, sizeof *choices);
    if (!j || !choices) {
        free(j);
        free(choices);
        return NULL;
    }
    j->choices = choices;
    j->n_choices = n;
    j->rest_submitted = n == 1;
    j->durable = *durable;    /* the job owns it now */
    memset(durable, 0, sizeof *durable);
    j->srv = s;
    j->conn = c;
    j->req = *req;            /* the job owns the request's memory now */
    memset(req, 0, sizeof *req);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    for (int i = 0; i < j->n_choices; i++) {
        j->choices[i].job = j;
        j->choices[i].index = i;
        sp_stop_init(&j->choices[i].stop, j->req.stop, j->req.n_stop);
    }
    uint64_t serial = atomic_fetch_add(s->ids, 1);
    snprintf(j->id_text, sizeof j->id_text, "%s%llx%06llx",
             j->req.dialect == SP_API_ANTHROPIC   ? "msg_"
             : j->req.dialect == SP_API_RESPONSES ? "resp_"
             : j->req.kind == SP_API_CHAT         ? "chatcmpl-"
                                                : "cmpl-",
             (unsigned long long)s->started, (unsigned long long)serial);
    if (j->durable.resume_id)   /* a resumed request keeps its id */
        snprintf(j->id_text, sizeof j->id_text, "%s", j->durable.resume_id);
    j->head = (sp_api_head){.kind = j->req.kind, .id = j->id_text,
                            .created = (long long)time(NULL),
                            .model = j->req.model ? j->req.model : s->model_names[0]};
    return j;
}

/* Ask the engine to stop every submitted choice (once). */
static void job_cancel(sp_job *j) {
    pthread_mutex_lock(&j->mu);   /* a diffusion job's thread reads it */
    const bool already = j->cancelled;
    j->cancelled = true;
    pthread_mutex_unlock(&j->mu);
    if (already) return;
    for (int i = 0; i < j->n_choices; i++)
        if (j->choices[i].id) spindle_engine_cancel(j->srv->engine, j->choices[i].id);
}

/* The choices not submitted yet never will be (the connection's thread
 * submits them; it calls this). */
static void job_abandon_unsubmitted(sp_job *j) {
    pthread_mutex_lock(&j->mu);
    for (int i = 0; j->state == JOB_SUBMITTED && i < j->n_choices; i++) {
        sp_choice *c = &j->choices[i];
        if (c->id || c->finished) continue;
        c->stop_reason = SPINDLE_STOP_CANCELLED;
        choice_done(j, c);
    }
    pthread_mutex_unlock(&j->mu);
}

/* Wait for on_finish (cancelling first) unless the job never reached the
 * engine, leave the server's list, free. */
static void job_release(sp_job *j) {
    job_abandon_unsubmitted(j);
    pthread_mutex_lock(&j->mu);
    const bool admitted = j->state != JOB_NEW;   /* on the server's list */
    if (j->state == JOB_NEW) job_set_state(j, JOB_FINISHED);
    if (!finished(j)) {
        pthread_mutex_unlock(&j->mu);
        job_cancel(j);
        pthread_mutex_lock(&j->mu);
        while (!finished(j)) pthread_cond_wait(&j->cv, &j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    sp_server *s = j->srv;
    pthread_mutex_lock(&s->lock);
    for (sp_job **p = &s->jobs; admitted && *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; j->choices && i < j->n_choices; i++) {
        sp_choice *c = &j->choices[i];
        spindle_detokenizer_free(c->detok);
        sp_job_reply_free(&c->reply);
        sp_stop_free(&c->stop);
        sp_strbuf_free(&c->text);
        free(c->logprobs);
    }
    free(j->choices);
    sp_durable_free(&j->durable);
    spindle_seq_free(j->seq);
    sp_strbuf_free(&j->out);
    sp_responses_stream_free(&j->responses);
    sp_image_prompt_free(&j->images);
    spindle_free(j->prompt);
    sp_api_request_free(&j->req);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
    /* Counted out only now: the job's sequence and grammar belong to the
     * model, which a server of several models may free once nothing of
     * its is in flight. */
    pthread_mutex_lock(&s->lock);
    if (admitted) s->in_flight--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
}

static bool listed(const sp_strbuf *list, const char *name, size_t n) {
    for (const char *p = list->p; p && *p;) {
        size_t m = strcspn(p, ",");
        if (m == n && !strncmp(p, name, n)) return true;
        p += m + (p[m] == ',');
    }
    return false;
}

/* Each name of the comma-separated `names` into `list`, once. */
static void add_names(sp_strbuf *list, const char *names) {
    for (const char *name = names; *name;) {
        size_t n = strcspn(name, ",");
        if (n && !listed(list, name, n))
            sp_strbuf_printf(list, "%s%.*s", list->len ? "," : "", (int)n, name);
        name += n + (name[n] == ',');
    }
}

void sp_jobs_adapter_names(sp_server *s, sp_strbuf *running, sp_strbuf *waiting) {
    pthread_mutex_lock(&s->lock);
    for (sp_job *j = s->jobs; j; j = j->next) {
        if (!j->req.adapter_name) continue;
        pthread_mutex_lock(&j->mu);
        bool done = finished(j);
        pthread_mutex_unlock(&j->mu);
        if (done) continue;   /* only its reply is left to send */
        /* The engine's own view, so that the lists agree with
         * vllm:num_requests_running / _waiting. */
        bool in_engine = false;
        for (int i = 0; i < j->n_choices && !in_engine; i++)
            in_engine = j->choices[i].id &&
                        spindle_engine_is_running(s->engine, j->choices[i].id);
        add_names(in_engine ? running : waiting, j->req.adapter_name);
    }
    pthread_mutex_unlock(&s->lock);
}

void sp_cancel_all_jobs(sp_server *s) {
    pthread_mutex_lock(&s->lock);
    s->cancelling = true;
    for (sp_job *j = s->jobs; j; j = j->next)
        for (int i = 0; i < j->n_choices; i++)
            if (j->choices[i].id) spindle_engine_cancel(s->engine, j->choices[i].id);
    pthread_mutex_unlock(&s->lock);
}


static struct timespec after_ms(long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

static bool passed(const struct timespec *t) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* The socket is looked at every 50 ms, however often the engine's tokens
 * wake the wait. */
job_wait_result sp_job_wait_for(sp_job *j, sp_job_ready_fn ready, long quiet_ms) {
    pthread_mutex_lock(&j->mu);
    struct timespec next_check = after_ms(50), quiet_end = after_ms(quiet_ms);
    while (!ready(j)) {
        pthread_cond_timedwait(&j->cv, &j->mu, &next_check);
        if (ready(j) || !passed(&next_check)) continue;
        if (!sp_client_connected(j->conn)) {
            pthread_mutex_unlock(&j->mu);
            job_cancel(j);
            return JOB_GONE;
        }
        if (quiet_ms > 0 && passed(&quiet_end)) {
            pthread_mutex_unlock(&j->mu);
            return JOB_QUIET;
        }
        next_check = after_ms(50);
    }
    pthread_mutex_unlock(&j->mu);
    return JOB_READY;
}

static bool job_wait(sp_job *j, sp_job_ready_fn ready) {
    return sp_job_wait_for(j, ready, 0) == JOB_READY;
}

static void stream_free(void *cls) { job_release(cls); }

/* Join the jobs in flight, unless the queue is full (429). */
static bool admit(sp_server *s, sp_job *j, sp_api_error *e) {
    pthread_mutex_lock(&s->lock);
    bool room = s->in_flight < s->opts.parallel + s->opts.queue_size;
    if (room) {
        job_set_state(j, JOB_ADMITTED);
        s->in_flight++;
        j->next = s->jobs;
        s->jobs = j;
    }
    pthread_mutex_unlock(&s->lock);
    if (!room)
        sp_api_fail(e, 429, "rate_limit_error", NULL, "queue_full",
                    "the server is busy (%d requests running or queued); retry later",
                    s->opts.parallel + s->opts.queue_size);
    return room;
}

static uint64_t fresh_seed(sp_server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                 (atomic_load(s->ids) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    return x * 0xBF58476D1CE4E5B9ull;
}

/* A resume: the tokens the checkpoint's run already reported go through
 * the detokenizer and the stop matcher as they did then (which rebuilds
 * both), and their text is marked sent. */
static void replay_generated(sp_job *j) {
    const spindle_checkpoint *ck = j->durable.resume;
    const int32_t *t = spindle_checkpoint_tokens(ck) + spindle_checkpoint_prompt_tokens(ck);
    const char *piece = NULL;
    sp_choice *c = &j->choices[0];   /* a resume has one choice */
    for (int i = 0; i < spindle_checkpoint_generated(ck) && !c->stop.matched; i++)
        if (spindle_detokenizer_push(c->detok, t[i], &piece, NULL) == SPINDLE_OK)
            feed_text(c, piece, spindle_detokenizer_piece_len(c->detok));
    j->text_from = c->text_sent = c->text.len;
}

/* The server's speculative decoding (--spec) with the request's K and
 * minimum draft; without --spec the fields are ignored, as mlx_lm.server
 * ignores num_draft_tokens without a draft model. False: a 400 in *e. */
static bool job_spec(sp_job *j, sp_api_error *e) {
    spindle_spec_params *p = &j->req.gen.spec;
    *p = j->srv->opts.spec;
    if (p->mode == SPINDLE_SPEC_NONE) return true;
    if (j->req.draft_tokens == 0) {
        p->mode = SPINDLE_SPEC_NONE;
        return true;
    }
    if (j->req.draft_tokens > 0) p->num_draft_tokens = j->req.draft_tokens;
    if (j->req.min_draft_tokens >= 0) p->min_draft_tokens = j->req.min_draft_tokens;
    int k = p->num_draft_tokens ? p->num_draft_tokens : SPINDLE_DEFAULT_DRAFT_TOKENS;
    if (p->min_draft_tokens > k)
        return sp_api_bad(e, "speculative.n_min",
                          "'speculative.n_min' (%d) exceeds the server's draft length %d",
                          p->min_draft_tokens, k);
    return true;
}

/* Hand choice c to the engine with the request's parameters and its own
 * seed (the request's + its index); its id under the server's lock, as
 * sp_cancel_all_jobs reads it. (The callbacks may run before it is set:
 * they find the choice via `user`.) */
static spindle_status choice_submit(sp_job *j, sp_choice *c, spindle_error *err) {
    c->gen = j->req.gen;
    c->gen.sampler.seed = j->req.gen.sampler.seed + (uint64_t)c->index;
    spindle_request rq = {.prompt = j->prompt + j->slot_reused,
                          .n_prompt = j->n_prompt - j->slot_reused, .seq = j->seq,
                          .params = &c->gen, .top_logprobs = j->req.top_logprobs,
                          .on_token = sp_job_on_token, .on_finish = sp_job_on_finish, .user = c};
    if (j->images.n_spans) {   /* no slot: image_prompt refuses id_slot */
        rq.prompt = NULL;
        rq.n_prompt = 0;
        rq.spans = j->images.spans;
        rq.n_spans = j->images.n_spans;
    }
    spindle_request_id id = 0;
    spindle_status st = spindle_engine_submit(j->srv->engine, &rq, &id, err);
    if (!st) {
        pthread_mutex_lock(&j->srv->lock);
        c->id = id;
        const bool cancel = j->srv->cancelling;
        pthread_mutex_unlock(&j->srv->lock);
        /* sp_cancel_all_jobs ran before the id was set (a later choice
         * submitted while the shutdown cancelled the first). */
        if (cancel) spindle_engine_cancel(j->srv->engine, id);
    }
    return st;
}

/* Submit the first choice to the engine; on failure nothing runs and *e
 * says why. */
static bool job_submit(sp_job *j, sp_api_error *e) {
    sp_server *s = j->srv;
    spindle_error err = {0};
    spindle_status st = SPINDLE_OK;
    for (int i = 0; !st && i < j->n_choices; i++)
        st = spindle_detokenizer_new(s->tok, !j->choices[i].reply.keep_special,
                                     &j->choices[i].detok, &err);
    if (!st && j->durable.resume) replay_generated(j);
    if (!j->req.seed_given) j->req.gen.sampler.seed = fresh_seed(s);
    /* A checkpoint continues one sequence (n > 1 has none) of token ids
     * (a prompt with images has spans). */
    if (j->n_choices == 1 && !j->images.n_spans) sp_durable_arm(s, &j->durable, j->id_text, &j->req, &j->req.gen);
    j->req.gen.stop_ids = s->stop_ids;
    j->req.gen.n_stop_ids = s->n_stop_ids;
    if (!st && !job_spec(j, e)) {
        job_set_state(j, JOB_FINISHED);
        return false;
    }
    if (!st && j->req.id_slot >= 0) st = spindle_seq_new(s->model, &j->seq, &err);
    /* The adapter first: a slot's state is reused only under its own. */
    if (!st && !sp_adapters_select_lock(s, &j->req, e)) {
        job_set_state(j, JOB_FINISHED);
        return false;
    }
    if (!st)
        j->slot_adapter.n = spindle_adapter_key(j->req.gen.adapter, j->req.gen.adapter_scale,
                                                j->slot_adapter.key);
    if (!st && !j->durable.resume)
        j->slot_reused = sp_slot_begin(s, j->req.id_slot, j->prompt, j->n_prompt, &j->slot_adapter,
                                       j->seq);
    if (!st) {
        job_set_state(j, JOB_SUBMITTED);
        st = s->diffusion ? sp_diffusion_job_start(j, &err)
                          : choice_submit(j, &j->choices[0], &err);
        sp_adapters_unlock(s);
    }
    if (!st) return true;
    job_set_state(j, JOB_FINISHED);   /* no callback will run */
    /* A resume the engine refuses at submit (a checkpoint this server
     * cannot continue, or a request that does not match it) is the
     * client's to fix, and its checkpoint stays. */
    sp_api_error_from_status(e, st, j->durable.resume ? "resume_id" : NULL, err.message);
    if (st == SPINDLE_ERR_LIMIT) snprintf(e->code, sizeof e->code, "context_length_exceeded");
    return false;
}

static bool first_choice_started(const sp_job *j) {
    return finished(j) || j->choices[0].n_tokens > 0 || j->choices[0].finished;
}

/* The other choices, once the first has its first token: its prompt's
 * full KV blocks are in the prefix index by then. The adapter is looked up
 * again under the adapters' lock (it may have been unloaded meanwhile); a
 * request's own stack of adapters lives as long as the job. A choice the
 * engine refuses ends the job with its error. */
job_wait_result sp_job_submit_rest(sp_job *j, long quiet_ms) {
    if (j->rest_submitted) return JOB_READY;
    job_wait_result w = sp_job_wait_for(j, first_choice_started, quiet_ms);
    if (w != JOB_READY) return w;
    j->rest_submitted = true;
    sp_server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    spindle_stop_reason first = j->choices[0].finished ? j->choices[0].stop_reason
                                                       : SPINDLE_STOP_LENGTH;
    pthread_mutex_unlock(&j->mu);
    /* The first choice failed, or the shutdown cancelled it: the others
     * would fail alike, or outlive the shutdown's cancellation. */
    if (first == SPINDLE_STOP_ERROR || first == SPINDLE_STOP_CANCELLED) {
        job_abandon_unsubmitted(j);
        return JOB_READY;
    }
    sp_api_error e;
    bool locked = j->req.stacked_adapter ? (pthread_mutex_lock(&s->adapters.lock), true)
                                         : sp_adapters_select_lock(s, &j->req, &e);
    for (int i = 1; i < j->n_choices; i++) {
        sp_choice *c = &j->choices[i];
        spindle_error err = {0};
        spindle_status st = locked ? choice_submit(j, c, &err) : SPINDLE_ERR_ARGUMENT;
        if (!st) continue;
        pthread_mutex_lock(&j->mu);
        c->stop_reason = SPINDLE_STOP_ERROR;
        c->status = st;
        snprintf(c->error, sizeof c->error, "%.200s", locked ? err.message : e.message);
        choice_done(j, c);
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    if (locked) sp_adapters_unlock(s);
    return JOB_READY;
}

static bool phase_allows(sp_server *s, sp_api_error *e) {
    int phase = atomic_load(&s->phase);
    if (phase == SP_PHASE_READY) return true;
    return sp_api_fail(e, 503, "server_error", NULL, NULL,
                       phase == SP_PHASE_LOADING ? "the model is still loading"
                                                 : "the server is shutting down");
}

/* ------------------------------------------------------------ the route
 * sp_handle_generation takes a request through named stages, each false
 * with *e set where the request ends; what they build is one gen_setup,
 * freed on one path (what the job took over is NULL there by then). */

typedef struct gen_setup {
    sp_api_request req;        /* the body, parsed once */
    sp_job_durable durable;    /* resume_id's checkpoint */
    int32_t *ids;              /* the prompt */
    int n;
    char *prompt_text;         /* the rendered chat prompt */
    sp_image_prompt images;    /* its spans, with images */
} gen_setup;

static void gen_setup_free(gen_setup *g) {
    sp_durable_free(&g->durable);
    sp_api_request_free(&g->req);
    spindle_free(g->ids);
    spindle_free(g->prompt_text);
    sp_image_prompt_free(&g->images);
}

/* The server is ready, and its model generates. */
static bool gen_accepting(sp_server *s, sp_api_error *e) {
    if (!phase_allows(s, e)) return false;
    if (!s->engine)
        return sp_api_bad(e, "model", "the model is an embedding encoder: it serves "
                          "/v1/embeddings only");
    return true;
}

/* previous_response_id's conversation, from the server's store. */
static char *kept_history(void *ctx, const char *id) {
    return sp_responses_store_history(&((sp_server *)ctx)->responses, id);
}

/* The body into g->req. `model` may name a mounted adapter: adapters.c
 * checks it (404). */
static bool gen_parse(sp_server *s, const sp_http_call *call, gen_setup *g,
                      sp_api_error *e) {
    sp_api_kind kind = call->route == SP_ROUTE_CHAT ? SP_API_CHAT : SP_API_COMPLETION;
    sp_api_limits limits = s->limits;
    limits.n_model_names = 0;
    if (call->route == SP_ROUTE_MESSAGES)
        return sp_api_parse_anthropic(call->body, call->len, &limits, false, &g->req, e);
    if (call->route == SP_ROUTE_RESPONSES)
        return sp_api_parse_responses(call->body, call->len, &limits, kept_history, s, &g->req,
                                      e);
    return sp_api_parse_generation(kind, call->body, call->len, &limits, &g->req, e);
}

/* The checkpoint a resume names, the grammar, the prompt ids (the
 * checkpoint's, or the body's rendered and tokenized), then the tool-call
 * grammar, which depends on the rendered prompt. */
static bool gen_prompt(sp_server *s, gen_setup *g, sp_api_error *e) {
    if (!sp_durable_open(s, &g->req, &g->durable, e) || !sp_server_compile_grammar(s, &g->req, e))
        return false;
    if (g->durable.resume) {   /* the checkpoint's prompt, not the body's */
        if (!sp_durable_prompt(&g->durable, &g->ids, &g->n))
            return sp_api_fail(e, 503, "server_error", NULL, NULL, "out of memory");
    } else if (!sp_server_prompt_ids(s, &g->req, &g->ids, &g->n, &g->prompt_text, &g->images,
                                           e)) {
        return false;
    }
    return sp_server_compile_tool_grammar(s, &g->req, sp_reply_opens_think(g->prompt_text), e);
}

/* The job, which takes over the request, the checkpoint and the prompt. */
static sp_job *gen_job(sp_server *s, struct MHD_Connection *c, gen_setup *g, sp_api_error *e) {
    sp_job *j = job_new(s, c, &g->req, &g->durable);
    if (!j) {
        sp_api_fail(e, 503, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    for (int i = 0; i < j->n_choices; i++)
        sp_job_reply_plan(s, &j->req, g->prompt_text, fresh_seed(s), &j->choices[i].reply);
    j->prompt = g->ids;
    j->n_prompt = g->n;
    g->ids = NULL;
    j->images = g->images;   /* its spans borrow j->prompt */
    memset(&g->images, 0, sizeof g->images);
    return j;
}

/* Admission (429), the engine, and the answer, whole or streamed. */
static enum MHD_Result gen_run(sp_job *j, sp_route route) {
    sp_server *s = j->srv;
    struct MHD_Connection *c = j->conn;
    sp_api_error e;
    if (!admit(s, j, &e) || !job_submit(j, &e)) {
        job_release(j);
        return sp_reply_error(s, c, route, &e);
    }
    /* A stream submits them from its reader, which keeps the connection
     * alive meanwhile. */
    if (j->req.stream) return sp_reply_stream(s, c, route, sp_job_stream_read, j, stream_free);
    enum MHD_Result rc = sp_job_submit_rest(j, 0) == JOB_READY && job_wait(j, finished)
                             ? sp_job_reply_whole(j)
                             : MHD_NO;
    job_release(j);
    return rc;
}

enum MHD_Result sp_handle_generation(sp_server *s, struct MHD_Connection *c,
                                     const sp_http_call *call) {
    sp_api_error e;
    gen_setup g = {0};
    sp_job *j = NULL;
    bool ok = gen_accepting(s, &e) && gen_parse(s, call, &g, &e) &&
              sp_diffusion_job_check(s, &g.req, &e) && gen_prompt(s, &g, &e) &&
              (j = gen_job(s, c, &g, &e)) != NULL;
    gen_setup_free(&g);
    return ok ? gen_run(j, call->route) : sp_reply_error(s, c, call->route, &e);
}
