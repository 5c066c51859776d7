/* spindle serve: the OpenAI-compatible HTTP server (src/server/). */
#include "cli/args.h"
#include "cli/chat_template_args.h"
#include "cli/commands.h"
#include "cli/spec_args.h"
#include "server/server.h"

#include <stdio.h>
#include <string.h>

static const char *serve_usage =
    "usage: spindle serve -m MODEL [options]\n"
    "       spindle serve -m NAME=PATH [-m NAME=PATH ...] [--model-dir DIR] [options]\n"
    "  -m, --model PATH        model directory, .gguf file or Hugging Face repo id\n"
    "                          (hf://ORG/NAME[:QUANT] downloads it first; --offline:\n"
    "                          from the HF cache only)\n"
    "  --alias NAME            the model's name in the API (default: MODEL as given)\n"
    "  -m NAME=PATH            serve several models (repeatable); a request's\n"
    "                          \"model\" picks one, loaded on first use\n"
    "  --model-dir DIR         serve each subdirectory and .gguf file of DIR as a\n"
    "                          model named by its file name\n"
    "  --models-memory BYTES   (suffix K/M/G) unload the least recently used idle\n"
    "                          model when the loaded ones' files and KV pools\n"
    "                          would exceed this (default: no limit)\n"
    "  --pin NAME              load model NAME at start and never unload it\n"
    "  --host ADDR             listen address (default 127.0.0.1)\n"
    "  --port N                listen port (default 8080; 0: any free port)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' (not on /health, /)\n"
    "  --cors ORIGIN           allow browser requests from ORIGIN ('*': any; default off)\n"
    "  --parallel N            sequences generating at once (default 4)\n"
    "  --queue N               requests waiting beyond those, then 429 (default 64)\n"
    "  --max-batch-tokens N    rows per engine step (default 512)\n"
    "  --max-tokens N          tokens per answer when a request gives none (default 512)\n"
    "  -t, --threads N         compute threads (default: all cores)\n"
    "  --ctx N                 context limit (default: the model's)\n"
    SP_ARG_KV_TYPE_HELP
    SP_ARG_MMAP_HELP
    "  --lora NAME=PATH        mount a LoRA adapter (PEFT, mlx-lm or LoRA GGUF) that\n"
    "                          requests pick by model NAME (repeatable, at most 64)\n"
    "  --lora-dir DIR          let POST /v1/load_lora_adapter load adapters from DIR\n"
    "                          (lora_path relative to it) and unload them (default off)\n"
    "  --allow-remote-media HOSTS  fetch http(s) image URLs on these hosts (comma-\n"
    "                          separated, or '*' for any; default: refused). The\n"
    "                          server then reaches what clients name: list hosts\n"
    "  --remote-media-timeout S    a remote image's whole fetch (default 10)\n"
    "  --max-body BYTES        largest request body, else 413 (default 8388608)\n"
    "  --max-header BYTES      header memory per connection (default 65536)\n"
    "  --max-connections N     open connections at most (default 128)\n"
    "  --idle-timeout S        close a connection silent for S seconds (default 60)\n"
    "  --read-timeout S        close a connection whose request body takes longer\n"
    "                          than S seconds to arrive (default 30)\n"
    "  --shutdown-timeout S    on SIGINT/SIGTERM, let requests finish for S seconds,\n"
    "                          then cancel them (default 10)\n"
    "  --checkpoint-dir DIR    checkpoint each request in flight under DIR/<id>.ckpt;\n"
    "                          after a restart, a request with \"resume_id\": <id>\n"
    "                          continues it and streams only what follows\n"
    "  --checkpoint-every N    generated tokens between checkpoints (default 64)\n"
    "  --slot-save-path DIR    POST /slots/{id}?action=save|restore|erase files\n"
    SP_ARG_CHAT_TEMPLATE_HELP
    SP_ARG_POOLING_HELP
    "  --rerank                POST /v1/rerank scores with a decoder's yes/no\n"
    "                          logits (Qwen3-Reranker; --reranking too); a\n"
    "                          cross-encoder serves it without\n"
    SP_ARG_PROMPT_CACHE_HELP
    "  --kv-events ENDPOINT    publish the prefix cache's blocks stored / removed as\n"
    "                          vLLM's KV-cache events (ZeroMQ, msgpack): tcp://*:PORT\n"
    "                          binds, tcp://HOST:PORT connects (default off)\n"
    "  --kv-events-topic T     the events' topic frame, e.g. kv@POD@MODEL for\n"
    "                          llm-d (default empty)\n"
    SP_ARG_SPEC_HELP
    "                          (requests may change K: num_draft_tokens or\n"
    "                          speculative.n_max, and speculative.n_min)\n"
    "  --verbose               one line per request on stderr\n";

