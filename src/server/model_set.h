/* Several models in one server (llama-server's router mode): the models
 * named by -m NAME=PATH and --model-dir, each loaded on its first request
 * as a server of its own (one engine per model) behind the front server's
 * one HTTP daemon, and unloaded least recently used when --models-memory
 * would be exceeded, never while it has requests in flight or is pinned.
 * Thread-safe (one lock); internal to server/. */
#ifndef SP_SERVER_MODEL_SET_H
#define SP_SERVER_MODEL_SET_H

#include <stdbool.h>
#include <stddef.h>

#include "server/state.h"

typedef struct sp_model_set sp_model_set;

/* Whether the options name several models (NAME=PATH or --model-dir). */
bool sp_model_set_wanted(const sp_server_options *o);
/* The set of `front`'s options: every model found, the pins checked. NULL
 * with a one-line reason in why[cap] (an unreadable --model-dir, a
 * duplicate name, an unknown --pin, an option that takes one model). */
sp_model_set *sp_model_set_new(sp_server *front, char *why, size_t cap);
/* Load the pinned models: false after a logged line. */
bool sp_model_set_load_pinned(sp_model_set *ms);
/* Shutdown: every loaded model drains (sp_server_drain). */
void sp_model_set_drain(sp_model_set *ms);
void sp_model_set_free(sp_model_set *ms);

/* The front's router: GET /v1/models, /v1/models/{id} and /metrics over
 * every model; /health and / by the front; any other route by the model
 * its request names (the body's "model", or ?model= on a GET or DELETE),
 * loaded first if it is not. */
enum MHD_Result sp_model_set_dispatch(sp_server *front, struct MHD_Connection *c,
                                      sp_route_handler handler, const sp_http_call *call);

#endif
