/* `spindle serve`: an OpenAI-compatible HTTP server over the step engine.
 * The one header of server/ that the command line (cli/cmd_serve.c)
 * includes. */
#ifndef SP_SERVER_SERVER_H
#define SP_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "spindle.h"

typedef struct sp_server_options {
    const char *model_path;     /* -m: directory, .gguf or repo id */
    const char *alias;          /* the model's name in the API; NULL: model_path */
    const char *host;           /* listen address (numeric IPv4/IPv6) */
    int port;
    const char *api_key;        /* NULL: no authentication */
    const char *cors_origin;    /* NULL: no CORS headers */
    /* model and engine */
    int threads, ctx;
    spindle_kv_type kv_type;
    size_t kv_bytes;            /* 0: the default KV budget */
    bool use_mmap;
    int parallel;               /* sequences running at once */
    int queue_size;             /* requests waiting beyond those; then 429 */
    int max_batch_tokens;
    int default_max_tokens;
    /* limits */
    size_t max_body_bytes;      /* 413 beyond */
    size_t max_header_bytes;    /* per-connection header memory */
    int max_connections;
    int idle_timeout_s;         /* a connection silent this long is closed */
    int read_timeout_s;         /* a body not received within this: closed */
    int shutdown_timeout_s;     /* in-flight requests get this long on SIGTERM */
    bool log_requests;          /* one stderr line per request */
    /* durable state (durable.c, slots.c) */
    const char *checkpoint_dir; /* each request's checkpoint; NULL: none */
    int checkpoint_every;       /* tokens between checkpoints (default 64) */
    const char *slot_save_path; /* POST /slots/{id}?action=...; NULL: off */
    const char *prompt_cache_dir;   /* the on-disk prompt cache; NULL: off */
    size_t prompt_cache_disk_bytes; /* its budget (0: the default) */
    /* --kv-events ENDPOINT: the prefix index's changes as vLLM's KV-cache
     * events (kv_events.h); NULL: off. --kv-events-topic: the messages'
     * first frame (default empty, as vLLM's) */
    const char *kv_events_endpoint;
    const char *kv_events_topic;
    /* speculative decoding for every request (--spec, --num-draft-tokens,
     * ...; draft_model is set by the server once it loaded draft_path);
     * a request may change K and the minimum draft (job.c) */
    spindle_spec_params spec;
    const char *draft_path;     /* --draft-model for --spec draft */
    /* --chat-template: a built-in name or a Jinja file in place of the
     * model's template (NULL: the model's); --chat-template-kwargs: a JSON
     * object of template variables under each request's own */
    const char *chat_template;
    const char *chat_template_kwargs;
    /* --pooling: /v1/embeddings' pooling in place of the model's */
    spindle_pooling pooling;
    /* --rerank: /v1/rerank scores with a decoder's yes/no logits
     * (a cross-encoder serves it without) */
    bool rerank;
    /* --lora NAME=PATH, mounted at start (borrowed strings) */
    const char *const *loras;
    int n_loras;
    const char *lora_dir;       /* --lora-dir: the load route's folder; NULL: off */
    /* --allow-remote-media HOSTS: http(s) image URLs on these hosts
     * (comma-separated, or "*") are fetched; NULL: refused */
    const char *remote_media_hosts;
    int remote_media_timeout_s; /* --remote-media-timeout (default 10) */
    /* Several models (model_set.c): -m NAME=PATH (borrowed strings) and
     * --model-dir DIR's entries, loaded on a request's first use and
     * unloaded least recently used past --models-memory (0: no budget);
     * --pin NAME loads one at start and never unloads it. No NAME=PATH and
     * no --model-dir: the one model of model_path. */
    const char *const *named_models;
    int n_named_models;
    const char *model_dir;
    size_t models_memory;
    const char *const *pins;
    int n_pins;
} sp_server_options;

void sp_server_defaults(sp_server_options *o);

/* Listen, load the model (GET /health is 503 meanwhile), serve until
 * SIGINT/SIGTERM, then drain and stop. Returns the process exit status: 0
 * after a clean shutdown, 1 when the model or the socket fails. Prints its
 * own one-line errors and its listening line on stderr. */
int sp_server_run(const sp_server_options *o);

#endif
