/* The server's mounted LoRA adapters: a locked table of name, path, id and
 * spindle_adapter, changed by --lora at start and by the load / unload
 * routes while requests run (server/adapters.c). */
#ifndef SP_SERVER_ADAPTERS_H
#define SP_SERVER_ADAPTERS_H

#include <pthread.h>
#include <stdbool.h>

#include "spindle.h"

typedef struct sp_adapter_entry {
    char *name, *path;
    int id;                     /* llama-server's "lora" id: stable, from 0 */
    spindle_adapter *adapter;   /* the table's reference */
} sp_adapter_entry;

typedef struct sp_adapters {
    /* Held from a request's adapter lookup until its submit has taken the
     * engine's reference, so an unload cannot free it in between. */
    pthread_mutex_t lock;
    sp_adapter_entry *v;
    int n, cap, next_id;
    /* --lora-dir resolved (adapter_dir.c): where the load route may load
     * from; NULL: loading and unloading at run time are off. */
    char *root;
} sp_adapters;

void sp_adapters_init(sp_adapters *t);
/* Unloads every adapter (after the engine is freed). */
void sp_adapters_free(sp_adapters *t);

/* ---- adapter_dir.c: --lora-dir */
/* t->root from `dir` (NULL: stays off); false after a one-line message
 * when it is not a directory. */
bool sp_adapter_dir_open(sp_adapters *t, const char *dir);
/* `rel` resolved inside t->root (malloc'd), or NULL when it is not an
 * adapter path there: absolute, with "..", missing, resolving outside, a
 * directory holding a link that leads outside, or loading is off. */
char *sp_adapter_dir_resolve(const sp_adapters *t, const char *rel);
/* Remove t->root (and the '/' after it) wherever it occurs in `message`,
 * so that a loader's message names files by their path in the folder. */
void sp_adapter_dir_hide_root(const sp_adapters *t, char *message);

#endif
