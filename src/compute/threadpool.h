/* A persistent pool of worker threads. Threads are created once per model;
 * each parallel region only publishes a job and wakes them (no thread
 * creation per op). The calling thread takes part in the work. */
#ifndef SP_COMPUTE_THREADPOOL_H
#define SP_COMPUTE_THREADPOOL_H

#include <stdint.h>

typedef struct sp_pool sp_pool;

/* `n_threads` counts the caller; <= 0 means every online core. Returns NULL
 * on failure (callers then run serially: every kernel accepts pool == NULL). */
sp_pool *sp_pool_create(int n_threads);
void sp_pool_destroy(sp_pool *pool);
int sp_pool_size(const sp_pool *pool); /* 1 for NULL */

/* fn is called on disjoint ranges [begin, end) covering [0, n), each range
 * at most `grain` long (grain <= 0: n / threads). thread_id < pool size
 * identifies per-thread scratch. Returns when all ranges are done. */
typedef void (*sp_range_fn)(void *ctx, int64_t begin, int64_t end,
                            int thread_id);
void sp_pool_for(sp_pool *pool, int64_t n, int64_t grain, sp_range_fn fn,
                 void *ctx);

#endif
