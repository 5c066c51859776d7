/* The multi-token-prediction head (mtp.h): a one-layer model over the
 * target's tensors, whose input rows are the fused embedding and hidden
 * state instead of the plain embedding.
 * sp_arch.mtp_load binds its layer; the target's hidden states come from
 * spindle_batch_entry.hidden; generation/drafter_mtp.c drafts with it.
 * Checked by tests/parity/test_mtp.py against mtp_numpy_ref.py. */
#include "models/mtp.h"
#include "models/blocks.h"
#include "base/error.h"

#include "artifacts/fingerprint.h"
#include "base/mapped_file.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct spindle_mtp_head {
    spindle_model head;      /* the target's fields, one layer of its own */
    spindle_model *target;
    sp_linear fc;            /* [hidden][2 * hidden] */
    const float *norm_embed, *norm_hidden;
    atomic_int refs;
    /* A companion directory's head (all NULL / 0 for one inside the
     * target's checkpoint): its tensors, the config its projections are
     * bound under (the target's, with the companion's quantization), its
     * directory, content fingerprint and block_size. */
    sp_tensor_set *companion;
    cJSON *companion_config;
    char *companion_dir;
    char companion_fp[SPINDLE_FINGERPRINT_LEN + 1];
    int block_size;
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
    if (!p->companion) return spindle_model_fingerprint(p->target, out, err);
    memcpy(out, p->companion_fp, sizeof p->companion_fp);
    return SPINDLE_OK;
}

bool sp_mtp_binds(const sp_mtp *p, const spindle_model *target) {
    return p && p->target == target;
}

int sp_mtp_block_size(const sp_mtp *p) { return p ? p->block_size : 0; }

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
        full += sp_state_kind_paged(t->state_desc[l].kind);
    const spindle_load_options lo = {.kv_bytes = t->kv_budget / (size_t)full};
    return sp_model_init_kv_pool(h, &lo, err);
}

/* plus_one: -1 decides from the target's files (mtp_load), else 0 / 1. */
static spindle_status bind_head(sp_mtp *p, int plus_one, spindle_error *err) {
    spindle_model *h = &p->head;
    const int64_t d = h->cfg.hidden_size;
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

/* A head over target's fields (borrowed: tensors, embed, lm_head, rope,
 * pool), with one layer of its own still to bind. */
static sp_mtp *head_shell(spindle_model *target) {
    sp_mtp *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->target = target;
    atomic_init(&p->refs, 1);
    spindle_model *h = &p->head;
    *h = *target;
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
    if (!h->layers) {
        free(p);
        return NULL;
    }
    return p;
}

spindle_status sp_mtp_new(spindle_model *target, sp_mtp **out,
                          spindle_error *err) {
    *out = NULL;
    if (!sp_mtp_present(target))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s has no multi-token-prediction head its family "
                       "can run (no mtp.fc.weight, or model_type %s has "
                       "none)", target->dir, target->cfg.model_type);
    sp_mtp *p = head_shell(target);
    if (!p) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = bind_head(p, -1, err);
    if (st) {
        sp_mtp_free(p);
        return st;
    }
    *out = p;
    return SPINDLE_OK;
}

/* ---- companion directories ---- */

/* The companion's "quantization" block as the config the head's
 * projections are bound under: the target's effective config with that
 * block in place of the target's (a companion is quantized on its own). */
static spindle_status companion_quantization(sp_mtp *p, const cJSON *root,
                                             spindle_error *err) {
    spindle_model *h = &p->head;
    p->companion_config = cJSON_Duplicate(p->target->cfg.json, 1);
    if (!p->companion_config) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(p->companion_config, "quantization");
    cJSON_DeleteItemFromObjectCaseSensitive(p->companion_config, "quantization_config");
    h->cfg.json = p->companion_config;
    h->cfg.quantized = false;
    h->cfg.quant_bits = h->cfg.quant_group_size = 0;
    h->cfg.quant_mxfp4 = false;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    if (!cJSON_IsObject(q)) return SPINDLE_OK;
    cJSON *copy = cJSON_Duplicate(q, 1);
    if (!copy) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    cJSON_AddItemToObject(p->companion_config, "quantization", copy);
    const cJSON *bits = cJSON_GetObjectItemCaseSensitive(q, "bits");
    const cJSON *group = cJSON_GetObjectItemCaseSensitive(q, "group_size");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(q, "mode");
    h->cfg.quantized = true;
    h->cfg.quant_bits = cJSON_IsNumber(bits) ? bits->valueint : 0;
    h->cfg.quant_group_size = cJSON_IsNumber(group) ? group->valueint : 0;
    h->cfg.quant_mxfp4 = cJSON_IsString(mode) && !strcmp(mode->valuestring, "mxfp4");
    return SPINDLE_OK;
}

/* A hidden size in config.json: the text_config's (mlx-lm's layout), else
 * the top level's; 0 when absent. */
