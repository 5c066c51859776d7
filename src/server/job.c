/* One generation request from its parsed body to its last byte: the prompt
 * (chat template or text or ids), admission (the queue bound), the engine
 * request and its callbacks, and the response, whole or streamed.
 *
 * Two threads touch a job. The engine's thread runs on_token / on_finish:
 * they detokenize, match stop strings and append text and logprobs under
 * the job's lock, and signal. The connection's thread (MHD runs one per
 * connection) waits on that signal, 50 ms at a time so that it notices a
 * client that has gone (then it cancels the request), and formats what has
 * arrived. A job is freed only after on_finish has run. */
#include "base/check.h"
#include "server/api_anthropic.h"
#include "server/api_response.h"
#include "server/durable.h"
#include "server/slots.h"
#include "server/reply.h"
#include "server/state.h"
#include "server/stop_strings.h"

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
 *   ADMITTED  -> SUBMITTED  job_submit(): handed to the engine, whose
 *                           callbacks may run from then on
 *   SUBMITTED -> FINISHED   on_finish() on the engine's thread, or
 *                           job_submit() when the engine refused it (then
 *                           no callback runs)
 *   ADMITTED  -> FINISHED   job_submit(): refused before the engine (the
 *                           draft length, the adapter, the detokenizer)
 *   NEW       -> FINISHED   job_release(): admission refused
 *
 * Until SUBMITTED only the connection's thread knows the job; from then
 * on the state is read and written under j->mu. A job is freed only in
 * FINISHED (job_release waits for it). */
typedef enum job_state { JOB_NEW = 0, JOB_ADMITTED, JOB_SUBMITTED, JOB_FINISHED } job_state;

struct sp_job {
    sp_server *srv;
    struct MHD_Connection *conn;
    sp_job *next;                 /* the server's list of jobs in flight */
    sp_api_request req;
    int32_t *prompt;
    int n_prompt;
    spindle_request_id id;
    char id_text[48];
    sp_api_head head;
    sp_job_durable durable;       /* resume_id, --checkpoint-dir */
    size_t text_from;             /* a resume sends only the text after it */
    spindle_seq *seq;             /* the slot's sequence, NULL without one */
    int slot_reused;              /* prompt tokens the slot's state covered */
    sp_slot_adapter slot_adapter; /* the request's adapter, as slots key it */
    sp_job_reply reply;           /* tools / reasoning split off the text */

    /* Written by the engine's thread, read by the connection's: under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_state state;
    spindle_detokenizer *detok;
    sp_stop_matcher stop;
    sp_strbuf text;               /* everything that may be sent */
    sp_api_logprob *logprobs;
    int n_logprobs, cap_logprobs;
    spindle_stop_reason stop_reason;
    spindle_status status;
    char error[256];
    int n_generated;
    int cached_tokens;            /* prompt tokens the prefix index served */

    /* The connection's thread only. */
    size_t text_sent;
    int logprobs_sent;
    bool role_sent, stream_done, cancelled;
    sp_anthropic_stream anthropic;   /* the Messages API's open block */
    sp_strbuf out;                /* formatted events not yet written */
    size_t out_pos;
};

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

/* ------------------------------------------------------- engine callbacks */

/* Append a detokenized piece; a decoded U+0000 becomes U+FFFD, since the
 * JSON strings are built from NUL-terminated text. */
static bool feed_text(sp_job *j, const char *piece, size_t len) {
    bool stopped = false;
    size_t at = 0;
    while (at < len && !stopped) {
        const char *nul = memchr(piece + at, '\0', len - at);
        size_t n = nul ? (size_t)(nul - (piece + at)) : len - at;
        stopped = sp_stop_feed(&j->stop, piece + at, n, &j->text);
        if (nul && !stopped) stopped = sp_stop_feed(&j->stop, "\xEF\xBF\xBD", 3, &j->text);
        at += n + (nul ? 1 : 0);
    }
    return stopped;
}

