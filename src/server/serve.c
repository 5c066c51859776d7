/* sp_server_run: listen first (GET /health says 503 while loading), load
 * the model, tokenizer and engine, serve, and on SIGINT/SIGTERM shut down
 * in order: stop accepting, let requests in flight finish until the
 * deadline, cancel the rest, close the connections, free the engine. */
#include "server/http.h"
#include "server/kv_events.h"
#include "server/model_set.h"
#include "server/images.h"
#include "server/slots.h"
#include "server/reply.h"
#include "server/state.h"
#include "base/log.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void sp_server_defaults(sp_server_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 4;
    o->queue_size = 64;
    o->default_max_tokens = 512;
    o->max_body_bytes = 8u << 20;
    o->max_header_bytes = 64u << 10;
    o->max_connections = 128;
    o->idle_timeout_s = 60;
    o->read_timeout_s = 30;
    o->shutdown_timeout_s = 10;
    o->remote_media_timeout_s = 10;
    o->checkpoint_every = 64;
}

/* The signal thread: SIGINT and SIGTERM are blocked everywhere and taken
 * here with sigwait, so no handler runs in the middle of library code. */
typedef struct signal_watch {
    pthread_t thread;
    sigset_t set;
    sp_server *srv;
} signal_watch;

static void *watch_signals(void *arg) {
    signal_watch *w = arg;
    int sig = 0;
    sigwait(&w->set, &sig);
    pthread_mutex_lock(&w->srv->lock);
    w->srv->stop_requested = true;
    pthread_cond_broadcast(&w->srv->changed);
    pthread_mutex_unlock(&w->srv->lock);
    return NULL;
}

static bool start_signal_watch(signal_watch *w, sp_server *s) {
    w->srv = s;
    sigemptyset(&w->set);
    sigaddset(&w->set, SIGINT);
    sigaddset(&w->set, SIGTERM);
    signal(SIGPIPE, SIG_IGN);
    return pthread_sigmask(SIG_BLOCK, &w->set, NULL) == 0 &&
           pthread_create(&w->thread, NULL, watch_signals, w) == 0;
}

static void stop_signal_watch(signal_watch *w) {
    bool fired;
    pthread_mutex_lock(&w->srv->lock);
    fired = w->srv->stop_requested;
    pthread_mutex_unlock(&w->srv->lock);
    if (!fired) pthread_kill(w->thread, SIGTERM);   /* ends its sigwait */
    pthread_join(w->thread, NULL);
}

/* --spec draft: the draft model, loaded as the target (its own threads,
 * context and KV type), whose tokenizer must be the target's. --spec mtp:
 * a companion directory (--mtp DIR, --draft-model DIR), else the target
 * must carry its head. */
static spindle_status load_draft(sp_server *s, const spindle_load_options *lo,
                                 spindle_error *err) {
    if (s->opts.spec.mode == SPINDLE_SPEC_MTP && s->opts.draft_path)
        return spindle_mtp_head_load(s->model, s->opts.draft_path,
                                     &s->opts.spec.mtp_head, err);
    if (s->opts.spec.mode == SPINDLE_SPEC_MTP && !spindle_model_has_mtp(s->model)) {
        snprintf(err->message, sizeof err->message,
                 "--spec mtp: %s has no multi-token-prediction head "
                 "(mtp.* weights)", spindle_model_dir(s->model));
        return SPINDLE_ERR_UNSUPPORTED;
    }
    if (s->opts.spec.mode != SPINDLE_SPEC_DRAFT) return SPINDLE_OK;
    /* The draft model's blocks are not the served model's: no events. */
    spindle_load_options draft = *lo;
    draft.kv_events = NULL;
    draft.kv_events_user = NULL;
    spindle_status st = spindle_model_load(s->opts.draft_path, &draft, &s->draft_model, err);
    if (!st) st = spindle_spec_check_draft(s->model, s->draft_model, err);
    if (!st && spindle_model_vocab_size(s->draft_model) != spindle_model_vocab_size(s->model))
        sp_log(SPINDLE_LOG_WARN, "the draft model's vocabulary (%d) differs "
                                 "from the target's (%d)",
                spindle_model_vocab_size(s->draft_model), spindle_model_vocab_size(s->model));
    s->opts.spec.draft_model = s->draft_model;
    return st;
}

/* The pool and, for the default, its rule: --parallel contexts of --ctx
 * tokens, unless available memory capped it. */
