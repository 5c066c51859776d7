/* KV-cache events over ZeroMQ with msgpack (kv_events.h). */
#include "server/kv_events.h"

#include <msgpack.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

/* Tokens a queued block keeps: the pool's blocks are 32; a larger block
 * (a build with another SP_KV_BLOCK_TOKENS) is dropped and counted rather
 * than truncated. */
#define EVENT_TOKENS 64
/* Events held for the publisher thread: about 5 MiB; a burst beyond it
 * (thousands of blocks published faster than a message goes out) drops. */
#define QUEUE_EVENTS 16384
/* Events per message at most, so a backlog goes out in bounded batches. */
#define BATCH_EVENTS 1024
/* How long the thread waits for work or a subscriber before it looks at
 * the stop flag again. */
#define POLL_MS 100

enum { EV_STORED, EV_REMOVED, EV_CLEARED };

typedef struct kv_record {
    int kind;
    bool first;
    uint32_t adapter_id;
    int n_tokens;
    uint64_t hash, parent;
    int32_t tokens[EVENT_TOKENS];
} kv_record;

struct sp_kv_events {
    void *ctx, *sock;
    char *endpoint, *topic;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    /* under lock */
    kv_record *ring;
    int head, count;
    bool stopping;
    uint64_t queued, sent, dropped;
    /* the publisher thread's own */
    bool subscribed;
    uint64_t seq;
    kv_record *batch;
};

static void push(sp_kv_events *e, const kv_record *r) {
    pthread_mutex_lock(&e->lock);
    if (e->count == QUEUE_EVENTS) {
        e->dropped++;
    } else {
        e->ring[(e->head + e->count) % QUEUE_EVENTS] = *r;
        e->queued++;
        if (e->count++ == 0) pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
}

void sp_kv_events_hook(const spindle_kv_event *ev, void *user) {
    sp_kv_events *e = user;
    kv_record r = {.kind = ev->kind == SPINDLE_KV_BLOCK_STORED ? EV_STORED
                                                              : EV_REMOVED,
                   .first = ev->first, .adapter_id = ev->adapter_id,
                   .hash = ev->hash, .parent = ev->parent};
    if (r.kind == EV_STORED) {
        if (ev->n_tokens < 0 || ev->n_tokens > EVENT_TOKENS) {
            pthread_mutex_lock(&e->lock);
            e->dropped++;
            pthread_mutex_unlock(&e->lock);
            return;
        }
        r.n_tokens = ev->n_tokens;
        memcpy(r.tokens, ev->tokens, (size_t)ev->n_tokens * sizeof *r.tokens);
    }
    push(e, &r);
}

/* ------------------------------------------------------------ encoding */

static void pack_str(msgpack_packer *pk, const char *s) {
    const size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* Whether record r continues the event that record prev opened: the next
 * block of the same chain (vLLM sends a request's new blocks as one
 * BlockStored), or another removal. */
static bool continues(const kv_record *prev, const kv_record *r) {
    if (prev->kind != r->kind) return false;
    if (r->kind == EV_REMOVED) return true;
    return r->kind == EV_STORED && !r->first &&
           r->adapter_id == prev->adapter_id && r->parent == prev->hash &&
           r->n_tokens == prev->n_tokens;
}

/* Records [at, at + n) as one event. */
static void pack_event(msgpack_packer *pk, const kv_record *r, int n) {
    if (r->kind == EV_CLEARED) {
        msgpack_pack_array(pk, 1);
        pack_str(pk, "AllBlocksCleared");
        return;
    }
    const bool stored = r->kind == EV_STORED;
    msgpack_pack_array(pk, stored ? 8 : 3);
    pack_str(pk, stored ? "BlockStored" : "BlockRemoved");
    msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++) msgpack_pack_uint64(pk, r[i].hash);
    if (!stored) {
        pack_str(pk, "CPU");
        return;
    }
    if (r->first) msgpack_pack_nil(pk);
    else msgpack_pack_uint64(pk, r->parent);
    msgpack_pack_array(pk, (size_t)n * (size_t)r->n_tokens);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < r[i].n_tokens; t++)
            msgpack_pack_int32(pk, r[i].tokens[t]);
    msgpack_pack_int(pk, r->n_tokens);                        /* block_size */
    if (r->adapter_id) msgpack_pack_uint32(pk, r->adapter_id); /* lora_id */
    else msgpack_pack_nil(pk);
    pack_str(pk, "CPU");                                        /* medium */
    msgpack_pack_nil(pk);                                       /* lora_name */
}

