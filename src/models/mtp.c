/* The multi-token-prediction head (mtp.h): a one-layer model over the
 * target's tensors, whose input rows are the fused embedding and hidden
 * state instead of the plain embedding.
 * sp_arch.mtp_load binds its layer; the target's hidden states come from
 * spindle_batch_entry.hidden; generation/drafter_mtp.c drafts with it.
 * Checked by tests/parity/test_mtp.py against mtp_numpy_ref.py. */
#include "models/mtp.h"
#include "models/blocks.h"
#include "base/error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct sp_mtp {
    spindle_model head;      /* the target's fields, one layer of its own */
    spindle_model *target;
    sp_linear fc;            /* [hidden][2 * hidden] */
    const float *norm_embed, *norm_hidden;
    atomic_int refs;
};

/* The head's tensors sit at the top of the checkpoint ("mtp.*"), beside a
 * multimodal model's "model.language_model." */
static const sp_tensor_info *head_tensor(const spindle_model *m,
                                         const char *name) {
    return m->gguf ? NULL : sp_tensor_set_find(m->tensors, name);
}

bool sp_mtp_present(const spindle_model *m) {
    return m && m->arch->mtp_load && head_tensor(m, "mtp.fc.weight");
}

bool spindle_model_has_mtp(const spindle_model *m) { return sp_mtp_present(m); }

spindle_model *sp_mtp_model(sp_mtp *p) { return &p->head; }

spindle_status sp_mtp_fingerprint(sp_mtp *p, char out[SPINDLE_FINGERPRINT_LEN + 1],
                                  spindle_error *err) {
    return spindle_model_fingerprint(p->target, out, err);
}

static spindle_status head_norm(spindle_model *h, const char *name,
                                bool plus_one, const float **out,
                                spindle_error *err) {
    const int n = h->cfg.hidden_size;
    spindle_status st = sp_bind_vector(h, name, n, out, err);
    if (!st && plus_one) sp_fold_norm_plus_one(h, name, *out, n);
    return st;
}

/* The head's KV pool: the target's budget shared out over its full-KV
 * layers, one more for the head's. */
static spindle_status head_pool(spindle_model *h, const spindle_model *t,
                                spindle_error *err) {
    int full = 1;
    for (int l = 0; l < t->cfg.n_layers; l++)
        full += t->state_desc[l].kind == SP_STATE_FULL_KV;
    const spindle_load_options lo = {.kv_bytes = t->kv_budget / (size_t)full};
    return sp_model_init_kv_pool(h, &lo, err);
}

static spindle_status bind_head(sp_mtp *p, spindle_error *err) {
    spindle_model *h = &p->head;
    const int64_t d = h->cfg.hidden_size;
    bool plus_one = false;
    spindle_status st = p->target->arch->mtp_load(h, p->target, &plus_one, err);
    if (!st) st = sp_bind_linear(h, "mtp.fc", d, 2 * d, false, &p->fc, err);
    if (!st) st = head_norm(h, "mtp.pre_fc_norm_embedding.weight", plus_one,
                            &p->norm_embed, err);
    if (!st) st = head_norm(h, "mtp.pre_fc_norm_hidden.weight", plus_one,
                            &p->norm_hidden, err);
    if (!st) st = head_norm(h, "mtp.norm.weight", plus_one, &h->final_norm, err);
    if (!st) st = sp_model_init_state_desc(h, err);
    return st ? st : head_pool(h, p->target, err);
}

spindle_status sp_mtp_new(spindle_model *target, sp_mtp **out,
                          spindle_error *err) {
    *out = NULL;
    if (!sp_mtp_present(target))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s has no multi-token-prediction head its family "
                       "can run (no mtp.fc.weight, or model_type %s has "
                       "none)", target->dir, target->cfg.model_type);
    sp_mtp *p = calloc(1, sizeof *p);
    if (!p) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    p->target = target;
    atomic_init(&p->refs, 1);
    spindle_model *h = &p->head;
    *h = *target;           /* borrowed: tensors, embed, lm_head, rope, pool */
    h->cfg.n_layers = 1;
    h->tensor_prefix[0] = '\0';
    h->tensor_prefix_from[0] = '\0';
    h->fingerprint[0] = '\0';
    h->family = NULL;
    h->owned = NULL;
    h->n_owned = h->cap_owned = 0;
    h->fwd = NULL;
    h->state_desc = NULL;
    h->kv_pool = NULL;
    h->final_norm = NULL;
    h->layers = calloc(1, sizeof *h->layers);
    spindle_status st = h->layers ? bind_head(p, err)
                                  : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (st) {
        sp_mtp_free(p);
        return st;
    }
    *out = p;
    return SPINDLE_OK;
}

void sp_mtp_retain(sp_mtp *p) { atomic_fetch_add(&p->refs, 1); }

void sp_mtp_free(sp_mtp *p) {
    if (!p || atomic_fetch_sub(&p->refs, 1) > 1) return;
    spindle_model *h = &p->head;
    sp_forward_free(h->fwd);
    sp_kv_pool_free(h->kv_pool);
    for (int i = 0; i < h->n_owned; i++) free(h->owned[i]);
    free(h->owned);
    free(h->layers);
    free(h->state_desc);
    if (h->family && h->arch->free_family) h->arch->free_family(h->family);
    free(p);
}

/* fused[t] = concat(norm_embed(f->x[t]), norm_hidden(hidden[t])); then
 * f->x = fc(fused). The fused rows are the pass's (f->family_rows). */
static spindle_status fuse_rows(sp_mtp *p, sp_forward *f, const float *hidden,
                                spindle_error *err) {
    const int d = p->head.cfg.hidden_size, n = f->n_rows;
    const float eps = p->head.cfg.rms_norm_eps;
    if (!sp_forward_family_rows(f, (size_t)n * 2 * d))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    float *fused = f->family_rows;
    for (size_t t = 0; t < (size_t)n; t++) {
        float *row = fused + t * 2 * d;
        sp_rmsnorm(row, f->x + t * d, p->norm_embed, d, eps, 0.0f);
        sp_rmsnorm(row + d, hidden + t * d, p->norm_hidden, d, eps, 0.0f);
    }
    sp_linear_rows(f->pool, &p->fc, fused, n, f->x);
    return SPINDLE_OK;
}

spindle_status sp_mtp_forward(sp_mtp *p, spindle_seq *seq,
                              const int32_t *tokens, const float *hidden,
                              int n, bool all_logits, float *logits,
                              float *hidden_out, spindle_error *err) {
    sp_error_clear(err);
    if (!p || !seq || !tokens || !hidden || !logits || n < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "MTP forward: no rows");
    spindle_model *h = &p->head;
    spindle_batch_entry e = {.seq = seq, .tokens = tokens, .n_tokens = n,
                             .logits_mode = all_logits ? SPINDLE_LOGITS_ALL
                                                       : SPINDLE_LOGITS_LAST,
                             .logits = logits, .hidden = hidden_out};
    spindle_status st = sp_forward_prepare(h, &h->fwd, &e, 1, err);
    if (!st) st = fuse_rows(p, h->fwd, hidden, err);
    if (!st) st = sp_forward_run_layers(h, h->fwd);
    if (st) return st;
    sp_forward_finish(h, h->fwd, &e, 1);
    return SPINDLE_OK;
}
