/* The state one sequence keeps between forward passes, layer by layer.
 *
 * Each layer declares one kind of state (sp_layer_state_desc, from the
 * family's sp_arch.layer_state hook or derived from sp_layer.window):
 *
 *  SP_STATE_FULL_KV    keys and values of every position, in blocks of the
 *                      model's pool (runtime/kv_pool.h): one block table
 *                      for all full-KV layers, a block taken as the
 *                      sequence reaches it, copied before a write when it
 *                      is shared. Truncation: to any shorter length (the
 *                      blocks past it go back to the pool).
 *  SP_STATE_WINDOW_KV  keys and values of the positions a sliding window of
 *                      `window` still needs, plus the rollback margin: a
 *                      linear buffer of positions [base, length); when it
 *                      would overflow, the last window - 1 + max_rollback
 *                      positions move to the front and base rises
 *                      (amortized O(1) per token). Capacity is about
 *                      2 (window + max_rollback) + the largest chunk
 *                      forwarded at once, never the context length. The
 *                      attention view starts at position base
 *                      (sp_kv_view.first_key_pos). Truncation: to any
 *                      length whose window the buffer still holds, at least
 *                      max_rollback tokens back; to 0 always.
 *  SP_STATE_RECURRENT  a conv window, f32 [conv_kernel - 1][conv_channels]
 *                      (row 0 the oldest of the last conv_kernel - 1
 *                      inputs), and an f32 recurrent state of state_floats
 *                      elements (e.g. a delta-rule state [heads][dk][dv]),
 *                      both zero at length 0. Truncation: to a length whose
 *                      state the last forward pass kept (below), or to 0.
 *  SP_STATE_NONE       nothing (a layer without sequence state).
 *  SP_STATE_LATENT_KV  full KV's blocks, truncation, sharing and prefix
 *                      reuse, but one key row per position (n_kv_heads 1,
 *                      head_dim elements) and no values: multi-head latent
 *                      attention stores the compressed latent and the
 *                      rotary key of each token, and reads its values from
 *                      the latent part of those rows. (After NONE, so that
 *                      the kinds' numbers in snapshot records stay.)
 *
 * The calls of a forward pass, per sequence:
 *   sp_seq_state_reserve(s, n_new)   before any layer runs (this is where
 *                                    anything is allocated; the context
 *                                    limit is checked here);
 *   the layers:                      KV layers store positions
 *                                    length .. length + n_new - 1 and read
 *                                    their view; recurrent layers update
 *                                    sp_seq_state_recurrent() in place and
 *                                    call sp_seq_state_checkpoint() after
 *                                    each new token;
 *   sp_seq_state_commit(s)           only after the whole pass succeeded.
 * Without the commit the sequence is as it was before the reserve: stored
 * KV positions beyond the length are never read, and a recurrent layer
 * works on a copy of its state (a work slot, filled by the reserve) that
 * only the commit makes current. (A reserve may slide a window buffer
 * forward; that drops only positions no truncation within max_rollback
 * needs.)
 *
 * Rollback of recurrent layers: with K = max_rollback, after a forward of T
 * new tokens ending at length L', the states at lengths
 * max(L' - T, L' - K) .. L' stay available to sp_seq_state_truncate. The
 * state before the pass (length L' - T, when T <= K) is the old current
 * state, kept for free; the others are copies that sp_seq_state_checkpoint
 * makes after new-token indices t >= sp_seq_state_first_checkpoint(), each
 * a copy of the work slot (the state after the last new token needs none).
 * A recurrent layer holds at most 2 K + 2 states at once (the kept ones of
 * the last pass until the next pass commits).
 *
 * Snapshots (sp_state_snapshot) are one flat allocation: a header, one
 * record per layer (kind, sizes, first position, data offset and size) and
 * the raw buffers (KV rows in the cache's element type, recurrent f32), so
 * that a later prompt cache or checkpoint file can store it byte for byte.
 * A snapshot holds the state at its length: full KV all positions, window
 * KV the window plus the rollback margin, recurrent layers the current
 * state only (after a restore they can be truncated to the restored length
 * or 0).
 *
 * Thread-safety: a state belongs to one thread at a time; a snapshot is
 * immutable once taken and may be read (restored, measured) by several
 * threads at once. */
#ifndef SP_RUNTIME_SEQ_STATE_H
#define SP_RUNTIME_SEQ_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"
#include "compute/ops.h"

typedef enum sp_state_kind {
    SP_STATE_FULL_KV = 0,
    SP_STATE_WINDOW_KV,
    SP_STATE_RECURRENT,
    SP_STATE_NONE,
    SP_STATE_LATENT_KV,
} sp_state_kind;