static bool int_opt(const char *a, const char *v, long lo, long hi, int *out) {
    long n;
    if (!sp_arg_int(a, v, lo, hi, &n)) return false;
    *out = (int)n;
    return true;
}

static bool size_opt(const char *a, const char *v, long lo, long hi, size_t *out) {
    long n;
    if (!sp_arg_int(a, v, lo, hi, &n)) return false;
    *out = (size_t)n;
    return true;
}

/* Whether -m's value is NAME=PATH: a name before '=' with no '/' in it
 * (a path that holds '=' stays a path). */
static bool named_model(const char *v) {
    const char *eq = strchr(v, '=');
    return eq && eq > v && !memchr(v, '/', (size_t)(eq - v));
}

/* 0: parsed; 1: --help printed; 2: a usage error (printed). */
static int parse(int argc, char **argv, sp_server_options *o) {
    static const char *named[256], *pins[256];
    spindle_load_options cache = {0};
    int rc;
    sp_spec_args spec = {.spec = o->spec};
    sp_chat_template_args tmpl = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        bool ok = true;
        int spec_arg;
#define IS(name) !strcmp(a, name)
#define VALUE() if (!(v = sp_arg_value(argc, argv, &i))) return 2
        if (sp_arg_is_help(a)) {
            fputs(serve_usage, stdout);
            return 1;
        } else if (IS("-m") || IS("--model")) {
            VALUE();
            if (!named_model(v)) o->model_path = v;
            else if (!(ok = o->n_named_models < 256))
                fprintf(stderr, "spindle serve: at most 256 -m NAME=PATH options\n");
            else named[o->n_named_models++] = v;
            o->named_models = named;
        } else if (IS("--model-dir")) { VALUE(); o->model_dir = v;
        } else if (IS("--models-memory")) { VALUE(); ok = sp_arg_bytes(a, v, &o->models_memory);
        } else if (IS("--pin")) {
            VALUE();
            if (!(ok = o->n_pins < 256)) fprintf(stderr, "spindle serve: at most 256 --pin options\n");
            else pins[o->n_pins++] = v;
            o->pins = pins;
        } else if (IS("--alias")) { VALUE(); o->alias = v;
        } else if (IS("--host")) { VALUE(); o->host = v;
        } else if (IS("--port")) { VALUE(); ok = int_opt(a, v, 0, 65535, &o->port);
        } else if (IS("--api-key")) { VALUE(); o->api_key = v;
        } else if (IS("--cors")) { VALUE(); o->cors_origin = v;
        } else if (IS("--parallel")) { VALUE(); ok = int_opt(a, v, 1, 1024, &o->parallel);
        } else if (IS("--queue")) { VALUE(); ok = int_opt(a, v, 0, 1 << 20, &o->queue_size);
        } else if (IS("--max-batch-tokens")) {
            VALUE(); ok = int_opt(a, v, 1, 1 << 20, &o->max_batch_tokens);
        } else if (IS("--max-tokens")) {
            VALUE(); ok = int_opt(a, v, 1, 1 << 24, &o->default_max_tokens);
        } else if (IS("-t") || IS("--threads")) { VALUE(); ok = int_opt(a, v, 1, 1024, &o->threads);
        } else if (IS("--ctx")) { VALUE(); ok = int_opt(a, v, 1, 1 << 24, &o->ctx);
        } else if (IS("--kv-budget")) { VALUE(); ok = sp_arg_bytes(a, v, &o->kv_bytes);
        } else if (IS("--kv-type")) { VALUE(); ok = sp_arg_kv_type(a, v, &o->kv_type);
        } else if (IS("--mmap")) { o->use_mmap = true;
        } else if (IS("--pooling")) { VALUE(); ok = sp_arg_pooling(a, v, &o->pooling);
        } else if (IS("--rerank") || IS("--reranking")) { o->rerank = true;
        } else if (IS("--lora")) {
            VALUE();
            static const char *loras[64];
            ok = o->n_loras < 64;
            if (ok) loras[o->n_loras++] = v;
            else fprintf(stderr, "spindle serve: at most 64 --lora options\n");
            o->loras = loras;
        } else if (IS("--max-body")) {
            VALUE(); ok = size_opt(a, v, 1, 1L << 32, &o->max_body_bytes);
        } else if (IS("--max-header")) {
            VALUE(); ok = size_opt(a, v, 4096, 1L << 24, &o->max_header_bytes);
        } else if (IS("--max-connections")) {
            VALUE(); ok = int_opt(a, v, 1, 65536, &o->max_connections);
        } else if (IS("--idle-timeout")) { VALUE(); ok = int_opt(a, v, 1, 86400, &o->idle_timeout_s);
        } else if (IS("--read-timeout")) { VALUE(); ok = int_opt(a, v, 1, 86400, &o->read_timeout_s);
        } else if (IS("--shutdown-timeout")) {
            VALUE(); ok = int_opt(a, v, 0, 86400, &o->shutdown_timeout_s);
        } else if (IS("--checkpoint-dir")) { VALUE(); o->checkpoint_dir = v;
        } else if (IS("--checkpoint-every")) {
            VALUE(); ok = int_opt(a, v, 1, 1 << 24, &o->checkpoint_every);
        } else if (IS("--slot-save-path")) { VALUE(); o->slot_save_path = v;
        } else if (IS("--lora-dir")) { VALUE(); o->lora_dir = v;
        } else if (IS("--kv-events")) { VALUE(); o->kv_events_endpoint = v;
        } else if (IS("--kv-events-topic")) { VALUE(); o->kv_events_topic = v;
        } else if (IS("--allow-remote-media")) { VALUE(); o->remote_media_hosts = v;
        } else if (IS("--remote-media-timeout")) {
            VALUE(); ok = int_opt(a, v, 1, 3600, &o->remote_media_timeout_s);
        } else if (IS("--verbose")) { o->log_requests = true;
        } else if ((rc = sp_arg_prompt_cache(argc, argv, &i, &cache)) != 0) {
            if (rc < 0) return 2;
            o->prompt_cache_dir = cache.prompt_cache_dir;
            o->prompt_cache_disk_bytes = cache.prompt_cache_disk_bytes;
        } else if ((rc = sp_arg_chat_template(argc, argv, &i, &tmpl)) != 0) {
            if (rc < 0) return 2;
            o->chat_template = tmpl.name_or_path;
            o->chat_template_kwargs = tmpl.kwargs;
        } else if ((spec_arg = sp_arg_spec(argc, argv, &i, &spec)) != 0) {
            ok = spec_arg > 0;
        } else {
            return sp_arg_unknown("serve", a);
        }
        if (!ok) return 2;
#undef IS
#undef VALUE
    }
    if (!o->model_path && !o->n_named_models && !o->model_dir) {
        fprintf(stderr, "spindle serve: -m MODEL (or -m NAME=PATH, --model-dir DIR) "
                        "is required\n");
        return 2;
    }
    if ((o->n_pins || o->models_memory) && !o->n_named_models && !o->model_dir) {
        fprintf(stderr, "spindle serve: %s applies to several models (-m NAME=PATH, "
                        "--model-dir DIR)\n", o->n_pins ? "--pin" : "--models-memory");
        return 2;
    }
    if (spec.spec.mode == SPINDLE_SPEC_DRAFT && !spec.draft_path) {
        fprintf(stderr, "spindle serve: --spec draft needs --draft-model PATH\n");
        return 2;
    }
    o->spec = spec.spec;
    o->draft_path = spec.draft_path;
    return 0;
}

int sp_cmd_serve(int argc, char **argv) {
    sp_server_options o;
    sp_server_defaults(&o);
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    spindle_set_log(sp_cli_log, "spindle serve");
    return sp_server_run(&o);
}