static int companion_hidden(const cJSON *root) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(tc) ? tc : root,
                                                      "hidden_size");
    if (!cJSON_IsNumber(d)) d = cJSON_GetObjectItemCaseSensitive(root, "hidden_size");
    return cJSON_IsNumber(d) && d->valuedouble >= 1 && d->valuedouble < 1e6
               ? d->valueint : 0;
}

/* The companion's config.json: its type, hidden size and block_size. */
static spindle_status companion_config(sp_mtp *p, const char *dir, cJSON **root,
                                       spindle_error *err) {
    char *path = sp_path_join(dir, "config.json"), *text = NULL;
    size_t len = 0;
    spindle_status st = path ? sp_read_text_file(path, &text, &len, err)
                             : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    *root = st ? NULL : cJSON_ParseWithLength(text, len);
    free(text);
    if (!st && !cJSON_IsObject(*root))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: not a JSON object", path);
    const cJSON *type = st ? NULL : cJSON_GetObjectItemCaseSensitive(*root, "model_type");
    if (!st && !(cJSON_IsString(type) && !strcmp(type->valuestring, "qwen3_5_mtp")))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: model_type is %s, not "
                     "\"qwen3_5_mtp\" (an MTP companion directory)", path,
                     cJSON_IsString(type) ? type->valuestring : "missing");
    const int hidden = st ? 0 : companion_hidden(*root);
    if (!st && !hidden)
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: no hidden_size (in "
                     "text_config or at the top)", path);
    if (!st && hidden != p->target->cfg.hidden_size)
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: the MTP companion's hidden "
                     "size is %d, the target's %d: split from a different "
                     "checkpoint?", dir, hidden, p->target->cfg.hidden_size);
    const cJSON *block = st ? NULL : cJSON_GetObjectItemCaseSensitive(*root, "block_size");
    /* mlx-lm's default when the key is absent. */
    p->block_size = 3;
    if (!st && block && !(cJSON_IsNumber(block) && block->valuedouble >= 1 &&
                          block->valuedouble <= SPINDLE_MAX_DRAFT_TOKENS &&
                          block->valuedouble == (double)block->valueint))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: block_size must be an "
                     "integer in [1, %d]", path, SPINDLE_MAX_DRAFT_TOKENS);
    else if (!st && block) p->block_size = block->valueint;
    free(path);
    return st;
}

/* Where the companion's tensors are and how its norms are stored: mlx-lm's
 * layout names them as its Model does ("fc.weight", "layers.0...", norms
 * as used), the Hugging Face one under "mtp." with (1 + w) norms stored as
 * w (mlx-lm's qwen3_5_mtp sanitize tells them apart the same way). */
static spindle_status companion_layout(sp_mtp *p, int *plus_one,
                                       spindle_error *err) {
    spindle_model *h = &p->head;
    if (sp_tensor_set_find(p->companion, "mtp.fc.weight")) {
        *plus_one = 1;
        return SPINDLE_OK;
    }
    if (!sp_tensor_set_find(p->companion, "fc.weight"))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: missing tensor 'fc.weight' "
                       "(not an MTP companion's weights)", p->companion_dir);
    snprintf(h->tensor_prefix_from, sizeof h->tensor_prefix_from, "mtp.");
    *plus_one = 0;
    return SPINDLE_OK;
}

spindle_status spindle_mtp_head_load(spindle_model *target, const char *dir,
                                     spindle_mtp_head **out, spindle_error *err) {
    sp_error_clear(err);
    if (out) *out = NULL;
    if (!target || !dir || !out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    if (!target->arch->mtp_load || target->gguf)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "%s: model_type %s has no "
                       "MTP head Spindle can run", target->dir,
                       target->cfg.model_type);
    sp_mtp *p = head_shell(target);
    if (!p) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    cJSON *root = NULL;
    int plus_one = 0;
    p->companion_dir = strdup(dir);
    spindle_status st = p->companion_dir ? companion_config(p, dir, &root, err)
                                         : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = sp_safetensors_open_dir(dir, &p->companion, err);
    if (!st) st = sp_fingerprint_path(dir, p->companion_fp, err);
    if (!st) {
        p->head.tensors = p->companion;
        p->head.dir = p->companion_dir;
        st = companion_layout(p, &plus_one, err);
    }
    if (!st) st = companion_quantization(p, root, err);
    if (!st) st = bind_head(p, plus_one, err);
    cJSON_Delete(root);
    if (st) {
        sp_mtp_free(p);
        return st;
    }
    *out = p;
    return SPINDLE_OK;
}

void spindle_mtp_head_free(spindle_mtp_head *head) { sp_mtp_free(head); }

int spindle_mtp_head_block_size(const spindle_mtp_head *head) {
    return sp_mtp_block_size(head);
}

void sp_mtp_retain(sp_mtp *p) { atomic_fetch_add(&p->refs, 1); }

void sp_mtp_free(sp_mtp *p) {
    if (!p || atomic_fetch_sub(&p->refs, 1) > 1) return;
    spindle_model *h = &p->head;
    sp_tensor_set_free(p->companion);
    cJSON_Delete(p->companion_config);
    free(p->companion_dir);
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