/* "full KV", "window KV", "recurrent", "none", "latent KV"; NULL outside
 * the enum. */
const char *sp_state_kind_name(sp_state_kind kind);

/* Whether a kind keeps its rows in the pool's blocks (full and latent KV). */
static inline bool sp_state_kind_paged(sp_state_kind kind) {
    return kind == SP_STATE_FULL_KV || kind == SP_STATE_LATENT_KV;
}

typedef struct sp_layer_state_desc {
    sp_state_kind kind;
    /* FULL_KV, WINDOW_KV: keys and values of n_kv_heads heads of head_dim
     * elements each; LATENT_KV: keys only, n_kv_heads 1. */
    int n_kv_heads;
    int head_dim;
    /* WINDOW_KV: the token at position p attends to p - window + 1 .. p. */
    int window;
    /* RECURRENT: conv window rows conv_kernel - 1 (conv_kernel <= 1: no
     * conv window) of conv_channels floats, and state_floats floats. */
    int conv_kernel;
    int conv_channels;
    int64_t state_floats;
} sp_layer_state_desc;

/* Fails (SPINDLE_ERR_FORMAT, naming the layer) for sizes that are not
 * positive where the kind needs them, or too large to address. */
spindle_status sp_layer_state_desc_check(const sp_layer_state_desc *d,
                                         int layer, spindle_error *err);

typedef struct sp_kv_pool sp_kv_pool;

typedef struct sp_seq_state_options {
    sp_kv_dtype kv_type;  /* element type of the KV kinds */
    int max_length;       /* context limit in positions; <= 0: none */
    int max_rollback;     /* K >= 0 (see above) */
    /* The blocks of the full-KV layers (same layers and type; it must
     * outlive the state); NULL: a private pool for max_length positions. */
    sp_kv_pool *pool;
    uint32_t adapter_id;  /* namespaces the prefix index; 0: none */
} sp_seq_state_options;

typedef struct sp_seq_state sp_seq_state;

/* A state of length 0 for n_layers layers (the descriptions are copied).
 * Allocates each recurrent layer's current state; KV rows come with the
 * first reserve. */
spindle_status sp_seq_state_new(const sp_layer_state_desc *layers,
                                int n_layers, const sp_seq_state_options *opt,
                                sp_seq_state **out, spindle_error *err);
void sp_seq_state_free(sp_seq_state *s);

int sp_seq_state_length(const sp_seq_state *s);
/* Bytes the state holds allocated (buffers and spare slots). */
size_t sp_seq_state_bytes(const sp_seq_state *s);

/* ---- one forward pass ---- */

/* Make room for n_new > 0 tokens after the current length: grows or slides
 * KV buffers, prepares each recurrent layer's work slot (a copy of its
 * current state) and the slots its checkpoints will need.
 * SPINDLE_ERR_LIMIT past the context limit, SPINDLE_ERR_MEMORY; on failure
 * the state is as it was. A second reserve without a commit replaces the
 * first (what the abandoned pass wrote is discarded). */
spindle_status sp_seq_state_reserve(sp_seq_state *s, int n_new,
                                    spindle_error *err);

/* KV layers: store the keys and values (n_kv_heads * head_dim floats each,
 * converted to the cache type) of position pos, length <= pos <
 * length + n_new of the reserve; the view of the layer for the attention
 * kernel (valid until the next reserve, truncate or restore). */
void sp_seq_state_kv_store(sp_seq_state *s, int layer, int pos,
                           const float *k, const float *v);
sp_kv_view sp_seq_state_kv_view(const sp_seq_state *s, int layer);

/* Recurrent layers: the work slot of the pass, to read and update in place
 * token by token. It holds the state at the current length when the layer
 * first touches it. */
typedef struct sp_recurrent_state {
    float *conv;    /* [conv_kernel - 1][conv_channels]; NULL if none */
    float *state;   /* [state_floats]; NULL if none */
} sp_recurrent_state;
sp_recurrent_state sp_seq_state_recurrent(sp_seq_state *s, int layer);

/* The first new-token index whose state a recurrent layer must hand to
 * sp_seq_state_checkpoint (max(0, n_new - 1 - K)): a chunked kernel may
 * run up to it in one go and step token by token after it. */
int sp_seq_state_first_checkpoint(const sp_seq_state *s);
/* Record the work slot of `layer` as the state after new-token index t
 * (0 <= t < n_new) of the pass; does nothing for t below
 * sp_seq_state_first_checkpoint or for the last token. Never fails (the
 * reserve allocated the slots). */
void sp_seq_state_checkpoint(sp_seq_state *s, int layer, int t);

/* The pass succeeded: the length grows by n_new, the work slots become
 * current, the checkpoints replace the previous pass's. */
