/* Per-thread scratch (scratch.h). The buffers hang off one heap record per
 * thread, registered with a pthread key whose destructor frees them when
 * the thread exits (a _Thread_local pointer alone would leak them). */
#include "compute/scratch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct sp_scratch_set {
    void *buf[SP_SCRATCH_SLOTS];
    size_t cap[SP_SCRATCH_SLOTS];
} sp_scratch_set;

static pthread_once_t sp_scratch_once = PTHREAD_ONCE_INIT;
static pthread_key_t sp_scratch_key;
static bool sp_scratch_key_ok = false;
static _Thread_local sp_scratch_set *sp_scratch_mine;

static void sp_scratch_release(void *p) {
    sp_scratch_set *set = p;
    for (int i = 0; i < SP_SCRATCH_SLOTS; i++) free(set->buf[i]);
    free(set);
}

static void sp_scratch_key_init(void) {
    sp_scratch_key_ok =
        pthread_key_create(&sp_scratch_key, sp_scratch_release) == 0;
}

static sp_scratch_set *sp_scratch_set_mine(void) {
    if (sp_scratch_mine) return sp_scratch_mine;
    pthread_once(&sp_scratch_once, sp_scratch_key_init);
    if (!sp_scratch_key_ok) return NULL;
    sp_scratch_set *set = calloc(1, sizeof *set);
    if (!set) return NULL;
    if (pthread_setspecific(sp_scratch_key, set) != 0) {
        free(set);
        return NULL;
    }
    return sp_scratch_mine = set;
}

void *sp_scratch_get(sp_scratch_slot slot, size_t bytes) {
    if ((int)slot < 0 || slot >= SP_SCRATCH_SLOTS) return NULL;
    sp_scratch_set *set = sp_scratch_set_mine();
    if (!set) return NULL;
    if (bytes <= set->cap[slot] && set->buf[slot]) return set->buf[slot];
    if (bytes > SIZE_MAX - 63) return NULL;
    const size_t cap = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, cap ? cap : 64);
    if (!p) return NULL;
    free(set->buf[slot]);
    set->buf[slot] = p;
    set->cap[slot] = cap;
    return p;
}
