/* A job's answer (job.h): the whole response once every choice finished,
 * or the stream, whose chunks each carry one choice's `index` (the chat
 * stream's role chunk, text, logprobs and tool calls, then that choice's
 * finish chunk), and after the last choice the usage and [DONE]. */
#include "server/job.h"

#include <stdlib.h>
#include <string.h>

static const char *finish_reason(const sp_choice *c) {
    spindle_stop_reason r = c->stop_reason;
    if (r == SPINDLE_STOP_LENGTH || r == SPINDLE_STOP_CONTEXT) return "length";
    return c->reply.any_call ? "tool_calls" : "stop";
}

/* A request that ended without an answer: an engine error in any choice,
 * or cancelled by the shutdown. False when every choice ended normally. */
static bool job_failure(const sp_job *j, sp_api_error *e) {
    for (int i = 0; i < j->n_choices; i++) {
        const sp_choice *c = &j->choices[i];
        if (c->stop_reason == SPINDLE_STOP_ERROR)
            return !sp_api_fail(e, 500, "server_error", NULL, NULL, "generation failed: %s",
                                c->error[0] ? c->error : spindle_status_name(c->status));
        if (c->stop_reason == SPINDLE_STOP_CANCELLED)
            return !sp_api_fail(e, 503, "server_error", NULL, NULL,
                                "the request was cancelled: the server is shutting down");
    }
    return false;
}

/* Why an Anthropic message ended (stop_reason, stop_sequence); the
 * Messages API has one choice. */
static sp_anthropic_stop anthropic_stop(const sp_job *j) {
    const sp_choice *c = &j->choices[0];
    spindle_stop_reason r = c->stop_reason;
    if (r == SPINDLE_STOP_LENGTH || r == SPINDLE_STOP_CONTEXT)
        return (sp_anthropic_stop){.reason = "max_tokens"};
    if (c->reply.any_call) return (sp_anthropic_stop){.reason = "tool_use"};
    if (c->stop.matched && c->stop.which >= 0)
        return (sp_anthropic_stop){.reason = "stop_sequence",
                                   .sequence = j->req.stop[c->stop.which]};
    return (sp_anthropic_stop){.reason = "end_turn"};
}

/* The Responses API's end: the response completed (or incomplete at the
 * token limit), its events into `out` (NULL: a whole answer), and the
 * response kept for GET and previous_response_id unless store is false. */
static void responses_finish(sp_job *j, sp_strbuf *out, const sp_api_usage *u) {
    spindle_stop_reason r = j->choices[0].stop_reason;
    sp_responses_end(out, &j->responses, r == SPINDLE_STOP_LENGTH || r == SPINDLE_STOP_CONTEXT,
                     u);
    if (!j->req.store) return;
    char *json = sp_responses_json(&j->responses);
    char *history = sp_responses_history(&j->responses, j->req.conversation_json);
    if (json && history)
        sp_responses_store_put(&j->srv->responses, j->id_text, json, history);
    free(json);
    free(history);
}

static sp_route job_route(const sp_job *j) {
    if (j->req.dialect == SP_API_ANTHROPIC) return SP_ROUTE_MESSAGES;
    if (j->req.dialect == SP_API_RESPONSES) return SP_ROUTE_RESPONSES;
    return j->req.kind == SP_API_CHAT ? SP_ROUTE_CHAT : SP_ROUTE_COMPLETIONS;
}

/* One streamed piece in the request's API. */
static void emit_delta(sp_job *j, const sp_api_delta *d) {
    if (j->req.dialect == SP_API_ANTHROPIC)
        sp_anthropic_delta_events(&j->out, &j->anthropic, d);
    else if (j->req.dialect == SP_API_RESPONSES)
        sp_responses_delta(&j->out, &j->responses, d);
    else
        sp_api_chunk_event(&j->out, &j->head, d, false, j->req.include_usage, j->srv->tok);
}

/* The prompt once (the first choice's cached part), every choice's
 * completion tokens. */
static sp_api_usage job_usage(const sp_job *j) {
    sp_api_usage u = {.prompt_tokens = j->n_prompt,
                      .cached_tokens = j->slot_reused + j->choices[0].cached_tokens};
    for (int i = 0; i < j->n_choices; i++) u.completion_tokens += j->choices[i].n_generated;
    return u;
}

