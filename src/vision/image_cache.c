/* The encoded-image cache (image_cache.h). A doubly linked list, most
 * recently used first, searched from the front: it holds a few hundred
 * images at most (a Gemma 3 image's rows are megabytes), and a scan costs
 * microseconds beside an encode's seconds. */
#include "vision/image_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES];
    float *rows;
    size_t n_floats;
    struct entry *prev, *next;
} entry;

struct sp_image_cache {
    pthread_mutex_t mu;
    size_t max_bytes;
    entry *head, *tail;
    sp_image_cache_stats stats;
};

sp_image_cache *sp_image_cache_new(size_t max_bytes) {
    sp_image_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = max_bytes;
    return c;
}

static void unlink_entry(sp_image_cache *c, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(sp_image_cache *c, entry *e) {
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static void drop(sp_image_cache *c, entry *e) {
    unlink_entry(c, e);
    c->stats.bytes -= e->n_floats * sizeof(float);
    c->stats.entries--;
    free(e->rows);
    free(e);
}

void sp_image_cache_free(sp_image_cache *c) {
    if (!c) return;
    while (c->head) drop(c, c->head);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static entry *find(sp_image_cache *c, const unsigned char *digest) {
    for (entry *e = c->head; e; e = e->next)
        if (!memcmp(e->digest, digest, SPINDLE_SPAN_DIGEST_BYTES)) return e;
    return NULL;
}

bool sp_image_cache_get(sp_image_cache *c, const unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES],
                        size_t n_floats, float **rows) {
    *rows = NULL;
    if (!c) return false;
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, digest);
    if (e && e->n_floats == n_floats && (*rows = malloc(n_floats * sizeof **rows))) {
        memcpy(*rows, e->rows, n_floats * sizeof **rows);
        unlink_entry(c, e);
        push_front(c, e);
    }
    if (*rows) c->stats.hits++;
    else c->stats.misses++;
    pthread_mutex_unlock(&c->mu);
    return *rows != NULL;
}

void sp_image_cache_put(sp_image_cache *c, const unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES],
                        const float *rows, size_t n_floats) {
    const size_t bytes = n_floats * sizeof(float);
    if (!c || !n_floats || bytes > c->max_bytes) return;
    entry *e = malloc(sizeof *e);
    float *copy = e ? malloc(bytes) : NULL;
    if (!copy) {
        free(e);
        return;
    }
    memcpy(copy, rows, bytes);
    *e = (entry){.rows = copy, .n_floats = n_floats};
    memcpy(e->digest, digest, SPINDLE_SPAN_DIGEST_BYTES);
    pthread_mutex_lock(&c->mu);
    entry *old = find(c, digest);
    if (old) drop(c, old);
    while (c->tail && c->stats.bytes + bytes > c->max_bytes) {
        drop(c, c->tail);
        c->stats.evictions++;
    }
    push_front(c, e);
    c->stats.bytes += bytes;
    c->stats.entries++;
    pthread_mutex_unlock(&c->mu);
}

void sp_image_cache_stats_get(sp_image_cache *c, sp_image_cache_stats *out) {
    *out = (sp_image_cache_stats){0};
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}
