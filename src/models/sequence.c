/* Sequences of a model: their per-layer state (runtime/seq_state.h) from
 * the layers' declared kinds, truncation and snapshots. */
#include "models/model.h"
#include "base/error.h"

#include <stdlib.h>

int sp_layer_head_dim(const spindle_model *m, int l) {
    int hd = m->layers ? m->layers[l].head_dim : 0;
    return hd > 0 ? hd : m->cfg.head_dim;
}

int sp_layer_kv_heads(const spindle_model *m, int l) {
    int n = m->layers ? m->layers[l].n_kv_heads : 0;
    return n > 0 ? n : m->cfg.n_kv_heads;
}

int sp_layer_intermediate(const spindle_model *m, int l) {
    int n = m->layers ? m->layers[l].intermediate : 0;
    return n > 0 ? n : m->cfg.intermediate_size;
}

/* The state a layer keeps when its family has no layer_state hook. */
static void default_layer_state(const spindle_model *m, int l,
                                sp_layer_state_desc *out) {
    const int window = m->layers[l].window;
    if (m->layers[l].shares_kv) {
        *out = (sp_layer_state_desc){.kind = SP_STATE_NONE};
        return;
    }
    *out = (sp_layer_state_desc){
        .kind = window > 0 ? SP_STATE_WINDOW_KV : SP_STATE_FULL_KV,
        .n_kv_heads = sp_layer_kv_heads(m, l),
        .head_dim = sp_layer_head_dim(m, l),
        .window = window > 0 ? window : 0,
    };
}

spindle_status sp_model_init_state_desc(spindle_model *m, spindle_error *err) {
    const int n = m->cfg.n_layers;
    m->state_desc = calloc((size_t)n + 1, sizeof *m->state_desc);
    if (!m->state_desc) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int l = 0; l < n; l++) {
        (m->arch->layer_state ? m->arch->layer_state
                              : default_layer_state)(m, l, &m->state_desc[l]);
        spindle_status st = sp_layer_state_desc_check(&m->state_desc[l], l, err);
        if (st) return st;
    }
    return SPINDLE_OK;
}

spindle_status spindle_seq_new(spindle_model *model, spindle_seq **out,
                               spindle_error *err) {
    if (!model || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    spindle_seq *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    s->model = model;
    const sp_seq_state_options opt = {.kv_type = model->kv_type,
                                      .max_length = model->max_context,
                                      .max_rollback = model->max_rollback,
                                      .pool = model->kv_pool};
    spindle_status st = sp_seq_state_new(model->state_desc, model->cfg.n_layers,
                                         &opt, &s->state, err);
    if (st) { free(s); return st; }
    *out = s;
    return SPINDLE_OK;
}

void spindle_seq_free(spindle_seq *s) {
    if (!s) return;
    sp_seq_state_free(s->state);
    free(s);
}

int spindle_seq_length(const spindle_seq *s) {
    return s ? sp_seq_state_length(s->state) : 0;
}

size_t spindle_seq_state_bytes(const spindle_seq *s) {
    return s ? sizeof *s + sp_seq_state_bytes(s->state) : 0;
}

spindle_status spindle_seq_truncate(spindle_seq *s, int length,
                                    spindle_error *err) {
    if (!s) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "sequence is NULL");
    return sp_seq_state_truncate(s->state, length, err);
}

/* ------------------------------------------------------------ snapshots */

struct spindle_seq_snapshot {
    const spindle_model *model;  /* the only model it restores into */
    sp_state_snapshot *state;
};

spindle_status spindle_seq_snapshot_take(const spindle_seq *seq,
                                         spindle_seq_snapshot **out,
                                         spindle_error *err) {
    if (!seq || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    spindle_seq_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    snap->model = seq->model;
    spindle_status st = sp_seq_state_snapshot(seq->state, &snap->state, err);
    if (st) { free(snap); return st; }
    *out = snap;
    return SPINDLE_OK;
}

spindle_status spindle_seq_snapshot_restore(spindle_seq *seq,
                                            const spindle_seq_snapshot *snap,
                                            spindle_error *err) {
    spindle_status st = sp_seq_snapshot_check(seq, snap, err);
    return st ? st : sp_seq_state_restore(seq->state, snap->state, err);
}

spindle_status sp_seq_snapshot_check(const spindle_seq *seq,
                                     const spindle_seq_snapshot *snap,
                                     spindle_error *err) {
    if (!seq || !snap) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    if (snap->model != seq->model)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the snapshot was taken from a sequence of another "
                       "model");
    return sp_seq_state_check_snapshot(seq->state, snap->state, err);
}

void spindle_seq_snapshot_free(spindle_seq_snapshot *snap) {
    if (!snap) return;
    sp_state_snapshot_free(snap->state);
    free(snap);
}

size_t spindle_seq_snapshot_bytes(const spindle_seq_snapshot *snap) {
    return snap ? sp_state_snapshot_bytes(snap->state) : 0;
}

int spindle_seq_snapshot_length(const spindle_seq_snapshot *snap) {
    return snap ? sp_state_snapshot_length(snap->state) : 0;
}

const void *spindle_seq_snapshot_data(const spindle_seq_snapshot *snap) {
    return snap ? sp_state_snapshot_data(snap->state) : NULL;
}

spindle_status spindle_seq_snapshot_from_data(const spindle_model *model,
                                              const void *data, size_t n,
                                              spindle_seq_snapshot **out,
                                              spindle_error *err) {
    if (!model || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    spindle_seq_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    snap->model = model;
    spindle_status st = sp_state_snapshot_from_bytes(data, n, &snap->state, err);
    if (st) { free(snap); return st; }
    *out = snap;
    return SPINDLE_OK;
}
