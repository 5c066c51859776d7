/* Loading a model and running the batched forward pass. */
#include "models/model.h"
#include "models/blocks.h"
#include "models/lora.h"
#include "models/registry.h"
#include "models/spans.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "compute/matmul/matmul.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ load */

static spindle_status init_rope(spindle_model *m, spindle_error *err) {
    m->rope_interleaved = m->cfg.rope_traditional;
    if (sp_rope_init(&m->rope, &m->cfg.rope) != 0)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

_Static_assert((int)SPINDLE_KV_F32 == (int)SP_KV_F32 &&
               (int)SPINDLE_KV_BF16 == (int)SP_KV_BF16 &&
               (int)SPINDLE_KV_F16 == (int)SP_KV_F16,
               "spindle_kv_type and sp_kv_dtype share their values");

static const char *const kv_type_names[] = {"f32", "bf16", "f16"};
#define N_KV_TYPES (int)(sizeof kv_type_names / sizeof *kv_type_names)

const char *spindle_kv_type_name(spindle_kv_type type) {
    return (int)type >= 0 && (int)type < N_KV_TYPES ? kv_type_names[type]
                                                    : NULL;
}

spindle_status spindle_kv_type_parse(const char *name, spindle_kv_type *out,
                                     spindle_error *err) {
    if (!name || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    for (int i = 0; i < N_KV_TYPES; i++)
        if (!strcmp(name, kv_type_names[i])) {
            *out = (spindle_kv_type)i;
            return SPINDLE_OK;
        }
    return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                   "unknown KV cache type '%s' (expected f32, bf16 or f16)",
                   name);
}

spindle_status spindle_model_load(const char *path,
                                  const spindle_load_options *options,
                                  spindle_model **out, spindle_error *err) {
    sp_error_clear(err);
    if (!out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "out is NULL");
    *out = NULL;
    /* Checked before any file is opened: a typo costs nothing. */
    spindle_kv_type kv_type = options ? options->kv_type : SPINDLE_KV_F32;
    if (!spindle_kv_type_name(kv_type))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "unknown KV cache type %d (expected SPINDLE_KV_F32, "
                       "SPINDLE_KV_BF16 or SPINDLE_KV_F16)", (int)kv_type);
    int max_rollback = options ? options->max_rollback : 0;
    if (max_rollback < 0 || max_rollback > SPINDLE_MAX_ROLLBACK_LIMIT)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "max_rollback %d is outside 0..%d", max_rollback,
                       SPINDLE_MAX_ROLLBACK_LIMIT);
    spindle_model *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    m->max_rollback = max_rollback ? max_rollback
                                   : SPINDLE_DEFAULT_MAX_ROLLBACK;
    const sp_map_mode saved_mode = sp_map_mode_set(
        options && options->use_mmap ? SP_MAP_FILE : SP_MAP_MEMORY);
    spindle_status st = sp_gguf_model_locate(path, &m->dir, err);
    if (!st && m->dir) {
        st = sp_gguf_weights_open(m->dir, sp_gguf_families(), &m->gguf, err);
        if (!st) st = sp_gguf_model_config(m->gguf, &m->cfg, err);
    } else if (!st) {
        st = sp_resolve_model_path(path, &m->dir, err);
        if (!st) st = sp_config_load(m->dir, &m->cfg, err);
    }
    if (!st) {
        m->arch = sp_find_arch(m->cfg.model_type);
        if (!m->arch)
            st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                         "%s/config.json: model_type '%s' is not supported "
                         "(supported: %s)", m->dir, m->cfg.model_type,
                         sp_supported_archs());
    }
    if (!st && !m->gguf)
        st = sp_safetensors_open_dir(m->dir, &m->tensors, err);
    sp_map_mode_set(saved_mode);
    if (!st) {
        m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
        if (!m->layers) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    if (!st) {
        m->kv_type = (sp_kv_dtype)kv_type;
        m->max_context = m->cfg.max_position;
        if (options && options->max_context > 0)
            m->max_context = options->max_context;
        st = init_rope(m, err);
    }
    if (!st && !m->arch->encoder) st = sp_bind_embeddings_and_head(m, err);
    if (!st) st = m->arch->load(m, err);
    if (!st) st = sp_model_init_state_desc(m, err);
    if (!st) st = sp_model_init_kv_pool(m, options, err);
    if (!st) {
        m->pool = sp_pool_create(options ? options->n_threads : 0);
        if (!m->pool)
            st = sp_fail(err, SPINDLE_ERR_MEMORY, "cannot start threads");
    }
    if (st) {
        spindle_model_free(m);
        return st;
    }
    *out = m;
    return SPINDLE_OK;
}