static void print_kv_pool(const sp_server *s, const spindle_kv_pool_info *kv) {
    const int ctx = spindle_model_context_length(s->model), par = s->opts.parallel;
    const long long want = (long long)par * ((ctx + kv->block_tokens - 1) / kv->block_tokens);
    char rule[160] = "";
    if (!s->opts.kv_bytes && kv->blocks < want)
        snprintf(rule, sizeof rule, ", capped at 90%% of available memory (--parallel %d x "
                 "--ctx %d needs %lld blocks)", par, ctx, want);
    else if (!s->opts.kv_bytes)
        snprintf(rule, sizeof rule, ", --parallel %d x --ctx %d tokens (--kv-budget for more)",
                 par, ctx);
    sp_log(SPINDLE_LOG_INFO, "KV pool %.1f MiB: %d blocks of %d tokens (%zu bytes each)%s",
           (double)kv->budget_bytes / (1 << 20), kv->blocks, kv->block_tokens,
           kv->block_bytes, rule);
}

bool sp_server_load(sp_server *s) {
    const sp_server_options *o = &s->opts;
    spindle_error err = {0};
    spindle_load_options lo = {.n_threads = o->threads, .max_context = o->ctx,
                               .kv_type = o->kv_type, .use_mmap = o->use_mmap,
                               .kv_bytes = o->kv_bytes,
                               .kv_sequences = o->parallel,
                               .prompt_cache_dir = o->prompt_cache_dir,
                               .prompt_cache_disk_bytes =
                                   o->prompt_cache_disk_bytes};
    if (o->kv_events_endpoint) {
        char why[512];
        s->kv_events = sp_kv_events_start(o->kv_events_endpoint,
                                          o->kv_events_topic, why, sizeof why);
        if (!s->kv_events) {
            sp_log(SPINDLE_LOG_ERROR, "%s", why);
            return false;
        }
        lo.kv_events = sp_kv_events_hook;
        lo.kv_events_user = s->kv_events;
        sp_log(SPINDLE_LOG_INFO, "KV events on %s (topic \"%s\")",
               o->kv_events_endpoint, o->kv_events_topic ? o->kv_events_topic : "");
    }
    spindle_engine_options eo = spindle_engine_defaults();
    eo.max_seqs = o->parallel;
    if (o->max_batch_tokens) eo.max_batch_tokens = o->max_batch_tokens;
    if (eo.max_batch_tokens < eo.max_seqs) eo.max_batch_tokens = eo.max_seqs;
    eo.background = true;
    spindle_status st = spindle_model_load(o->model_path, &lo, &s->model, &err);
    if (!st) st = spindle_tokenizer_load(spindle_model_dir(s->model), &s->tok, &err);
    if (!st && o->chat_template)
        st = spindle_tokenizer_set_chat_template(s->tok, o->chat_template, &err);
    if (!st) st = load_draft(s, &lo, &err);
    if (!st && spindle_model_has_logits(s->model))
        st = spindle_engine_new(s->model, &eo, &s->engine, &err);
    if (st) {
        sp_log(SPINDLE_LOG_ERROR, "%s", err.message[0] ? err.message
                                                : spindle_status_name(st));
        return false;
    }
    if (!sp_embeddings_load(s) || !sp_rerank_load(s)) return false;
    if (s->engine && !sp_images_load(s)) return false;
    if (!s->engine && !s->embedder && !s->reranker) {
        sp_log(SPINDLE_LOG_ERROR, "%s", s->embed_refusal);
        return false;
    }
    if (!sp_mount_cli_adapters(s)) return false;
    spindle_kv_pool_info kv;
    if (!spindle_model_kv_pool_info(s->model, &kv, &err) && kv.block_bytes > 0)
        print_kv_pool(s, &kv);
    if (o->prompt_cache_dir && kv.disk_budget_bytes)
        sp_log(SPINDLE_LOG_INFO, "prompt cache %s: %d files, %.1f of %.1f MiB", o->prompt_cache_dir, kv.disk_files,
                (double)kv.disk_bytes / (1 << 20),
                (double)kv.disk_budget_bytes / (1 << 20));
    else if (o->prompt_cache_dir)
        sp_log(SPINDLE_LOG_INFO, "no prompt cache: this model has no prefix "
                                 "index (no full-attention layer)");
    int32_t eos = spindle_tokenizer_eos_id(s->tok);
    if (eos >= 0) s->stop_ids[s->n_stop_ids++] = eos;
    s->diffusion = spindle_model_diffusion_info(s->model, NULL);
    s->limits.vocab_size = spindle_model_vocab_size(s->model);
    s->context_length = spindle_model_context_length(s->model);
    sp_reply_detect_format(s);
    return true;
}

/* Wait on s->changed until pred(s) or `deadline` (CLOCK_REALTIME); true
 * when pred holds. Called with s->lock held. */
static bool wait_until(sp_server *s, bool (*pred)(const sp_server *), const struct timespec *deadline) {
    while (!pred(s))
        if (pthread_cond_timedwait(&s->changed, &s->lock, deadline) != 0 && !pred(s))
            return false;
    return true;
}

static bool stop_requested(const sp_server *s) { return s->stop_requested; }
static bool idle(const sp_server *s) { return s->in_flight == 0; }

