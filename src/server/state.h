/* The server's shared state and the handlers that the HTTP layer
 * (http.c) dispatches to. Internal to server/. */
#ifndef SP_SERVER_STATE_H
#define SP_SERVER_STATE_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "server/adapters.h"
#include "server/api_request.h"
#include "server/metrics.h"
#include "server/responses_store.h"
#include "server/server.h"
#include "server/tool_calls.h"
#include "spindle.h"

typedef enum sp_phase {
    SP_PHASE_LOADING = 0,   /* listening; the model is not ready yet */
    SP_PHASE_READY,
    SP_PHASE_DRAINING       /* shutting down: new generations get 503 */
} sp_phase;

typedef struct sp_job sp_job;

/* Compiled grammars kept across requests (grammar_compile.c): a schema
 * sent again reuses the grammar, and with it the states and masks its
 * earlier requests computed. Least recently used goes first. */
#define SP_SERVER_GRAMMARS 8
typedef struct sp_cached_grammar {
    int kind;                   /* spindle_grammar_kind */
    char *text;                 /* NULL: an empty entry */
    spindle_grammar *grammar;   /* the cache's reference */
    uint64_t used;
} sp_cached_grammar;

typedef struct sp_server {
    sp_server_options opts;
    spindle_model *model;
    spindle_tokenizer *tok;
    spindle_grammar_vocab *grammar_vocab;  /* (lock) built on first use */
    sp_cached_grammar grammars[SP_SERVER_GRAMMARS];  /* (lock) */
    uint64_t grammar_clock;                          /* (lock) */
    spindle_engine *engine;       /* NULL for an encoder (no logits) */
    /* A diffusion model (diffusion_job.h): its requests run outside the
     * engine, one at a time under diffusion_lock. */
    bool diffusion;
    pthread_mutex_t diffusion_lock;
    spindle_model *draft_model;   /* --spec draft's (opts.spec points at it) */
    /* The embedding side (server/embeddings.c): NULL when the model is not
     * an embedding model, and then embed_refusal says why (for the 400). */
    spindle_embedder *embedder;
    char embed_refusal[256];
    /* The rerank side (server/rerank.c): NULL when the model is no
     * reranker (or a decoder without --rerank), with the reason. */
    spindle_reranker *reranker;
    char rerank_refusal[256];
    /* The vision encoder (images.c): NULL when the model takes no images;
     * thread-safe (it runs one encode at a time, and keeps encoded images
     * in its cache). */
    spindle_vision *vision;
    atomic_int phase;
    sp_api_limits limits;
    const char *model_names[2];
    int32_t stop_ids[1];
    int n_stop_ids;
    int context_length;
    /* reply.c, at load: the chat template's tool-call format, and whether
     * <think> is one token of the vocabulary (a reasoning model) */
    sp_tool_format tool_format;
    bool think_token;
    /* Where this server counts (its own_metrics, or with several models
     * the model's entry's, which outlive an unload) */
    sp_metrics *metrics;
    sp_metrics own_metrics;
    time_t started;
    /* Generation jobs in flight (their count and a list, for shutdown's
     * cancellation), under `lock`; `changed` signals a job's end and a stop
     * request. */
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int in_flight;
    /* Set (under lock) once sp_cancel_all_jobs has run: a choice submitted
     * after it is cancelled at once. */
    bool cancelling;
    sp_job *jobs;
    bool stop_requested;
    atomic_uint_fast64_t next_id;
    /* The counter response ids take their serial from: next_id, or with
     * several models the front's, so that no two models' ids (and
     * --checkpoint-dir files) collide */
    atomic_uint_fast64_t *ids;
    struct MHD_Daemon *daemon;
    struct sp_slots *slots;     /* --parallel slots (slots.h) */
    sp_adapters adapters;
    sp_responses_store responses;  /* POST /v1/responses' kept responses */
    struct sp_kv_events *kv_events;  /* --kv-events' publisher, or NULL */
    /* With several models: the front server holds the HTTP daemon and the
     * set (model_set.h), each loaded model is a server of its own (no
     * daemon, models NULL) that the front hands requests to. */
    struct sp_model_set *models;
} sp_server;

/* ---- serve.c: one model's server, apart from the HTTP daemon (the model
 * set makes one per loaded model) */