void sp_seq_state_commit(sp_seq_state *s);

/* ---- outside a pass ---- */

/* Roll back to `length` (0 <= length <= current), exactly: every later
 * forward gives the bits it would give after a sequence that only ever
 * saw those tokens. SPINDLE_ERR_UNSUPPORTED naming the first layer whose
 * kind cannot reach that length (and the limit), SPINDLE_ERR_ARGUMENT for a
 * length out of range; on failure nothing changes. */
spindle_status sp_seq_state_truncate(sp_seq_state *s, int length,
                                     spindle_error *err);

/* ---- blocks and the prefix index (seq_blocks.c) ---- */

/* The tokens of the pass just reserved (n_new of them, borrowed until the
 * commit), so that the blocks they fill are hashed and published in the
 * prefix index. A pass committed without them makes the sequence's later
 * blocks unpublishable until it is truncated to 0. */
void sp_seq_state_set_pending_tokens(sp_seq_state *s, const int32_t *tokens);
/* With them, the pass's position keys (n_new, borrowed until the commit;
 * NULL: every position is its token): an embeddings span's positions are
 * hashed by what the span is, not by their placeholder ids. */
void sp_seq_state_set_pending_keys(sp_seq_state *s, const uint64_t *keys);
/* The key of row `index` of the embeddings span whose digest is `digest`
 * and whose flags are `flags` (never 0, which marks a token). The flags
 * take part: the same rows attended both ways, or without a per-layer
 * input, leave other keys and values. */
uint64_t sp_span_position_key(const unsigned char digest[16], int64_t index,
                              uint32_t flags);
/* An empty sequence (length 0) that will be fed `tokens`: map the
 * published blocks its first n tokens start with (at most n - 1 tokens,
 * whole blocks) and return how many positions it now holds (0 when the
 * index has nothing, the layers cannot share, or the length is not 0). */
int sp_seq_state_map_prefix(sp_seq_state *s, const int32_t *tokens, int n);
/* The same for a prompt whose positions have keys (NULL: all tokens). */
int sp_seq_state_map_prefix_keyed(sp_seq_state *s, const int32_t *tokens,
                                  const uint64_t *keys, int n);

/* Set the prefix-index namespace of an empty state (its blocks are found
 * and published under it: the KV of an adapter's sequence is not the base
 * model's). No effect once the state holds tokens. */
void sp_seq_state_set_adapter_id(sp_seq_state *s, uint32_t adapter_id);
/* The pool of the full-KV layers (NULL without any) and the blocks the
 * state references. */
const sp_kv_pool *sp_seq_state_pool(const sp_seq_state *s);
int sp_seq_state_blocks_held(const sp_seq_state *s);

/* The invariant walker (seq_state_check.c; the test builds call it after
 * every engine step, SPINDLE_INVARIANTS): each recurrent layer has one
 * current slot at the sequence's length, a work slot and checkpoints only
 * while a pass is reserved, kept states at distinct lengths
 * within max_rollback; the block table covers the sequence with distinct,
 * referenced blocks, and only full blocks are hashed.
 * SPINDLE_ERR_INTERNAL naming the first violation. */
spindle_status sp_seq_state_check(const sp_seq_state *s, spindle_error *err);

typedef struct sp_state_snapshot sp_state_snapshot;

spindle_status sp_seq_state_snapshot(const sp_seq_state *s,
                                     sp_state_snapshot **out,
                                     spindle_error *err);
/* Replace s by the snapshot's state; SPINDLE_ERR_ARGUMENT when its layers
 * (kinds, sizes, cache type) differ from s's; on failure s is unchanged. */
spindle_status sp_seq_state_restore(sp_seq_state *s,
                                    const sp_state_snapshot *snap,
                                    spindle_error *err);
/* The checks sp_seq_state_restore makes, without restoring: whether the
 * snapshot's layers and cache type are s's and its length within s's
 * limit. */
spindle_status sp_seq_state_check_snapshot(const sp_seq_state *s,
                                           const sp_state_snapshot *snap,
                                           spindle_error *err);
void sp_state_snapshot_free(sp_state_snapshot *snap);
/* Total bytes of the flat snapshot (header, records and data). */
size_t sp_state_snapshot_bytes(const sp_state_snapshot *snap);
int sp_state_snapshot_length(const sp_state_snapshot *snap);
/* The flat block itself (sp_state_snapshot_bytes long), and a copy of one
 * read back, its header and record table checked. */
const void *sp_state_snapshot_data(const sp_state_snapshot *snap);
spindle_status sp_state_snapshot_from_bytes(const void *data, size_t n,
                                            sp_state_snapshot **out,
                                            spindle_error *err);

#endif