static struct timespec in_seconds(int secs) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += secs;
    return t;
}

void sp_server_drain(sp_server *s) {
    atomic_store(&s->phase, SP_PHASE_DRAINING);
    sp_http_stop_listening(s);
    if (s->models) {
        sp_model_set_drain(s->models);
        return;
    }
    pthread_mutex_lock(&s->lock);
    struct timespec deadline = in_seconds(s->opts.shutdown_timeout_s);
    bool done = wait_until(s, idle, &deadline);
    int left = s->in_flight;
    pthread_mutex_unlock(&s->lock);
    if (!done) {
        sp_log(SPINDLE_LOG_INFO, "cancelling %d request(s) still running", left);
        sp_cancel_all_jobs(s);
        pthread_mutex_lock(&s->lock);
        /* Cancelled requests end at the engine's next step; their
         * connections then write their last bytes. */
        deadline = in_seconds(10);
        wait_until(s, idle, &deadline);
        pthread_mutex_unlock(&s->lock);
    }
}

void sp_server_free(sp_server *s) {
    if (!s) return;
    sp_http_stop(s);
    sp_model_set_free(s->models);   /* after the connections that used them */
    spindle_engine_free(s->engine);
    sp_images_unload(s);   /* borrows the model */
    sp_slots_free(s->slots);     /* their snapshots go before the model */
    sp_adapters_free(&s->adapters);
    sp_responses_store_free(&s->responses);
    sp_server_grammars_free(s);  /* before the vocabulary they were built on */
    spindle_grammar_vocab_free(s->grammar_vocab);
    spindle_embedder_free(s->embedder);
    spindle_reranker_free(s->reranker);
    spindle_tokenizer_free(s->tok);
    spindle_mtp_head_free(s->opts.spec.mtp_head);  /* borrows the model */
    spindle_model_free(s->model);
    spindle_model_free(s->draft_model);
    sp_kv_events_stop(s->kv_events);   /* after the model, its only caller */
    sp_metrics_destroy(&s->own_metrics);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->diffusion_lock);
    free(s);
}

sp_server *sp_server_new(const sp_server_options *o) {
    sp_server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->opts = *o;
    s->started = time(NULL);
    s->model_names[0] = o->alias ? o->alias : o->model_path;
    s->model_names[1] = o->model_path;
    s->limits = (sp_api_limits){.model_names = s->model_names, .n_model_names = 2,
                                .default_max_tokens = o->default_max_tokens,
                                .n_slots = o->parallel,
                                .allow_remote_media = o->remote_media_hosts != NULL};
    atomic_init(&s->phase, SP_PHASE_LOADING);
    atomic_init(&s->next_id, 1);
    s->ids = &s->next_id;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->diffusion_lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    sp_adapters_init(&s->adapters);
    sp_responses_store_init(&s->responses, SP_SERVER_RESPONSES_KEPT, SP_SERVER_RESPONSES_BYTES);
    sp_metrics_init(&s->own_metrics);
    s->metrics = &s->own_metrics;
    if (!(s->slots = sp_slots_new(o->parallel))) {
        sp_server_free(s);
        return NULL;
    }
    return s;
}

int sp_server_run(const sp_server_options *o) {
    sp_server *s = sp_server_new(o);
    if (!s) {
        sp_log(SPINDLE_LOG_ERROR, "out of memory");
        return 1;
    }
    char why[512] = "";
    if (sp_model_set_wanted(o) && !(s->models = sp_model_set_new(s, why, sizeof why))) {
        sp_log(SPINDLE_LOG_ERROR, "%s", why);
        sp_server_free(s);
        return 1;
    }
    signal_watch w;
    if (!start_signal_watch(&w, s)) {
        sp_log(SPINDLE_LOG_ERROR, "cannot start the signal thread");
        sp_server_free(s);
        return 1;
    }
    char bound[128];
    bool ok = sp_http_start(s, bound, sizeof bound);
    if (ok) {
        sp_log(SPINDLE_LOG_INFO, "listening on http://%s (loading %s)", bound,
                s->models ? "the pinned models" : o->model_path);
        ok = s->models ? sp_model_set_load_pinned(s->models) : sp_server_load(s);
    }
    if (ok) {
        atomic_store(&s->phase, SP_PHASE_READY);
        sp_log(SPINDLE_LOG_INFO, "ready");
        pthread_mutex_lock(&s->lock);
        while (!stop_requested(s)) pthread_cond_wait(&s->changed, &s->lock);
        pthread_mutex_unlock(&s->lock);
        sp_log(SPINDLE_LOG_INFO, "shutting down");
        sp_server_drain(s);
    }
    stop_signal_watch(&w);
    sp_server_free(s);
    if (ok) sp_log(SPINDLE_LOG_INFO, "stopped");
    return ok ? 0 : 1;
}
