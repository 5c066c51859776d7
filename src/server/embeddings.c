/* POST /v1/embeddings over the served model's embedder. Handlers run on
 * libmicrohttpd's connection threads; spindle_embed serializes them on the
 * embedder's lock and runs beside the generation engine (its own scratch
 * and threads), so concurrent requests are safe. */
#include "server/api_embeddings.h"
#include "server/state.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sp_embeddings_load(sp_server *s) {
    spindle_error err = {0};
    spindle_embedder_options eo = {.n_threads = s->opts.threads,
                                   .pooling = s->opts.pooling};
    spindle_status st = spindle_embedder_new(s->model, &eo, &s->embedder, &err);
    if (st == SPINDLE_ERR_UNSUPPORTED) {
        /* A generation model, or a cross-encoder whose GGUF pools for
         * ranking: /v1/embeddings answers 400 with the reason (serve.c
         * refuses a model that serves no route at all). */
        snprintf(s->embed_refusal, sizeof s->embed_refusal, "%.200s", err.message);
        return true;
    }
    if (st) sp_log(SPINDLE_LOG_ERROR, "%s", err.message);
    return !st;
}

bool sp_server_serving(sp_server *s, sp_api_error *e) {
    int phase = atomic_load(&s->phase);
    if (phase == SP_PHASE_LOADING)
        return sp_api_fail(e, 503, "unavailable_error", NULL, NULL, "Loading model");
    if (phase == SP_PHASE_DRAINING)
        return sp_api_fail(e, 503, "unavailable_error", NULL, NULL,
                           "the server is shutting down");
    return true;
}

static bool embed_ready(sp_server *s, sp_api_error *e) {
    if (!sp_server_serving(s, e)) return false;
    if (!s->embedder)
        return sp_api_bad(e, "model", "the served model is not an embedding "
                          "model (%.300s)", s->embed_refusal);
    return true;
}

enum MHD_Result sp_handle_embeddings(sp_server *s, struct MHD_Connection *c,
                                     const sp_http_call *call) {
    const sp_route route = SP_ROUTE_EMBEDDINGS;
    sp_api_error e;
    sp_api_embeddings r;
    if (!embed_ready(s, &e) ||
        !sp_api_parse_embeddings(call->body, call->len, &s->limits, &r, &e))
        return sp_reply_error(s, c, route, &e);
    const int d = spindle_embedder_dim(s->embedder);
    if (r.dimensions > d) {
        sp_api_bad(&e, "dimensions", "'dimensions' %d exceeds the model's %d",
                   r.dimensions, d);
        sp_api_embeddings_free(&r);
        return sp_reply_error(s, c, route, &e);
    }
    const int width = r.dimensions ? r.dimensions : d;
    float *out = malloc((size_t)r.n_inputs * (size_t)width * sizeof *out);
    spindle_embed_request q = {.inputs = r.inputs, .n_inputs = r.n_inputs,
                               .tokenizer = s->tok, .prompt = r.prompt,
                               .prompt_name = r.prompt_name,
                               .dimensions = r.dimensions};
    spindle_error err = {0};
    int64_t tokens = 0;
    spindle_status st = out ? spindle_embed(s->embedder, &q, out, &tokens, &err)
                            : SPINDLE_ERR_MEMORY;
    char *json = NULL;
    if (!st)
        json = sp_api_embeddings_response(&r, r.model ? r.model
                                                      : s->model_names[0],
                                          out, width, tokens);
    free(out);
    sp_api_embeddings_free(&r);
    if (st || !json) {
        sp_api_error_from_status(&e, st ? st : SPINDLE_ERR_MEMORY, "input",
                                 st ? err.message : "out of memory");
        return sp_reply_error(s, c, route, &e);
    }
    return sp_reply_json(s, c, route, 200, json);
}