/* A server for o->model_path, not loaded yet: NULL when out of memory. */
sp_server *sp_server_new(const sp_server_options *o);
/* Load its model, tokenizer and engine: false after a logged line. */
bool sp_server_load(sp_server *s);
/* Answer 503 to new requests, let those in flight finish within
 * --shutdown-timeout, then cancel the rest and wait for their ends. */
void sp_server_drain(sp_server *s);
/* Free a server whose connections have closed (its daemon, if any, is
 * stopped first). */
void sp_server_free(sp_server *s);

/* How many responses the store keeps, and their JSON's bytes at most. */
#define SP_SERVER_RESPONSES_KEPT 512
#define SP_SERVER_RESPONSES_BYTES ((size_t)64 << 20)

/* ---- grammar_compile.c: response_format / grammar against the tokenizer;
 * false (a 400 naming where and why) when it does not compile */
bool sp_server_compile_grammar(sp_server *s, sp_api_request *r, sp_api_error *e);
/* A grammar for (kind, text), from the cache or compiled (and then kept):
 * *out is a new reference, the caller's (spindle_grammar_free). */
spindle_status sp_server_grammar(sp_server *s, spindle_grammar_kind kind, const char *text,
                                 spindle_grammar **out, spindle_error *err);
void sp_server_grammars_free(sp_server *s);

/* ---- tool_grammar.c: tool_choice "required" / a named function as a
 * grammar over the template's call format (it replaces r->grammar);
 * in_think: the prompt opened a <think> the reply must close first.
 * applies: whether the choice and the format are grammar-enforced. */
bool sp_server_tool_grammar_applies(const sp_server *s, const sp_api_request *r);
bool sp_server_compile_tool_grammar(sp_server *s, sp_api_request *r, bool in_think,
                                    sp_api_error *e);

/* ---- the routes (routes.def): one request as its handler sees it, and
 * the handlers, declared from the table's rows */
typedef struct sp_http_call {
    sp_route route;       /* the row that matched */
    const char *url;      /* the path as requested */
    const char *body;     /* the whole body ("" when none) */
    size_t len;
} sp_http_call;

typedef enum MHD_Result (*sp_route_handler)(sp_server *s, struct MHD_Connection *c,
                                            const sp_http_call *call);

#define SP_ROUTE(name, method, path, also, metric, handler, api_key)                   \
    enum MHD_Result handler(sp_server *s, struct MHD_Connection *c, const sp_http_call *call);
#include "server/routes.def"

/* ---- http.c: replies (each queues one response and counts it) */
enum MHD_Result sp_reply(sp_server *s, struct MHD_Connection *c, sp_route route,
                         int status, const char *content_type, const char *body,
                         size_t len);
/* `json` is freed. */
enum MHD_Result sp_reply_json(sp_server *s, struct MHD_Connection *c, sp_route route,
                              int status, char *json);
enum MHD_Result sp_reply_error(sp_server *s, struct MHD_Connection *c, sp_route route,
                               const sp_api_error *e);
/* An SSE stream whose body comes from `reader` (MHD's content reader). */
enum MHD_Result sp_reply_stream(sp_server *s, struct MHD_Connection *c, sp_route route,
                                MHD_ContentReaderCallback reader, void *cls,
                                MHD_ContentReaderFreeCallback free_cls);
/* Whether the peer of `c` is still connected (a peek at its socket). */
bool sp_client_connected(struct MHD_Connection *c);

/* ---- job.c: the generation jobs (POST /v1/chat/completions,
 * /v1/completions and /v1/messages: sp_handle_generation) */
/* The adapter names of the jobs in flight, comma-separated and each once:
 * those that have produced a token (running) and the others (waiting). */
void sp_jobs_adapter_names(sp_server *s, sp_strbuf *running, sp_strbuf *waiting);
/* Cancel every job in flight (shutdown past its deadline). */
void sp_cancel_all_jobs(sp_server *s);

/* ---- prompt.c: a generation request's prompt */
/* A chat request's messages rendered by the chat template (*rendered,
 * spindle_free) and tokenized (*ids, spindle_free), image markers expanded
 * to the positions their images take. False with a 400 in *e. */