void spindle_model_free(spindle_model *m) {
    if (!m) return;
    sp_forward_free(m->fwd);
    sp_pool_destroy(m->pool);
    sp_kv_pool_free(m->kv_pool);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->state_desc);
    if (m->family && m->arch->free_family) m->arch->free_family(m->family);
    sp_rope_free(&m->rope);
    sp_tensor_set_free(m->tensors);
    sp_gguf_weights_free(m->gguf);
    sp_config_free(&m->cfg);
    free(m->dir);
    free(m);
}

const char *spindle_model_dir(const spindle_model *m) { return m ? m->dir : NULL; }
int spindle_model_vocab_size(const spindle_model *m) { return m ? m->cfg.vocab_size : 0; }
int spindle_model_hidden_size(const spindle_model *m) { return m ? m->cfg.hidden_size : 0; }
int spindle_model_context_length(const spindle_model *m) { return m ? m->max_context : 0; }
bool spindle_model_has_logits(const spindle_model *m) { return m && !m->arch->encoder; }

int spindle_model_eos_ids(const spindle_model *m, const int32_t **ids) {
    if (ids) *ids = m ? m->cfg.eos_ids : NULL;
    return m ? m->cfg.n_eos : 0;
}

bool spindle_model_diffusion_info(const spindle_model *m,
                                  spindle_diffusion_info *out) {
    if (!m || !m->arch->diffusion) return false;
    if (out) {
        out->mask_token = sp_config_int(&m->cfg, "mask_token_id", -1);
        out->shift_logits = sp_config_bool(&m->cfg, "diffusion_shift_logits",
                                           m->arch->diffusion_shifted);
    }
    return true;
}

/* --------------------------------------------------------------- forward */

/* A diffusion model's pass: each of the n rows from `row` on also sees the
 * rows after it (the whole pass is one bidirectional span). */
static bool rows_see_each_other(sp_forward *f, int row, int n) {
    for (int t = 0; t < n; t++) f->ahead[row + t] = n - 1 - t;
    return n > 1;
}

static spindle_status check_batch(spindle_model *m, spindle_batch_entry *e,
                                  int n, int *rows, spindle_error *err) {
    *rows = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].seq || e[i].seq->model != m)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "batch entry %d: sequence of another model", i);
        if (e[i].n_tokens < 1 || (!e[i].tokens && !e[i].spans))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "batch entry %d: no tokens", i);
        spindle_status st = e[i].spans ? sp_entry_check_spans(m, &e[i], i, err)
                                       : SPINDLE_OK;
        if (st) return st;
        if (e[i].logits_mode != SPINDLE_LOGITS_NONE && !e[i].logits)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "batch entry %d: no logits buffer", i);
        for (int j = 0; j < i; j++)
            if (e[j].seq == e[i].seq)
                return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                               "batch entries %d and %d share a sequence", j, i);
        for (int t = 0; t < e[i].n_tokens && !e[i].spans; t++)
            if (e[i].tokens[t] < 0 || e[i].tokens[t] >= m->cfg.vocab_size)
                return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                               "token id %d is outside the vocabulary (%d)",
                               e[i].tokens[t], m->cfg.vocab_size);
        if (e[i].adapter && e[i].adapter->model != m)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "batch entry %d: adapter of another model", i);
        if (e[i].n_tokens > (1 << 24) - *rows)
            return sp_fail(err, SPINDLE_ERR_LIMIT, "batch too large");
        *rows += e[i].n_tokens;
    }
    return SPINDLE_OK;
}

/* lm_head over the k normalized rows gathered in f->xn, into `out`. */
static void head_rows(spindle_model *m, sp_forward *f, int k, float *out) {
    sp_forward rows = *f;
    rows.n_rows = k;
    sp_linear_forward(&rows, &m->lm_head, f->xn, out);
    if (m->arch->logits)
        m->arch->logits(m, out, (size_t)k * m->cfg.vocab_size);
}

/* Final norm and lm_head for the rows whose logits were asked for. LAST
 * entries whose logits buffers follow each other in memory (a batch of
 * decode rows) share one lm_head product, so the head's weights are read
 * once for all of them rather than once per sequence. */