static void keep_logprob(sp_job *j, const spindle_token_info *info) {
    if (j->n_logprobs == j->cap_logprobs) {
        int cap = j->cap_logprobs ? j->cap_logprobs * 2 : 16;
        sp_api_logprob *p = realloc(j->logprobs, (size_t)cap * sizeof *p);
        if (!p) return;   /* the text goes on; this token's logprob is lost */
        j->logprobs = p;
        j->cap_logprobs = cap;
    }
    sp_api_logprob *lp = &j->logprobs[j->n_logprobs++];
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

static bool on_token(spindle_request_id id, const spindle_token_info *info, void *user) {
    sp_job *j = user;
    (void)id;
    pthread_mutex_lock(&j->mu);
    if (wants_logprob(j, info->token)) keep_logprob(j, info);
    const char *piece = NULL;
    bool stopped = false;
    int32_t token = sp_job_reply_token(&j->reply, info->token, &stopped);
    if (!sp_job_reply_hides(j->srv, &j->reply, token) &&
        spindle_detokenizer_push(j->detok, token, &piece, NULL) == SPINDLE_OK)
        stopped |= feed_text(j, piece, spindle_detokenizer_piece_len(j->detok));
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return !stopped;
}

static void on_finish(spindle_request_id id, const spindle_request_result *r, void *user) {
    sp_job *j = user;
    (void)id;
    sp_metrics_count_generation(&j->srv->metrics, &r->stats, r->n_tokens);
    pthread_mutex_lock(&j->mu);
    const char *piece = NULL;
    if (!j->stop.matched &&
        spindle_detokenizer_flush(j->detok, &piece, NULL) == SPINDLE_OK)
        feed_text(j, piece, spindle_detokenizer_piece_len(j->detok));
    sp_stop_flush(&j->stop, &j->text);
    sp_durable_end(&j->durable, r->stop_reason);
    if (j->seq && r->stop_reason != SPINDLE_STOP_ERROR && r->stop_reason != SPINDLE_STOP_CANCELLED)
        sp_slot_end(j->srv, j->req.id_slot, j->seq, j->prompt, j->n_prompt, r->tokens, r->n_tokens,
                    &j->slot_adapter);
    j->stop_reason = r->stop_reason;
    j->status = r->status;
    snprintf(j->error, sizeof j->error, "%s", r->error ? r->error : "");
    j->n_generated = r->n_tokens;
    j->cached_tokens = r->stats.cached_tokens;
    job_set_state(j, JOB_FINISHED);
    /* Broadcast before unlocking: the connection's thread may free the job
     * as soon as it sees `finished`. */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* ------------------------------------------------------------ job life */

static sp_job *job_new(sp_server *s, struct MHD_Connection *c, sp_api_request *req,
                       sp_job_durable *durable) {
    sp_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->durable = *durable;    /* the job owns it now */
    memset(durable, 0, sizeof *durable);
    j->srv = s;
    j->conn = c;
    j->req = *req;            /* the job owns the request's memory now */
    memset(req, 0, sizeof *req);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    sp_stop_init(&j->stop, j->req.stop, j->req.n_stop);
    uint64_t serial = atomic_fetch_add(&s->next_id, 1);
    snprintf(j->id_text, sizeof j->id_text, "%s%llx%06llx",
             j->req.dialect == SP_API_ANTHROPIC ? "msg_"
             : j->req.kind == SP_API_CHAT       ? "chatcmpl-"
                                                : "cmpl-",
             (unsigned long long)s->started, (unsigned long long)serial);
    if (j->durable.resume_id)   /* a resumed request keeps its id */
        snprintf(j->id_text, sizeof j->id_text, "%s", j->durable.resume_id);
    j->head = (sp_api_head){.kind = j->req.kind, .id = j->id_text,
                            .created = (long long)time(NULL),
                            .model = j->req.model ? j->req.model : s->model_names[0]};
    return j;
}

/* Ask the engine to stop the request (once). */
static void job_cancel(sp_job *j) {
    if (j->cancelled || !j->id) return;
    j->cancelled = true;
    spindle_engine_cancel(j->srv->engine, j->id);
}

/* Wait for on_finish (cancelling first) unless the job never reached the
 * engine, leave the server's list, free. */
static void job_release(sp_job *j) {
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
    if (admitted) s->in_flight--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    spindle_detokenizer_free(j->detok);
    sp_durable_free(&j->durable);
    spindle_seq_free(j->seq);
    sp_job_reply_free(&j->reply);
    sp_stop_free(&j->stop);
    sp_strbuf_free(&j->text);
    sp_strbuf_free(&j->out);
    free(j->logprobs);
    spindle_free(j->prompt);
    sp_api_request_free(&j->req);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
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
        bool in_engine = j->id && spindle_engine_is_running(s->engine, j->id);
        add_names(in_engine ? running : waiting, j->req.adapter_name);
    }
    pthread_mutex_unlock(&s->lock);
}

void sp_cancel_all_jobs(sp_server *s) {
    pthread_mutex_lock(&s->lock);
    for (sp_job *j = s->jobs; j; j = j->next)
        if (j->id) spindle_engine_cancel(s->engine, j->id);
    pthread_mutex_unlock(&s->lock);
}

typedef bool (*job_ready_fn)(const sp_job *j);

static bool has_news(const sp_job *j) {
    return finished(j) || j->text.len > j->text_sent || j->n_logprobs > j->logprobs_sent;
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

typedef enum job_wait_result { JOB_READY, JOB_GONE, JOB_QUIET } job_wait_result;

/* Wait until ready(j), or until `quiet_ms` pass (> 0; 0: no limit); GONE
 * (the request cancelled) when the client has gone meanwhile. The socket
 * is looked at every 50 ms, however often the engine's tokens wake the
 * wait. */
static job_wait_result job_wait_for(sp_job *j, job_ready_fn ready, long quiet_ms) {
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

static bool job_wait(sp_job *j, job_ready_fn ready) {
    return job_wait_for(j, ready, 0) == JOB_READY;
}

/* How long a stream may stay silent before it sends an SSE comment: a
 * request queued behind others (or a long prefill) sends nothing for a
 * while, and libmicrohttpd would close the connection as idle after
 * --idle-timeout; a client that stopped reading still times out, as the
 * comment cannot be written to it. */
static long keepalive_ms(const sp_server *s) {
    long idle = s->opts.idle_timeout_s;
    if (idle <= 0) return 15000;
    return idle >= 30 ? 15000 : idle * 500L;
}

/* ---------------------------------------------------------- responses */

static const char *finish_reason(const sp_job *j) {
    spindle_stop_reason r = j->stop_reason;
    if (r == SPINDLE_STOP_LENGTH || r == SPINDLE_STOP_CONTEXT) return "length";
    return j->reply.any_call ? "tool_calls" : "stop";
}

/* A request that ended without an answer: an engine error, or cancelled by
 * the shutdown. False when it ended normally. */
static bool job_failure(const sp_job *j, sp_api_error *e) {
    if (j->stop_reason == SPINDLE_STOP_ERROR)
        return !sp_api_fail(e, 500, "server_error", NULL, NULL, "generation failed: %s",
                            j->error[0] ? j->error : spindle_status_name(j->status));
    if (j->stop_reason == SPINDLE_STOP_CANCELLED)
        return !sp_api_fail(e, 503, "server_error", NULL, NULL,
                            "the request was cancelled: the server is shutting down");
    return false;
}

/* Why an Anthropic message ended (stop_reason, stop_sequence). */
static sp_anthropic_stop anthropic_stop(const sp_job *j) {
    spindle_stop_reason r = j->stop_reason;
    if (r == SPINDLE_STOP_LENGTH || r == SPINDLE_STOP_CONTEXT)
        return (sp_anthropic_stop){.reason = "max_tokens"};
    if (j->reply.any_call) return (sp_anthropic_stop){.reason = "tool_use"};
    if (j->stop.matched && j->stop.which >= 0)
        return (sp_anthropic_stop){.reason = "stop_sequence",
                                   .sequence = j->req.stop[j->stop.which]};
    return (sp_anthropic_stop){.reason = "end_turn"};
}

static sp_route job_route(const sp_job *j) {
    if (j->req.dialect == SP_API_ANTHROPIC) return SP_ROUTE_MESSAGES;
    return j->req.kind == SP_API_CHAT ? SP_ROUTE_CHAT : SP_ROUTE_COMPLETIONS;
}

/* One streamed piece in the request's API. */
static void emit_delta(sp_job *j, const sp_api_delta *d) {
    if (j->req.dialect == SP_API_ANTHROPIC)
        sp_anthropic_delta_events(&j->out, &j->anthropic, d);
    else
        sp_api_chunk_event(&j->out, &j->head, d, false, j->req.include_usage, j->srv->tok);
}

static sp_api_usage job_usage(const sp_job *j) {
    return (sp_api_usage){.prompt_tokens = j->n_prompt, .completion_tokens = j->n_generated,
                          .cached_tokens = j->slot_reused + j->cached_tokens};
}

static enum MHD_Result reply_whole(sp_job *j) {
    sp_server *s = j->srv;
    sp_route route = job_route(j);
    sp_api_error e;
    if (job_failure(j, &e)) return sp_reply_error(s, j->conn, route, &e);
    sp_api_delta d = {.text = j->text.p ? j->text.p + j->text_from : "",
                      .len = j->text.len - j->text_from,
                      .logprobs = j->logprobs, .n_logprobs = j->n_logprobs,
                      .want_logprobs = j->req.logprobs};
    sp_reply_delta rd = {0};
    bool ok = !j->reply.structured ||
              sp_job_reply_next(&j->reply, d.text, d.len, true, &rd, &d);
    d.finish_reason = finish_reason(j);
    sp_api_usage u = job_usage(j);
    char *json = !ok ? NULL
                 : j->req.dialect == SP_API_ANTHROPIC
                     ? sp_anthropic_message_json(&j->head, &d, &u, anthropic_stop(j))
                     : sp_api_response_json(&j->head, &d, &u, s->tok);
    sp_reply_delta_free(&rd);
    if (!json) {
        sp_api_fail(&e, 503, "server_error", NULL, NULL, "out of memory");
        return sp_reply_error(s, j->conn, route, &e);
    }
    return sp_reply_json(s, j->conn, route, 200, json);
}

/* The events that end a stream: the finish chunk (or an error), usage,
 * [DONE]. */
static void stream_end(sp_job *j) {
    sp_api_error e;
    j->stream_done = true;
    if (j->req.dialect == SP_API_ANTHROPIC) {
        sp_api_usage u = job_usage(j);
        if (job_failure(j, &e)) sp_anthropic_error_event(&j->out, &e);
        else sp_anthropic_end_events(&j->out, &j->anthropic, anthropic_stop(j), &u);
        return;
    }
    if (job_failure(j, &e)) {
        sp_api_error_event(&j->out, &e);
    } else {
        sp_api_delta d = {.text = "", .finish_reason = finish_reason(j)};
        sp_api_chunk_event(&j->out, &j->head, &d, false, j->req.include_usage, j->srv->tok);
        if (j->req.include_usage) {
            sp_api_usage u = job_usage(j);
            sp_api_usage_event(&j->out, &j->head, &u);
        }
    }
    sp_strbuf_add(&j->out, "data: [DONE]\n\n", 14);
}

/* The next events of a structured reply: the whole text so far parsed
 * again, what is new sent (content, reasoning and logprobs in one chunk,
 * then one chunk per tool-call entry). */
static bool stream_structured(sp_job *j, sp_api_delta *d) {
    pthread_mutex_lock(&j->mu);
    size_t len = j->text.len;
    int n_lp = j->n_logprobs - j->logprobs_sent;
    char *text = malloc(len + 1);
    sp_api_logprob *lps = n_lp ? malloc((size_t)n_lp * sizeof *lps) : NULL;
    bool done = finished(j), ok = text && (!n_lp || lps);
    if (ok) {
        if (len) memcpy(text, j->text.p, len);
        if (n_lp) memcpy(lps, j->logprobs + j->logprobs_sent, (size_t)n_lp * sizeof *lps);
        j->text_sent = len;
        j->logprobs_sent += n_lp;
    }
    pthread_mutex_unlock(&j->mu);
    sp_reply_delta rd = {0};
    ok = ok && sp_job_reply_next(&j->reply, text, len, done, &rd, d);
    if (ok && (d->len || d->reasoning_len || n_lp)) {
        sp_api_delta text_part = *d;
        text_part.tool_calls = NULL;
        text_part.n_tool_calls = 0;
        text_part.logprobs = lps;
        text_part.n_logprobs = n_lp;
        emit_delta(j, &text_part);
    }
    for (int k = 0; ok && k < d->n_tool_calls; k++) {
        sp_api_delta call = {.text = "", .want_logprobs = d->want_logprobs,
                             .tool_calls = &d->tool_calls[k], .n_tool_calls = 1};
        emit_delta(j, &call);
    }
    sp_reply_delta_free(&rd);
    free(text);
    free(lps);
    if (!ok) j->out.oom = true;
    else if (done) stream_end(j);
    return true;
}

/* Format the next events into j->out; false when the client has gone. */
static bool stream_next(sp_job *j) {
    sp_api_delta d = {.want_logprobs = j->req.logprobs};
    if (j->req.kind == SP_API_CHAT && !j->role_sent) {
        j->role_sent = true;
        d.text = "";
        if (j->req.dialect == SP_API_ANTHROPIC) {
            sp_api_usage u = {.prompt_tokens = j->n_prompt, .cached_tokens = j->slot_reused};
            sp_anthropic_start_events(&j->out, &j->anthropic, &j->head, &u, !j->reply.structured);
        } else {
            sp_api_chunk_event(&j->out, &j->head, &d, true, j->req.include_usage, j->srv->tok);
        }
        return true;
    }
    job_wait_result w = job_wait_for(j, has_news, keepalive_ms(j->srv));
    if (w == JOB_GONE) return false;
    if (w == JOB_QUIET) {
        sp_strbuf_printf(&j->out, ": keep-alive\n\n");
        return true;
    }
    /* Copy what arrived, then format without the lock (the engine's thread
     * appends meanwhile). */
    if (j->reply.structured) return stream_structured(j, &d);
    pthread_mutex_lock(&j->mu);
    size_t len = j->text.len - j->text_sent;
    int n_lp = j->n_logprobs - j->logprobs_sent;
    char *text = malloc(len + 1);
    sp_api_logprob *lps = n_lp ? malloc((size_t)n_lp * sizeof *lps) : NULL;
    bool done = finished(j), ok = text && (!n_lp || lps);
    if (ok) {
        if (len) memcpy(text, j->text.p + j->text_sent, len);
        if (n_lp) memcpy(lps, j->logprobs + j->logprobs_sent, (size_t)n_lp * sizeof *lps);
        j->text_sent += len;
        j->logprobs_sent += n_lp;
    }
    pthread_mutex_unlock(&j->mu);
    if (ok && (len || n_lp)) {
        d.text = text;
        d.len = len;
        d.logprobs = lps;
        d.n_logprobs = n_lp;
        emit_delta(j, &d);
    }
    free(text);
    free(lps);
    if (!ok) j->out.oom = true;
    else if (done) stream_end(j);
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sp_job *j = cls;
    (void)pos;
    while (j->out_pos >= j->out.len) {
        if (j->stream_done) return MHD_CONTENT_READER_END_OF_STREAM;
        j->out.len = 0;
        j->out_pos = 0;
        if (!stream_next(j) || j->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = j->out.len - j->out_pos;
    if (n > max) n = max;
    memcpy(buf, j->out.p + j->out_pos, n);
    j->out_pos += n;
    return (ssize_t)n;
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
                 (atomic_load(&s->next_id) * 0x9E3779B97F4A7C15ull);
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
    for (int i = 0; i < spindle_checkpoint_generated(ck) && !j->stop.matched; i++)
        if (spindle_detokenizer_push(j->detok, t[i], &piece, NULL) == SPINDLE_OK)
            feed_text(j, piece, spindle_detokenizer_piece_len(j->detok));
    j->text_from = j->text_sent = j->text.len;
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

/* Submit to the engine; on failure nothing runs and *e says why. */
static bool job_submit(sp_job *j, sp_api_error *e) {
    sp_server *s = j->srv;
    spindle_error err = {0};
    spindle_status st = spindle_detokenizer_new(s->tok, !j->reply.keep_special, &j->detok, &err);
    if (!st && j->durable.resume) replay_generated(j);
    if (!j->req.seed_given) j->req.gen.sampler.seed = fresh_seed(s);
    sp_durable_arm(s, &j->durable, j->id_text, &j->req, &j->req.gen);
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
    spindle_request rq = {.prompt = j->prompt + j->slot_reused,
                          .n_prompt = j->n_prompt - j->slot_reused, .seq = j->seq,
                          .params = &j->req.gen, .top_logprobs = j->req.top_logprobs,
                          .on_token = on_token, .on_finish = on_finish, .user = j};
    spindle_request_id id = 0;
    if (!st) {
        job_set_state(j, JOB_SUBMITTED);
        st = spindle_engine_submit(s->engine, &rq, &id, &err);
        sp_adapters_unlock(s);
    }
    if (!st) {
        /* Under the server's lock: sp_cancel_all_jobs reads it. (The
         * callbacks may already have run; they find the job via `user`.) */
        pthread_mutex_lock(&s->lock);
        j->id = id;
        pthread_mutex_unlock(&s->lock);
        return true;
    }
    job_set_state(j, JOB_FINISHED);   /* no callback will run */
    /* A resume the engine refuses at submit (a checkpoint this server
     * cannot continue, or a request that does not match it) is the
     * client's to fix, and its checkpoint stays. */
    sp_api_error_from_status(e, st, j->durable.resume ? "resume_id" : NULL, err.message);
    if (st == SPINDLE_ERR_LIMIT) snprintf(e->code, sizeof e->code, "context_length_exceeded");
    return false;
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
} gen_setup;

static void gen_setup_free(gen_setup *g) {
    sp_durable_free(&g->durable);
    sp_api_request_free(&g->req);
    spindle_free(g->ids);
    spindle_free(g->prompt_text);
}

/* The server is ready, and its model generates. */
static bool gen_accepting(sp_server *s, sp_api_error *e) {
    if (!phase_allows(s, e)) return false;
    if (!s->engine)
        return sp_api_bad(e, "model", "the model is an embedding encoder: it serves "
                          "/v1/embeddings only");
    return true;
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
    } else if (!sp_server_prompt_ids(s, &g->req, &g->ids, &g->n, &g->prompt_text, e)) {
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
    sp_job_reply_plan(s, &j->req, g->prompt_text, fresh_seed(s), &j->reply);
    j->prompt = g->ids;
    j->n_prompt = g->n;
    g->ids = NULL;
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
    if (j->req.stream) return sp_reply_stream(s, c, route, stream_read, j, stream_free);
    enum MHD_Result rc = job_wait(j, finished) ? reply_whole(j) : MHD_NO;
    job_release(j);
    return rc;
}

enum MHD_Result sp_handle_generation(sp_server *s, struct MHD_Connection *c,
                                     const sp_http_call *call) {
    sp_api_error e;
    gen_setup g = {0};
    sp_job *j = NULL;
    bool ok = gen_accepting(s, &e) && gen_parse(s, call, &g, &e) && gen_prompt(s, &g, &e) &&
              (j = gen_job(s, c, &g, &e)) != NULL;
    gen_setup_free(&g);
    return ok ? gen_run(j, call->route) : sp_reply_error(s, c, call->route, &e);
}