/* The EventBatch of records[0, n): [ts, events, data_parallel_rank]. */
static void pack_batch(msgpack_packer *pk, const kv_record *rec, int n) {
    int events = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || !continues(&rec[i - 1], &rec[i])) events++;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    msgpack_pack_array(pk, 3);
    msgpack_pack_double(pk, (double)now.tv_sec + now.tv_nsec / 1e9);
    msgpack_pack_array(pk, (size_t)events);
    for (int i = 0; i < n;) {
        int run = 1;
        while (i + run < n && continues(&rec[i + run - 1], &rec[i + run])) run++;
        pack_event(pk, &rec[i], run);
        i += run;
    }
    msgpack_pack_int(pk, 0);
}

static void send_batch(sp_kv_events *e, const kv_record *rec, int n) {
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    pack_batch(&pk, rec, n);
    unsigned char seq[8];
    for (int i = 0; i < 8; i++) seq[i] = (unsigned char)(e->seq >> (56 - 8 * i));
    e->seq++;
    /* A publishing socket never blocks: beyond its high-water mark a
     * message is dropped by ZeroMQ, as vLLM's is. */
    zmq_send(e->sock, e->topic, strlen(e->topic), ZMQ_SNDMORE);
    zmq_send(e->sock, seq, sizeof seq, ZMQ_SNDMORE);
    zmq_send(e->sock, buf.data ? buf.data : "", buf.size, 0);
    msgpack_sbuffer_destroy(&buf);
    pthread_mutex_lock(&e->lock);
    e->sent += (uint64_t)n;
    pthread_mutex_unlock(&e->lock);
}

/* ------------------------------------------------------ publisher thread */

/* Read the subscriptions that arrived (an XPUB socket hands them up as
 * messages whose first byte is 1), waiting up to `ms` for one. */
static void read_subscriptions(sp_kv_events *e, int ms) {
    zmq_pollitem_t item = {.socket = e->sock, .events = ZMQ_POLLIN};
    if (zmq_poll(&item, 1, ms) <= 0) return;
    unsigned char msg[256];
    int n;
    while ((n = zmq_recv(e->sock, msg, sizeof msg, ZMQ_DONTWAIT)) >= 0)
        if (n > 0 && msg[0] == 1) e->subscribed = true;
}

static bool stopping(sp_kv_events *e) {
    pthread_mutex_lock(&e->lock);
    const bool s = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return s;
}

/* Up to BATCH_EVENTS queued records into e->batch, waiting up to POLL_MS
 * for the first; -1 when stopping with nothing left. */
static int take(sp_kv_events *e) {
    pthread_mutex_lock(&e->lock);
    if (!e->count && !e->stopping) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += POLL_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&e->wake, &e->lock, &t);
    }
    int n = e->count < BATCH_EVENTS ? e->count : BATCH_EVENTS;
    for (int i = 0; i < n; i++) e->batch[i] = e->ring[(e->head + i) % QUEUE_EVENTS];
    e->head = (e->head + n) % QUEUE_EVENTS;
    e->count -= n;
    if (!n && e->stopping) n = -1;
    pthread_mutex_unlock(&e->lock);
    return n;
}

static void *publisher(void *arg) {
    sp_kv_events *e = arg;
    for (;;) {
        if (!e->subscribed) {
            /* Hold the events until someone listens: a publishing socket
             * would drop them. */
            if (stopping(e)) break;
            read_subscriptions(e, POLL_MS);
            continue;
        }
        read_subscriptions(e, 0);
        const int n = take(e);
        if (n < 0) break;
        if (n > 0) send_batch(e, e->batch, n);
    }
    return NULL;
}

/* ------------------------------------------------------------- lifecycle */