enum MHD_Result sp_job_reply_whole(sp_job *j) {
    sp_server *s = j->srv;
    sp_route route = job_route(j);
    sp_api_error e;
    if (job_failure(j, &e)) return sp_reply_error(s, j->conn, route, &e);
    sp_api_delta *d = calloc((size_t)j->n_choices, sizeof *d);
    sp_reply_delta *rd = calloc((size_t)j->n_choices, sizeof *rd);
    bool ok = d && rd;
    for (int i = 0; ok && i < j->n_choices; i++) {
        sp_choice *c = &j->choices[i];
        d[i] = (sp_api_delta){.index = c->index,
                              .text = c->text.p ? c->text.p + j->text_from : "",
                              .len = c->text.len - j->text_from,
                              .logprobs = c->logprobs, .n_logprobs = c->n_logprobs,
                              .want_logprobs = j->req.logprobs};
        ok = !c->reply.structured ||
             sp_job_reply_next(&c->reply, d[i].text, d[i].len, true, &rd[i], &d[i]);
        d[i].finish_reason = finish_reason(c);
    }
    sp_api_usage u = job_usage(j);
    if (ok && j->req.dialect == SP_API_RESPONSES) {
        sp_responses_start(NULL, &j->responses, &j->head, j->req.responses_echo_json);
        sp_responses_delta(NULL, &j->responses, &d[0]);
        responses_finish(j, NULL, &u);
    }
    char *json = !ok ? NULL
                 : j->req.dialect == SP_API_RESPONSES ? sp_responses_json(&j->responses)
                 : j->req.dialect == SP_API_ANTHROPIC
                     ? sp_anthropic_message_json(&j->head, &d[0], &u, anthropic_stop(j))
                     : sp_api_response_json(&j->head, d, j->n_choices, &u, s->tok);
    for (int i = 0; rd && i < j->n_choices; i++) sp_reply_delta_free(&rd[i]);
    free(rd);
    free(d);
    if (!json) {
        sp_api_fail(&e, 503, "server_error", NULL, NULL, "out of memory");
        return sp_reply_error(s, j->conn, route, &e);
    }
    return sp_reply_json(s, j->conn, route, 200, json);
}

/* After the last choice's finish chunk (or an error): usage, [DONE]. */
static void stream_end(sp_job *j) {
    sp_api_error e;
    if (j->req.dialect == SP_API_ANTHROPIC) {
        sp_api_usage u = job_usage(j);
        if (job_failure(j, &e)) sp_anthropic_error_event(&j->out, &e);
        else sp_anthropic_end_events(&j->out, &j->anthropic, anthropic_stop(j), &u);
        j->stream_done = true;
        return;
    }
    if (j->req.dialect == SP_API_RESPONSES) {
        sp_api_usage u = job_usage(j);
        if (job_failure(j, &e)) sp_responses_error_event(&j->out, &j->responses, &e);
        else responses_finish(j, &j->out, &u);
        j->stream_done = true;
        return;
    }
    if (job_failure(j, &e)) {
        sp_api_error_event(&j->out, &e);
    } else if (j->req.include_usage) {
        sp_api_usage u = job_usage(j);
        sp_api_usage_event(&j->out, &j->head, &u);
    }
    sp_strbuf_add(&j->out, "data: [DONE]\n\n", 14);
    j->stream_done = true;
}

/* Choice c's finish chunk; a choice that failed has none (stream_end
 * sends the error), nor has an Anthropic message (its end events carry
 * the stop reason, as do the Responses API's). */
static void choice_end(sp_job *j, sp_choice *c) {
    c->end_sent = true;
    if (c->stop_reason == SPINDLE_STOP_ERROR || c->stop_reason == SPINDLE_STOP_CANCELLED ||
        j->req.dialect != SP_API_OPENAI)
        return;
    sp_api_delta d = {.index = c->index, .text = "", .finish_reason = finish_reason(c)};
    sp_api_chunk_event(&j->out, &j->head, &d, false, j->req.include_usage, j->srv->tok);
}

/* What arrived for choice c since the last call: from `from` of its text
 * (0 for a structured reply, which is parsed whole again) and its new
 * logprobs, copied under the lock. False when out of memory. */
typedef struct arrived {
    char *text;
    size_t len;
    sp_api_logprob *lps;
    int n_lp;
    bool done;
} arrived;

static bool take_arrived(sp_job *j, sp_choice *c, bool whole, arrived *a) {
    pthread_mutex_lock(&j->mu);
    size_t from = whole ? 0 : c->text_sent;
    a->len = c->text.len - from;
    a->n_lp = c->n_logprobs - c->logprobs_sent;
    a->text = malloc(a->len + 1);
    a->lps = a->n_lp ? malloc((size_t)a->n_lp * sizeof *a->lps) : NULL;
    a->done = c->finished;
    bool ok = a->text && (!a->n_lp || a->lps);
    if (ok) {
        if (a->len) memcpy(a->text, c->text.p + from, a->len);
        if (a->n_lp)
            memcpy(a->lps, c->logprobs + c->logprobs_sent, (size_t)a->n_lp * sizeof *a->lps);
        c->text_sent = c->text.len;
        c->logprobs_sent += a->n_lp;
    }
    pthread_mutex_unlock(&j->mu);
    return ok;
}