static void compute_logits(spindle_model *m, sp_forward *f,
                           spindle_batch_entry *e, int n) {
    int d = m->cfg.hidden_size;
    size_t vocab = (size_t)m->cfg.vocab_size;
    sp_forward one = *f;
    one.n_rows = 1;
    float *run = NULL;   /* logits of the first LAST row gathered so far */
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].logits_mode == SPINDLE_LOGITS_NONE) continue;
        int first = f->seqs[i].first_row, count = f->seqs[i].n_rows;
        if (k && (e[i].logits_mode != SPINDLE_LOGITS_LAST ||
                  e[i].logits != run + k * vocab)) {
            head_rows(m, f, k, run);
            k = 0;
        }
        if (e[i].logits_mode == SPINDLE_LOGITS_ALL) {
            sp_forward all = *f;
            all.n_rows = count;
            sp_norm_rows(&all, f->x + (size_t)first * d, m->final_norm, f->xn);
            head_rows(m, f, count, e[i].logits);
            continue;
        }
        if (!k) run = e[i].logits;
        sp_norm_rows(&one, f->x + (size_t)(first + count - 1) * d,
                     m->final_norm, f->xn + (size_t)k * d);
        k++;
    }
    if (k) head_rows(m, f, k, run);
}

spindle_status sp_forward_prepare(spindle_model *m, sp_forward **fwd,
                                  spindle_batch_entry *e, int n,
                                  spindle_error *err) {
    int rows;
    spindle_status st = check_batch(m, e, n, &rows, err);
    if (!st) st = sp_forward_reserve(fwd, m, rows, n, err);
    /* Everything a pass allocates, before any layer runs: a failure here
     * or in a layer leaves every sequence as it was (nothing is committed). */
    for (int i = 0; i < n && !st; i++)
        st = sp_seq_state_reserve(e[i].seq->state, e[i].n_tokens, err);
    if (st) return st;

    sp_forward *f = *fwd;
    f->n_rows = rows;
    f->n_seqs = n;
    f->any_adapter = false;
    f->any_span = false;
    f->token_types = NULL;
    int row = 0;
    for (int i = 0; i < n; i++) {
        sp_forward_seq *s = &f->seqs[i];
        s->state = e[i].seq->state;
        s->first_row = row;
        s->n_rows = e[i].n_tokens;
        s->first_pos = sp_seq_state_length(s->state);
        s->adapter = e[i].adapter;
        s->adapter_scale = e[i].adapter_scale != 0.0f ? e[i].adapter_scale : 1.0f;
        if (s->adapter) f->any_adapter = true;
        s->sees_ahead = sp_entry_fill_rows(m, f, &e[i], row);
        if (m->arch->diffusion) s->sees_ahead = rows_see_each_other(f, row, s->n_rows);
        /* The pass's ids and keys, for the blocks it fills (borrowed from
         * the scratch until the commit). */
        sp_seq_state_set_pending_tokens(s->state, f->tokens + row);
        sp_seq_state_set_pending_keys(s->state, e[i].spans ? f->keys + row
                                                           : NULL);
        for (int t = 0; t < e[i].n_tokens; t++, row++)
            f->pos[row] = s->first_pos + t;
    }
    f->status = SPINDLE_OK;
    f->err = err;
    return SPINDLE_OK;
}

spindle_status sp_forward_run_layers(spindle_model *m, sp_forward *f) {
    if (m->arch->begin_layers) m->arch->begin_layers(f);
    for (int l = 0; l < m->cfg.n_layers && !f->status; l++) m->arch->layer(f, l);
    return f->status;
}

spindle_status sp_forward_layers(spindle_model *m, sp_forward **fwd,
                                 spindle_batch_entry *e, int n,
                                 spindle_error *err) {
    spindle_status st = sp_forward_prepare(m, fwd, e, n, err);
    return st ? st : sp_forward_run_layers(m, *fwd);
}

void sp_forward_finish(spindle_model *m, sp_forward *f, spindle_batch_entry *e,
                       int n) {
    const size_t d = (size_t)m->cfg.hidden_size;
    for (int i = 0; i < n; i++)
        if (e[i].hidden)
            memcpy(e[i].hidden, f->x + (size_t)f->seqs[i].first_row * d,
                   (size_t)f->seqs[i].n_rows * d * sizeof(float));
    compute_logits(m, f, e, n);
    for (int i = 0; i < n; i++) sp_seq_state_commit(e[i].seq->state);
}

spindle_status spindle_forward(spindle_model *m, spindle_batch_entry *e,
                               int n, spindle_error *err) {
    sp_error_clear(err);
    if (!m || !e || n < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "empty batch");
    if (m->arch->encoder)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s is an embedding encoder (%s): it has no logits; "
                       "use embeddings", m->dir, m->cfg.model_type);
    spindle_status st = sp_forward_layers(m, &m->fwd, e, n, err);
    if (st) return st;
    sp_forward_finish(m, m->fwd, e, n);
    return SPINDLE_OK;
}
