/* The responses that POST /v1/responses kept (store: true, the default):
 * each one's response object (GET /v1/responses/{id}) and its
 * conversation (what previous_response_id continues), in memory, bounded
 * in count and bytes; the least recently used goes first. Thread-safe:
 * every call takes the store's lock. */
#ifndef SP_SERVER_RESPONSES_STORE_H
#define SP_SERVER_RESPONSES_STORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sp_stored_response sp_stored_response;

typedef struct sp_responses_store {
    pthread_mutex_t mu;
    sp_stored_response *entries;   /* cap slots; id[0] == 0: empty */
    int cap;
    size_t bytes, max_bytes;
    uint64_t clock;
} sp_responses_store;

/* An empty store of at most `cap` responses and `max_bytes` of JSON. */
void sp_responses_store_init(sp_responses_store *st, int cap, size_t max_bytes);
void sp_responses_store_free(sp_responses_store *st);
/* Keep copies of a response's JSON and its conversation under `id`
 * (replacing one of the same id), evicting the least recently used as
 * needed; false when out of memory or when it alone is over the bytes. */
bool sp_responses_store_put(sp_responses_store *st, const char *id, const char *response_json,
                            const char *history_json);
/* A malloc'd copy of the response's JSON, or of its conversation; NULL
 * when `id` is not kept (or out of memory). */
char *sp_responses_store_response(sp_responses_store *st, const char *id);
char *sp_responses_store_history(sp_responses_store *st, const char *id);
/* Forget `id`; false when it was not kept. */
bool sp_responses_store_delete(sp_responses_store *st, const char *id);

#endif