static bool binds(const char *endpoint) {
    return strchr(endpoint, '*') || strstr(endpoint, "::") ||
           !strncmp(endpoint, "ipc://", 6) || !strncmp(endpoint, "inproc://", 9);
}

static void release(sp_kv_events *e) {
    if (e->sock) zmq_close(e->sock);
    if (e->ctx) zmq_ctx_term(e->ctx);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->lock);
    free(e->ring);
    free(e->batch);
    free(e->endpoint);
    free(e->topic);
    free(e);
}

sp_kv_events *sp_kv_events_start(const char *endpoint, const char *topic,
                                 char *why, size_t why_len) {
    sp_kv_events *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    e->ring = malloc(QUEUE_EVENTS * sizeof *e->ring);
    e->batch = malloc(BATCH_EVENTS * sizeof *e->batch);
    e->endpoint = strdup(endpoint);
    e->topic = strdup(topic ? topic : "");
    e->ctx = e->ring && e->batch && e->endpoint && e->topic ? zmq_ctx_new() : NULL;
    e->sock = e->ctx ? zmq_socket(e->ctx, ZMQ_XPUB) : NULL;
    if (!e->sock) {
        snprintf(why, why_len, "--kv-events: cannot create a ZeroMQ socket: %s",
                 zmq_strerror(zmq_errno()));
        release(e);
        return NULL;
    }
    const int hwm = 100000, linger_ms = 1000;
    zmq_setsockopt(e->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(e->sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    const bool bind = binds(endpoint);
    if ((bind ? zmq_bind(e->sock, endpoint) : zmq_connect(e->sock, endpoint)) != 0) {
        snprintf(why, why_len, "--kv-events %s: cannot %s: %s (an endpoint is "
                 "tcp://HOST:PORT, tcp://*:PORT to bind, ipc://PATH or inproc://NAME)",
                 endpoint, bind ? "bind" : "connect", zmq_strerror(zmq_errno()));
        release(e);
        return NULL;
    }
    /* A new process holds no block: an indexer drops what it knew of the
     * previous one under this topic. */
    push(e, &(kv_record){.kind = EV_CLEARED});
    if (pthread_create(&e->thread, NULL, publisher, e) != 0) {
        snprintf(why, why_len, "--kv-events: cannot start the publisher thread");
        release(e);
        return NULL;
    }
    return e;
}

void sp_kv_events_stop(sp_kv_events *e) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    release(e);
}

/* ---------------------------------------------------------------- metrics */

/* A label value with Prometheus' escapes (backslash, quote, newline). */
static void label_value(sp_strbuf *out, const char *s) {
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') sp_strbuf_printf(out, "\\%c", *s);
        else if (*s == '\n') sp_strbuf_printf(out, "\\n");
        else sp_strbuf_printf(out, "%c", *s);
    }
}

void sp_kv_events_render_metrics(sp_kv_events *e, uint64_t hash_root,
                                 sp_strbuf *out) {
    pthread_mutex_lock(&e->lock);
    const unsigned long long queued = e->queued, sent = e->sent,
                             dropped = e->dropped;
    pthread_mutex_unlock(&e->lock);
    sp_strbuf_printf(out,
        "# HELP spindle_kv_events_total KV-cache events, one per block "
        "stored or removed and per clear: queued for the publisher, sent to "
        "subscribers, or dropped on a full queue.\n"
        "# TYPE spindle_kv_events_total counter\n"
        "spindle_kv_events_total{outcome=\"queued\"} %llu\n"
        "spindle_kv_events_total{outcome=\"sent\"} %llu\n"
        "spindle_kv_events_total{outcome=\"dropped\"} %llu\n"
        "# HELP spindle_kv_events_info The KV-event publisher (value 1): its "
        "endpoint, topic and the block hash chain's root (docs/deploy.md).\n"
        "# TYPE spindle_kv_events_info gauge\n"
        "spindle_kv_events_info{endpoint=\"", queued, sent, dropped);
    label_value(out, e->endpoint);
    sp_strbuf_printf(out, "\",topic=\"");
    label_value(out, e->topic);
    sp_strbuf_printf(out, "\",hash_root=\"0x%016llx\"} 1\n",
                     (unsigned long long)hash_root);
}