bool sp_server_chat_prompt_ids(const sp_server *s, const sp_api_request *r, int32_t **ids,
                               size_t *n, char **rendered, sp_api_error *e);
/* The prompt of a chat or completion request (a completion's given ids
 * taken from r), with room in the context for it and at least one token
 * (and all of max_tokens when the request gave it): else a 400 in *e. A
 * chat with images also gets its spans in *images (images.h); with images
 * NULL, its ids only (no image encoded: the render routes). */
struct sp_image_prompt;
bool sp_server_prompt_ids(sp_server *s, sp_api_request *r, int32_t **ids, int *n,
                          char **rendered, struct sp_image_prompt *images, sp_api_error *e);

/* ---- embeddings.c: POST /v1/embeddings (sp_handle_embeddings) */
/* The embedder of s->model, or the reason it is none (unsupported) in
 * s->embed_refusal; false (a line on stderr) when the model's embedding
 * files are malformed. */
bool sp_embeddings_load(sp_server *s);
/* Whether the server takes requests now: else a 503 in *e (loading, or
 * shutting down). */
bool sp_server_serving(sp_server *s, sp_api_error *e);

/* ---- rerank.c: POST /v1/rerank (sp_handle_rerank) */
/* The reranker of s->model (a cross-encoder, or a decoder under
 * --rerank), or the reason in s->rerank_refusal; false (a line on stderr)
 * when a model asked to rerank cannot. */
bool sp_rerank_load(sp_server *s);

/* ---- adapters.c: LoRA adapters (vLLM's load/unload, llama-server's list) */
/* Mount `path` as `name` (--lora NAME=PATH, POST /v1/load_lora_adapter). */
bool sp_adapters_add(sp_server *s, const char *name, const char *path,
                     sp_api_error *e);
/* The options' --lora-dir and --lora NAME=PATH; false after a one-line
 * message. */
bool sp_mount_cli_adapters(sp_server *s);
/* The adapter request `r` asks for (llama-server's lora id, mlx_lm.server's
 * adapters, or `model` naming one) into r->gen; on success the table stays
 * locked until sp_adapters_unlock (call it right after the submit). */
bool sp_adapters_select_lock(sp_server *s, sp_api_request *r, sp_api_error *e);
void sp_adapters_unlock(sp_server *s);
/* Whether a mounted adapter has the content identity that `key` (a
 * spindle_adapter_key: the identity, then a request's scale) records: its
 * name into name[cap]. Else false, with the mounted adapters and their
 * identities ("NAME (identity HEX)", comma-separated; "none") in
 * loaded[cap], for the message. */
bool sp_adapters_find_identity(sp_server *s,
                               const unsigned char key[SPINDLE_ADAPTER_KEY_BYTES],
                               char *name, char *loaded, size_t cap);
/* A spindle_adapter_key's identity (its first SP_ADAPTER_IDENTITY_BYTES)
 * as lowercase hex into hex[2 * SP_ADAPTER_IDENTITY_BYTES + 1], and the
 * scale it records into *scale. */
#define SP_ADAPTER_IDENTITY_BYTES (SPINDLE_ADAPTER_KEY_BYTES - (int)sizeof(float))
void sp_adapter_key_describe(const unsigned char key[SPINDLE_ADAPTER_KEY_BYTES],
                             char *hex, float *scale);
/* The Gateway API Inference Extension's vllm:lora_requests_info gauge. */
void sp_adapters_render_metrics(sp_server *s, sp_strbuf *out);
/* vLLM's /v1/models entries of the adapters ({id, object, created,
 * owned_by, root: path, parent: the base}) appended to `data`. */
struct cJSON;
void sp_adapters_list_models(sp_server *s, struct cJSON *data);
/* The entry of the adapter mounted as `name`, or NULL. */
struct cJSON *sp_adapters_model(sp_server *s, const char *name);
/* ---- routes.c: the served model's /v1/models entry (id, object, created,
 * owned_by, meta: context_length and vocab_size once loaded) */
struct cJSON *sp_server_model_json(sp_server *s);

/* Whether `model` names the served model itself. */
bool sp_is_base_model(const sp_server *s, const char *model);

/* ---- webui.c */
extern const char sp_webui_html[];

#endif
