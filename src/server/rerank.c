/* POST /v1/rerank (and /rerank) over the served model's reranker. Handlers
 * run on libmicrohttpd's connection threads; spindle_rerank serializes
 * them on the reranker's lock and runs beside the generation engine (its
 * own scratch and threads), so concurrent requests are safe. */
#include "server/api_rerank.h"
#include "server/state.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>

/* A cross-encoder serves the route by itself; a decoder only under
 * --rerank, since any chat model has "yes" and "no" tokens and would
 * answer with scores that mean nothing. */
bool sp_rerank_load(sp_server *s) {
    const bool encoder = !spindle_model_has_logits(s->model);
    if (!encoder && !s->opts.rerank) {
        snprintf(s->rerank_refusal, sizeof s->rerank_refusal,
                 "start the server with --rerank to score with a decoder "
                 "reranker's yes/no logits");
        return true;
    }
    spindle_error err = {0};
    spindle_reranker_options ro = {.n_threads = s->opts.threads};
    spindle_status st = spindle_reranker_new(s->model, s->tok, &ro,
                                             &s->reranker, &err);
    if (st == SPINDLE_ERR_UNSUPPORTED && encoder) {
        /* An embedding encoder: /v1/rerank answers 400 with the reason. */
        snprintf(s->rerank_refusal, sizeof s->rerank_refusal, "%.200s",
                 err.message);
        return true;
    }
    if (st) sp_log(SPINDLE_LOG_ERROR, "%s", err.message);
    return !st;
}

enum MHD_Result sp_handle_rerank(sp_server *s, struct MHD_Connection *c,
                                 const sp_http_call *call) {
    const sp_route route = SP_ROUTE_RERANK;
    sp_api_error e;
    sp_api_rerank r;
    if (!sp_server_serving(s, &e)) return sp_reply_error(s, c, route, &e);
    if (!s->reranker) {
        sp_api_bad(&e, "model", "the served model is not a reranker (%.300s)",
                   s->rerank_refusal);
        return sp_reply_error(s, c, route, &e);
    }
    if (!sp_api_parse_rerank(call->body, call->len, &s->limits, &r, &e))
        return sp_reply_error(s, c, route, &e);
    float *scores = malloc((size_t)r.n_documents * sizeof *scores);
    spindle_error err = {0};
    int64_t tokens = 0;
    spindle_status st = scores ? spindle_rerank(s->reranker, r.query,
                                                r.documents, r.n_documents,
                                                scores, &tokens, &err)
                               : SPINDLE_ERR_MEMORY;
    char *json = NULL;
    if (!st)
        json = sp_api_rerank_response(&r, r.model ? r.model : s->model_names[0],
                                      scores, tokens);
    free(scores);
    sp_api_rerank_free(&r);
    if (st || !json) {
        sp_api_error_from_status(&e, st ? st : SPINDLE_ERR_MEMORY, "documents",
                                 st ? err.message : "out of memory");
        return sp_reply_error(s, c, route, &e);
    }
    return sp_reply_json(s, c, route, 200, json);
}
