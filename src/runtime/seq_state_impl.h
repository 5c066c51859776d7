/* What seq_state.c and seq_state_snapshot.c share: the layout of a
 * sequence state. Internal to runtime/. */
#ifndef SP_RUNTIME_SEQ_STATE_IMPL_H
#define SP_RUNTIME_SEQ_STATE_IMPL_H

#include <stdbool.h>

#include "runtime/kv_cache.h"
#include "runtime/kv_pool.h"
#include "runtime/seq_state.h"

/* What a recurrent state slot holds. */
typedef enum sp_slot_role {
    SP_SLOT_FREE = 0,
    SP_SLOT_CURRENT,  /* the state at the sequence's length */
    SP_SLOT_WORK,     /* the pass in progress updates it */
    SP_SLOT_KEPT,     /* a state of the last committed pass, at `length` */
    SP_SLOT_NEW,      /* a checkpoint of the pass in progress */
} sp_slot_role;

typedef struct sp_state_slot {
    float *data;      /* conv window, then the recurrent state */
    sp_slot_role role;
    int length;       /* the sequence length whose state it holds */
} sp_state_slot;

typedef struct sp_layer_state {
    sp_layer_state_desc d;
    sp_kv_buffer kv;              /* the KV kinds (full KV: its sizes only;
                                     the rows are in the pool's blocks) */
    size_t floats;                /* recurrent: floats per slot */
    sp_state_slot *slots;         /* recurrent: allocated slots */
    int n_slots, cap_slots;
    int current;                  /* recurrent: slot of the current state */
    int work;                     /* recurrent: slot of the pass, or -1 */
} sp_layer_state;

struct sp_seq_state {
    int n_layers;
    sp_layer_state *layers;
    sp_seq_state_options opt;
    int length;
    int pending;                  /* n_new of the reserved pass, or 0 */

    /* Full-KV layers (seq_blocks.c): one block table for all of them. */
    bool has_full;
    sp_kv_pool *pool;
    bool owns_pool;
    int32_t *blocks;              /* [cap_blocks] ids, n_blocks in use */
    int n_blocks, cap_blocks;
    int32_t *tokens;              /* [cap_blocks * block] the history */
    /* [cap_blocks * block] what each position is beyond its id: 0 for a
     * token, an embeddings span's position key (sp_span_position_key). */
    uint64_t *keys;
    uint64_t *hashes;             /* [cap_blocks] chain hash per block */
    int n_hashed;                 /* leading full blocks hashed */
    bool hashable;                /* every token so far is known */
    const int32_t *pending_tokens; /* the reserved pass's, or NULL */
    const uint64_t *pending_keys;  /* its position keys; NULL: all tokens */
};

/* seq_blocks.c */
spindle_status sp_blocks_init(sp_seq_state *s, spindle_error *err);
void sp_blocks_free(sp_seq_state *s);
/* Blocks for positions [0, end), copying the block the next token goes
 * into if it is shared; on failure as before. */
spindle_status sp_blocks_fit(sp_seq_state *s, int64_t end, spindle_error *err);
/* Before the length grows by n_new: record the pass's tokens and publish
 * the blocks they fill. */
void sp_blocks_commit(sp_seq_state *s, int n_new);
void sp_blocks_truncate(sp_seq_state *s, int length);
/* After a commit: at a block boundary, leave the other layers' state there
 * for the prefix index (prefix_states.h), when the model needs one. */
void sp_blocks_boundary_state(sp_seq_state *s);
/* Fresh blocks for positions [0, length) (a restore overwrites them all);
 * on failure as before. */
spindle_status sp_blocks_replace(sp_seq_state *s, int length,
                                 spindle_error *err);

bool sp_layer_is_kv(const sp_layer_state *L);
int64_t sp_recurrent_conv_floats(const sp_layer_state_desc *d);

/* Capacity for the window's kept positions up to `end` and at least
 * `rows_at_least` rows (window KV); the stored positions the state needs
 * stay. */
spindle_status sp_window_fit(sp_seq_state *s, sp_layer_state *L,
                             int64_t end, int64_t rows_at_least,
                             spindle_error *err);

/* seq_state_snapshot.c: the boundary state of the prefix index
 * (prefix_states.h): every layer but the full-KV ones, and its restore
 * into a state whose blocks already hold positions [0, snapshot length). */
spindle_status sp_seq_state_snapshot_tail(const sp_seq_state *s,
                                          sp_state_snapshot **out,
                                          spindle_error *err);
/* About the bytes of a tail snapshot now (its data, not its records). */
size_t sp_seq_state_tail_bytes(const sp_seq_state *s);
spindle_status sp_seq_state_restore_tail(sp_seq_state *s,
                                         const sp_state_snapshot *snap,
                                         spindle_error *err);
/* Whether a tail snapshot (one read back from the disk tier) is a state
 * `length` tokens in that restore_tail would take into s: the checks a
 * restore makes, and the length. SPINDLE_ERR_FORMAT naming what differs. */
spindle_status sp_seq_state_check_tail(const sp_seq_state *s,
                                       const sp_state_snapshot *snap,
                                       int length, spindle_error *err);

/* Release every recurrent slot's role but the current state's. */
void sp_recurrent_forget_kept(sp_layer_state *L);

#endif
