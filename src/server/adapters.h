/* The server's mounted LoRA adapters: a locked table of name, path, id and
 * spindle_adapter, changed by --lora at start and by the load / unload
 * routes while requests run (server/adapters.c). */
#ifndef SP_SERVER_ADAPTERS_H
#define SP_SERVER_ADAPTERS_H

#include <pthread.h>

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
} sp_adapters;

void sp_adapters_init(sp_adapters *t);
/* Unloads every adapter (after the engine is freed). */
void sp_adapters_free(sp_adapters *t);

#endif
