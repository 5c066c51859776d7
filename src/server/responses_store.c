/* The kept responses (responses_store.h): a fixed table searched
 * linearly (it holds a few hundred entries), each entry stamped with the
 * store's clock when written or read, the oldest stamp evicted first. */
#include "server/responses_store.h"

#include <stdlib.h>
#include <string.h>

struct sp_stored_response {
    char id[64];
    char *response_json, *history_json;
    size_t bytes;
    uint64_t used;
};

void sp_responses_store_init(sp_responses_store *st, int cap, size_t max_bytes) {
    memset(st, 0, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    st->entries = cap > 0 ? calloc((size_t)cap, sizeof *st->entries) : NULL;
    st->cap = st->entries ? cap : 0;
    st->max_bytes = max_bytes;
}

static void drop(sp_responses_store *st, sp_stored_response *e) {
    st->bytes -= e->bytes;
    free(e->response_json);
    free(e->history_json);
    memset(e, 0, sizeof *e);
}

void sp_responses_store_free(sp_responses_store *st) {
    for (int i = 0; i < st->cap; i++)
        if (st->entries[i].id[0]) drop(st, &st->entries[i]);
    free(st->entries);
    pthread_mutex_destroy(&st->mu);
    memset(st, 0, sizeof *st);
}

static sp_stored_response *find(sp_responses_store *st, const char *id) {
    for (int i = 0; i < st->cap; i++)
        if (st->entries[i].id[0] && !strcmp(st->entries[i].id, id)) return &st->entries[i];
    return NULL;
}

/* The least recently used entry (NULL when the store is empty). */
static sp_stored_response *oldest(sp_responses_store *st) {
    sp_stored_response *best = NULL;
    for (int i = 0; i < st->cap; i++) {
        sp_stored_response *e = &st->entries[i];
        if (e->id[0] && (!best || e->used < best->used)) best = e;
    }
    return best;
}

/* An empty slot, the least recently used entry dropped when none is. */
static sp_stored_response *free_slot(sp_responses_store *st) {
    for (int i = 0; i < st->cap; i++)
        if (!st->entries[i].id[0]) return &st->entries[i];
    sp_stored_response *e = oldest(st);
    drop(st, e);
    return e;
}

static char *copy(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

bool sp_responses_store_put(sp_responses_store *st, const char *id, const char *response_json,
                            const char *history_json) {
    size_t bytes = strlen(response_json) + strlen(history_json);
    if (strlen(id) >= sizeof st->entries[0].id || bytes > st->max_bytes || !st->cap) return false;
    char *r = copy(response_json), *h = copy(history_json);
    if (!r || !h) {
        free(r);
        free(h);
        return false;
    }
    pthread_mutex_lock(&st->mu);
    sp_stored_response *e = find(st, id);
    if (e) drop(st, e);
    while (st->bytes + bytes > st->max_bytes) drop(st, oldest(st));
    e = free_slot(st);
    strcpy(e->id, id);
    e->response_json = r;
    e->history_json = h;
    e->bytes = bytes;
    e->used = ++st->clock;
    st->bytes += bytes;
    pthread_mutex_unlock(&st->mu);
    return true;
}

static char *get(sp_responses_store *st, const char *id, bool history) {
    pthread_mutex_lock(&st->mu);
    sp_stored_response *e = find(st, id);
    char *out = NULL;
    if (e) {
        e->used = ++st->clock;
        out = copy(history ? e->history_json : e->response_json);
    }
    pthread_mutex_unlock(&st->mu);
    return out;
}

char *sp_responses_store_response(sp_responses_store *st, const char *id) {
    return get(st, id, false);
}

char *sp_responses_store_history(sp_responses_store *st, const char *id) {
    return get(st, id, true);
}

bool sp_responses_store_delete(sp_responses_store *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    sp_stored_response *e = find(st, id);
    if (e) drop(st, e);
    pthread_mutex_unlock(&st->mu);
    return e != NULL;
}
