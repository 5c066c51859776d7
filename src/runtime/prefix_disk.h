/* The disk tier of the KV pool's prefix index: the on-disk prompt cache.
 *
 * Full blocks published in the prefix index under the base model's
 * namespace are offered to the disk tier, which copies them (the step
 * thread's only cost: one memcpy of the block) and queues them for a
 * writer thread; the writer stores each as DIR/<chained hash>.kvb
 * (runtime/prefix_block.h: fingerprint, version, hash, parent, tokens,
 * XXH3-128) through base/atomic_file.h, so a file is always either absent
 * or whole. A queue beyond its byte bound drops the offer instead of
 * waiting: the step never blocks on the disk.
 *
 * A lookup that misses in memory asks the disk tier, which reads the file
 * into a block taken from the pool and publishes it in memory; a file that
 * fails any check (truncated, a flipped byte, another model's fingerprint,
 * another layout, another prefix) is refused with a one-line warning on
 * stderr, deleted and never loaded. The files are kept under a byte budget
 * in least-recently-used order; a hit touches the file's mtime, which is
 * the order the next process starts from.
 *
 * Adapters: their namespace comes from a per-process load serial, which
 * names nothing after a restart, so only the base model's blocks (adapter
 * namespace 0) go to disk. Hybrid models publish no blocks (the prefix
 * index needs every layer full KV), so they have no disk tier either.
 *
 * Thread-safety: every call may be made from any thread. */
#ifndef SP_RUNTIME_PREFIX_DISK_H
#define SP_RUNTIME_PREFIX_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "spindle.h"
#include "runtime/kv_pool.h"

typedef struct sp_prefix_disk sp_prefix_disk;

typedef struct sp_prefix_disk_stats {
    size_t budget_bytes, bytes;   /* the budget and the files' bytes */
    int files;
    long long loaded, written, dropped, refused, evicted;
} sp_prefix_disk_stats;

/* Open (creating it) the cache directory `dir` for the blocks of `pool`,
 * under `budget` bytes, for the model of `fingerprint` (32 hex digits),
 * and attach it to the pool (sp_kv_pool_free closes it). Existing files
 * are indexed by name, size and mtime only; they are checked when read.
 * SPINDLE_ERR_IO when the directory cannot be made or read. */
spindle_status sp_prefix_disk_open(const char *dir, size_t budget,
                                   const char *fingerprint, sp_kv_pool *pool,
                                   spindle_error *err);
/* Write what is queued, stop the writer, free. */
void sp_prefix_disk_close(sp_prefix_disk *d);

/* Offer block `block` of `p` (full, published, referenced by the caller)
 * to p's disk tier, if it has one and the hash is not there yet. */
void sp_prefix_disk_offer(sp_kv_pool *p, int block, uint64_t hash,
                          uint64_t parent, const int32_t *tokens);
/* The block of (hash, parent, tokens) read from p's disk tier into a pool
 * block with one reference and published in memory, or -1 (no disk tier,
 * no such file, a refused file, no free block). */
int sp_prefix_disk_load(sp_kv_pool *p, uint64_t hash, uint64_t parent,
                        const int32_t *tokens);

/* false without a disk tier. */
bool sp_prefix_disk_stats_get(sp_kv_pool *p, sp_prefix_disk_stats *out);

#endif
