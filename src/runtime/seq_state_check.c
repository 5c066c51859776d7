/* The sequence state's invariant walker (seq_state.h, sp_seq_state_check):
 * the roles of each recurrent layer's slots and the block table of the
 * full-KV layers, as seq_state.c and seq_blocks.c maintain them. */
#include "runtime/seq_state_impl.h"
#include "base/error.h"

#include <stdlib.h>

#define B SP_KV_BLOCK_TOKENS

/* One CURRENT slot at the sequence's length; a WORK slot (the one `work`
 * names) and NEW slots only while a pass is reserved; KEPT slots at distinct lengths less than the sequence's, at most
 * max_rollback back. */
static spindle_status check_slots(const sp_seq_state *s, int l,
                                  spindle_error *err) {
    const sp_layer_state *L = &s->layers[l];
    if (L->n_slots < 1 || L->n_slots > L->cap_slots || L->current < 0 ||
        L->current >= L->n_slots)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "layer %d: current slot %d of %d (room for %d)", l,
                       L->current, L->n_slots, L->cap_slots);
    int n_current = 0, n_work = 0;
    for (int i = 0; i < L->n_slots; i++) {
        const sp_state_slot *slot = &L->slots[i];
        if (!slot->data)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "layer %d: slot %d has no data", l, i);
        switch (slot->role) {
        case SP_SLOT_FREE: break;
        case SP_SLOT_CURRENT:
            n_current++;
            if (i != L->current || slot->length != s->length)
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "layer %d: slot %d holds the current state of "
                               "length %d (current slot %d, length %d)", l, i,
                               slot->length, L->current, s->length);
            break;
        case SP_SLOT_WORK:
            n_work++;
            if (i != L->work)
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "layer %d: slot %d is a work slot, the pass's "
                               "is %d", l, i, L->work);
            break;
        case SP_SLOT_NEW:
            if (!s->pending)
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "layer %d: slot %d is a checkpoint with no "
                               "pass reserved", l, i);
            break;
        case SP_SLOT_KEPT:
            if (slot->length >= s->length ||
                s->length - slot->length > s->opt.max_rollback)
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "layer %d: slot %d keeps length %d of a "
                               "sequence of %d (rollback %d)", l, i,
                               slot->length, s->length, s->opt.max_rollback);
            for (int j = 0; j < i; j++)
                if (L->slots[j].role == SP_SLOT_KEPT &&
                    L->slots[j].length == slot->length)
                    return sp_fail(err, SPINDLE_ERR_INTERNAL,
                                   "layer %d: slots %d and %d keep length %d",
                                   l, j, i, slot->length);
            break;
        default:
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "layer %d: slot %d has role %d", l, i,
                           (int)slot->role);
        }
    }
    if (n_current != 1 || n_work != (L->work >= 0) ||
        (!s->pending && L->work >= 0))
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "layer %d: %d current and %d work slots (work %d, "
                       "pending %d)", l, n_current, n_work, L->work,
                       s->pending);
    return SPINDLE_OK;
}

/* The table covers the sequence, each block once and referenced in the
 * pool; the hashed blocks are full committed ones. */
static spindle_status check_blocks(const sp_seq_state *s, spindle_error *err) {
    const int need = (s->length + B - 1) / B;
    if (!s->pool || s->n_blocks < need || s->n_blocks > s->cap_blocks ||
        s->n_hashed < 0 || s->n_hashed > s->length / B)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "sequence of %d tokens: %d blocks (room for %d), %d "
                       "hashed%s", s->length, s->n_blocks, s->cap_blocks,
                       s->n_hashed, s->pool ? "" : ", no pool");
    const int capacity = sp_kv_pool_capacity(s->pool);
    char *seen = calloc((size_t)capacity, 1);
    if (!seen) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = SPINDLE_OK;
    for (int i = 0; i < s->n_blocks && !st; i++) {
        const int b = s->blocks[i];
        if (b < 0 || b >= capacity || seen[b])
            st = sp_fail(err, SPINDLE_ERR_INTERNAL,
                         "block table entry %d is block %d (out of range or "
                         "listed twice)", i, b);
        else if (sp_kv_pool_refs(s->pool, b) < 1)
            st = sp_fail(err, SPINDLE_ERR_INTERNAL,
                         "block table entry %d: block %d has no reference",
                         i, b);
        else
            seen[b] = 1;
    }
    free(seen);
    return st;
}

spindle_status sp_seq_state_check(const sp_seq_state *s, spindle_error *err) {
    if (s->length < 0 || s->pending < 0)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "sequence length %d, pending %d", s->length,
                       s->pending);
    for (int l = 0; l < s->n_layers; l++)
        if (s->layers[l].d.kind == SP_STATE_RECURRENT) {
            spindle_status st = check_slots(s, l, err);
            if (st) return st;
        }
    return s->has_full ? check_blocks(s, err) : SPINDLE_OK;
}