/* The next events of a structured reply: the whole text so far parsed
 * again, what is new sent (content, reasoning and logprobs in one chunk,
 * then one chunk per tool-call entry). */
static bool stream_structured(sp_job *j, sp_choice *c, const arrived *a, sp_api_delta *d) {
    sp_reply_delta rd = {0};
    bool ok = sp_job_reply_next(&c->reply, a->text, a->len, a->done, &rd, d);
    if (ok && (d->len || d->reasoning_len || a->n_lp)) {
        sp_api_delta text_part = *d;
        text_part.tool_calls = NULL;
        text_part.n_tool_calls = 0;
        text_part.logprobs = a->lps;
        text_part.n_logprobs = a->n_lp;
        emit_delta(j, &text_part);
    }
    for (int k = 0; ok && k < d->n_tool_calls; k++) {
        sp_api_delta call = {.index = c->index, .text = "", .want_logprobs = d->want_logprobs,
                             .tool_calls = &d->tool_calls[k], .n_tool_calls = 1};
        emit_delta(j, &call);
    }
    sp_reply_delta_free(&rd);
    return ok;
}

/* Choice c's new events into j->out; false when out of memory. */
static bool stream_choice(sp_job *j, sp_choice *c) {
    sp_api_delta d = {.index = c->index, .want_logprobs = j->req.logprobs};
    arrived a = {0};
    bool ok = take_arrived(j, c, c->reply.structured, &a);
    if (ok && c->reply.structured) {
        ok = stream_structured(j, c, &a, &d);
    } else if (ok && (a.len || a.n_lp)) {
        d.text = a.text;
        d.len = a.len;
        d.logprobs = a.lps;
        d.n_logprobs = a.n_lp;
        emit_delta(j, &d);
    }
    free(a.text);
    free(a.lps);
    if (ok && a.done) choice_end(j, c);
    return ok;
}

static bool has_news(const sp_job *j) {
    if (sp_job_finished(j)) return true;
    for (int i = 0; i < j->n_choices; i++) {
        const sp_choice *c = &j->choices[i];
        if ((c->finished && !c->end_sent) || c->text.len > c->text_sent ||
            c->n_logprobs > c->logprobs_sent)
            return true;
    }
    return false;
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

/* Format the next events into j->out; false when the client has gone. */
static bool stream_next(sp_job *j) {
    bool roles = false;
    for (int i = 0; j->req.kind == SP_API_CHAT && i < j->n_choices; i++) {
        sp_choice *c = &j->choices[i];
        if (c->role_sent) continue;
        c->role_sent = roles = true;
        sp_api_delta d = {.index = c->index, .text = "", .want_logprobs = j->req.logprobs};
        if (j->req.dialect == SP_API_ANTHROPIC) {
            sp_api_usage u = {.prompt_tokens = j->n_prompt, .cached_tokens = j->slot_reused};
            sp_anthropic_start_events(&j->out, &j->anthropic, &j->head, &u,
                                      !c->reply.structured);
        } else if (j->req.dialect == SP_API_RESPONSES) {
            sp_responses_start(&j->out, &j->responses, &j->head, j->req.responses_echo_json);
        } else {
            sp_api_chunk_event(&j->out, &j->head, &d, true, j->req.include_usage, j->srv->tok);
        }
    }
    if (roles) return true;
    job_wait_result w = sp_job_submit_rest(j, keepalive_ms(j->srv));
    if (w == JOB_READY) w = sp_job_wait_for(j, has_news, keepalive_ms(j->srv));
    if (w == JOB_GONE) return false;
    if (w == JOB_QUIET) {
        sp_strbuf_printf(&j->out, ": keep-alive\n\n");
        return true;
    }
    /* Copy what arrived, then format without the lock (the engine's thread
     * appends meanwhile). */
    bool ok = true, all_ended = true;
    for (int i = 0; ok && i < j->n_choices; i++) {
        sp_choice *c = &j->choices[i];
        if (!c->end_sent) ok = stream_choice(j, c);
        all_ended &= c->end_sent;
    }
    if (!ok) j->out.oom = true;
    else if (all_ended) stream_end(j);
    return true;
}

ssize_t sp_job_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
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
