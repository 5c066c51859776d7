/* Boundary states for the prefix index of models whose layers are not all
 * full KV (hybrid recurrent / linear-attention models, sliding-window
 * models).
 *
 * A full-KV block alone cannot resume such a model: its recurrent layers
 * need their conv window and state, its window layers the keys and values
 * of the last window - 1 positions, at the block's end. So when a sequence
 * reaches a block boundary (its length a multiple of SP_KV_BLOCK_TOKENS,
 * the block published), it leaves a "tail" snapshot of every layer but the
 * full-KV ones here, keyed by the chain hash of the block that ends there
 * (vLLM's `align` mode for Mamba, llama.cpp's context checkpoints). A later
 * prompt maps the published blocks it starts with, up to the last one
 * whose boundary has a state, and restores that state
 * (sp_seq_state_map_prefix).
 *
 * A window layer's tail is its window and the rollback margin, so a
 * sliding-window model maps a prefix only where the whole window at the
 * boundary is present (in that snapshot). A state larger than a quarter of
 * the store is not taken at all (a long window over many layers would cost
 * its copy every block for little reuse). The store is bounded by bytes and
 * evicts least recently used states first; a state whose block the pool
 * evicted is never found through the index again and ages out.
 *
 * Thread-safety: every call takes the store's mutex; a snapshot returned
 * by acquire is valid until the matching release (which unlocks). */
#ifndef SP_RUNTIME_PREFIX_STATES_H
#define SP_RUNTIME_PREFIX_STATES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/seq_state.h"

typedef struct sp_prefix_states sp_prefix_states;

/* A store holding at most max_bytes of snapshots (at least one is always
 * kept, however large); NULL when out of memory. */
sp_prefix_states *sp_prefix_states_new(size_t max_bytes);
void sp_prefix_states_free(sp_prefix_states *st);

/* Whether the boundary of block `hash` has a state. */
bool sp_prefix_states_has(sp_prefix_states *st, uint64_t hash);
/* Keep `snap` (ownership moves to the store) as the state at the end of
 * block `hash`; freed at once when that boundary already has one. */
void sp_prefix_states_put(sp_prefix_states *st, uint64_t hash,
                          sp_state_snapshot *snap);
/* The state at the end of block `hash` (marked recently used) with the
 * store locked, or NULL (unlocked). A non-NULL result must be followed by
 * sp_prefix_states_release. */
const sp_state_snapshot *sp_prefix_states_acquire(sp_prefix_states *st,
                                                  uint64_t hash);
void sp_prefix_states_release(sp_prefix_states *st);

typedef struct sp_prefix_states_counts {
    int states;
    size_t bytes, max_bytes;
} sp_prefix_states_counts;
void sp_prefix_states_counts_get(sp_prefix_states *st,
                                 sp_prefix_states_counts *c);

/* The invariant walker (kv_pool.h's sp_kv_pool_check calls it): the LRU
 * linked both ways over every entry once, each entry the one its hash
 * finds, the byte count their sum and within the bound (unless one entry
 * alone exceeds it), the buckets holding exactly the entries.
 * SPINDLE_ERR_INTERNAL naming the first violation. */
spindle_status sp_prefix_states_check(sp_prefix_states *st,
                                      spindle_error *err);

#endif
