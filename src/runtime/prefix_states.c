/* The boundary-state store of the prefix index (prefix_states.h): a
 * chained hash table of snapshots keyed by block hash, and an LRU list
 * that evicts down to the byte bound. */
#include "runtime/prefix_states.h"
#include "base/error.h"

#include <pthread.h>
#include <stdlib.h>

#define N_BUCKETS 1024   /* states are large; few are kept at once */

typedef struct state_entry {
    uint64_t hash;
    sp_state_snapshot *snap;
    size_t bytes;
    struct state_entry *bucket_next;
    struct state_entry *lru_prev, *lru_next;  /* oldest first */
} state_entry;

struct sp_prefix_states {
    pthread_mutex_t lock;
    size_t max_bytes, bytes;
    int n;
    state_entry *buckets[N_BUCKETS];
    state_entry *lru_head, *lru_tail;
};

sp_prefix_states *sp_prefix_states_new(size_t max_bytes) {
    sp_prefix_states *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    pthread_mutex_init(&st->lock, NULL);
    st->max_bytes = max_bytes;
    return st;
}

void sp_prefix_states_free(sp_prefix_states *st) {
    if (!st) return;
    for (state_entry *e = st->lru_head, *next; e; e = next) {
        next = e->lru_next;
        sp_state_snapshot_free(e->snap);
        free(e);
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static state_entry **bucket(sp_prefix_states *st, uint64_t hash) {
    return &st->buckets[(hash ^ hash >> 29) % N_BUCKETS];
}

static state_entry *find(sp_prefix_states *st, uint64_t hash) {
    for (state_entry *e = *bucket(st, hash); e; e = e->bucket_next)
        if (e->hash == hash) return e;
    return NULL;
}

static void lru_unlink(sp_prefix_states *st, state_entry *e) {
    if (e->lru_prev) e->lru_prev->lru_next = e->lru_next;
    else st->lru_head = e->lru_next;
    if (e->lru_next) e->lru_next->lru_prev = e->lru_prev;
    else st->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push(sp_prefix_states *st, state_entry *e) {
    e->lru_prev = st->lru_tail;
    e->lru_next = NULL;
    if (st->lru_tail) st->lru_tail->lru_next = e;
    else st->lru_head = e;
    st->lru_tail = e;
}

static void evict(sp_prefix_states *st, state_entry *e) {
    lru_unlink(st, e);
    state_entry **link = bucket(st, e->hash);
    while (*link != e) link = &(*link)->bucket_next;
    *link = e->bucket_next;
    st->bytes -= e->bytes;
    st->n--;
    sp_state_snapshot_free(e->snap);
    free(e);
}

bool sp_prefix_states_has(sp_prefix_states *st, uint64_t hash) {
    pthread_mutex_lock(&st->lock);
    bool has = find(st, hash) != NULL;
    pthread_mutex_unlock(&st->lock);
    return has;
}

void sp_prefix_states_put(sp_prefix_states *st, uint64_t hash,
                          sp_state_snapshot *snap) {
    state_entry *e = calloc(1, sizeof *e);
    pthread_mutex_lock(&st->lock);
    if (!e || find(st, hash)) {
        pthread_mutex_unlock(&st->lock);
        free(e);
        sp_state_snapshot_free(snap);
        return;
    }
    e->hash = hash;
    e->snap = snap;
    e->bytes = sp_state_snapshot_bytes(snap);
    while (st->lru_head && st->bytes + e->bytes > st->max_bytes)
        evict(st, st->lru_head);
    state_entry **b = bucket(st, hash);
    e->bucket_next = *b;
    *b = e;
    lru_push(st, e);
    st->bytes += e->bytes;
    st->n++;
    pthread_mutex_unlock(&st->lock);
}

const sp_state_snapshot *sp_prefix_states_acquire(sp_prefix_states *st,
                                                  uint64_t hash) {
    pthread_mutex_lock(&st->lock);
    state_entry *e = find(st, hash);
    if (!e) {
        pthread_mutex_unlock(&st->lock);
        return NULL;
    }
    lru_unlink(st, e);
    lru_push(st, e);
    return e->snap;
}

void sp_prefix_states_release(sp_prefix_states *st) {
    pthread_mutex_unlock(&st->lock);
}

void sp_prefix_states_counts_get(sp_prefix_states *st,
                                 sp_prefix_states_counts *c) {
    pthread_mutex_lock(&st->lock);
    c->states = st->n;
    c->bytes = st->bytes;
    c->max_bytes = st->max_bytes;
    pthread_mutex_unlock(&st->lock);
}

/* (lock held) */
static spindle_status check_locked(sp_prefix_states *st, spindle_error *err) {
    int n = 0;
    size_t bytes = 0;
    const state_entry *prev = NULL;
    for (state_entry *e = st->lru_head; e; prev = e, e = e->lru_next) {
        if (++n > st->n)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "boundary states: LRU longer than its %d entries",
                           st->n);
        if (e->lru_prev != prev || find(st, e->hash) != e || !e->snap)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "boundary states: LRU entry %d (hash %016llx) is "
                           "mislinked, not indexed or empty", n,
                           (unsigned long long)e->hash);
        bytes += e->bytes;
    }
    if (prev != st->lru_tail || n != st->n || bytes != st->bytes)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "boundary states: LRU of %d entries, %zu bytes; "
                       "counted %d, %zu", n, bytes, st->n, st->bytes);
    if (st->bytes > st->max_bytes && st->n > 1)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "boundary states: %zu bytes kept over a bound of %zu",
                       st->bytes, st->max_bytes);
    int chained = 0;
    for (int i = 0; i < N_BUCKETS; i++)
        for (state_entry *e = st->buckets[i]; e; e = e->bucket_next)
            if (++chained > st->n || bucket(st, e->hash) != &st->buckets[i])
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "boundary states: bucket %d holds more entries "
                               "than the store, or another bucket's", i);
    if (chained != st->n)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "boundary states: %d entries chained, %d kept",
                       chained, st->n);
    return SPINDLE_OK;
}

spindle_status sp_prefix_states_check(sp_prefix_states *st,
                                      spindle_error *err) {
    pthread_mutex_lock(&st->lock);
    const spindle_status s = check_locked(st, err);
    pthread_mutex_unlock(&st->lock);
    return s;
}
