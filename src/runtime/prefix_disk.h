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
 * Hybrid and sliding-window models need, beside the blocks, the other
 * layers' state at the boundary where a mapped prefix ends
 * (runtime/prefix_states.h). Each boundary state the memory store takes
 * is offered the same way (one memcpy of the tail snapshot) and written
 * as DIR/<chained hash>.kvs, the hash that of the block ending there, in
 * the same container under its own magic.
 *
 * A lookup that misses in memory asks the disk tier, which reads the file
 * into a block taken from the pool and publishes it in memory; a state is
 * read into a snapshot, checked against the sequence it is for (its
 * layers' kinds and sizes, its length) and kept in the memory store. A
 * file that fails any check (truncated, a flipped byte, another model's
 * fingerprint, another layout, another prefix, a snapshot that does not
 * fit the model) is refused with a one-line warning on stderr, deleted and
 * never loaded. The files, blocks and states together, are kept under a
 * byte budget in least-recently-used order; a hit touches the file's
 * mtime, which is the order the next process starts from.
 *
 * Adapters: their namespace comes from a per-process load serial, which
 * names nothing after a restart, so only the base model's blocks and
 * states (adapter namespace 0) go to disk.
 *
 * Thread-safety: every call may be made from any thread. */
#ifndef SP_RUNTIME_PREFIX_DISK_H
#define SP_RUNTIME_PREFIX_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "spindle.h"
#include "runtime/kv_pool.h"
#include "runtime/seq_state.h"

typedef struct sp_prefix_disk sp_prefix_disk;

/* Files and their counts are blocks and states together. */
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

/* Offer the boundary state `snap` (a tail snapshot) at the end of block
 * (hash, parent, tokens) to p's disk tier, if it has one and that state is
 * not there or queued yet; its bytes are copied. */
void sp_prefix_disk_offer_state(sp_kv_pool *p, uint64_t hash, uint64_t parent,
                                const int32_t *tokens,
                                const sp_state_snapshot *snap);
/* Whether p has a disk tier without the state of block `hash`, written or
 * queued (an offer would be taken, but for its size or a full queue). */
bool sp_prefix_disk_wants_state(sp_kv_pool *p, uint64_t hash);
/* Whether p's disk tier has the state of block `hash` written. */
bool sp_prefix_disk_has_state(sp_kv_pool *p, uint64_t hash);
/* The state at the end of block (hash, parent, tokens), `length` tokens
 * in, read from p's disk tier and checked to restore into `s`
 * (sp_seq_state_check_tail), as a new snapshot the caller owns; NULL: no
 * disk tier, no such file, a refused file, no memory. */
sp_state_snapshot *sp_prefix_disk_load_state(sp_kv_pool *p,
                                             const sp_seq_state *s,
                                             uint64_t hash, uint64_t parent,
                                             const int32_t *tokens,
                                             int length);

/* false without a disk tier. */
bool sp_prefix_disk_stats_get(sp_kv_pool *p, sp_prefix_disk_stats *out);

/* The invariant walker (kv_pool.h's sp_kv_pool_check calls it): every
 * entry of the index either on the free list or in the bucket its key
 * names, once, no key twice; the LRU exactly the written entries, linked
 * both ways, their count and bytes those of the stats.
 * SPINDLE_ERR_INTERNAL naming the first violation. */
spindle_status sp_prefix_disk_check(sp_prefix_disk *d, spindle_error *err);

#endif
