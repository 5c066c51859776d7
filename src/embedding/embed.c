/* spindle_embed: inputs -> token rows (truncated as sentence-transformers
 * truncates) -> forward passes of many inputs each -> pooling -> optional
 * normalization and Matryoshka truncation.
 *
 * The embedder owns its forward scratch and thread pool, so it shares
 * nothing mutable with the model's own forward pass (the weights are read
 * only): an embedding request and an engine step may run at once. */
#include "embedding/st_config.h"
#include "artifacts/gguf_model.h"
#include "models/blocks.h"
#include "base/error.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Tokens per forward pass: enough rows for the matrix products to run as
 * GEMMs, small enough that the activations stay a few MB. */
#define PASS_TOKENS 4096

struct spindle_embedder {
    spindle_model *model;
    sp_st_config st;
    int max_tokens;
    sp_pool *pool;
    sp_forward *fwd;
    pthread_mutex_t lock;
};

/* A GGUF has no sentence-transformers modules: {arch}.pooling_type says
 * the pooling (llama.cpp's enum: 1 mean, 2 CLS, 3 last) and the result is
 * normalized, as llama.cpp's llama-embedding does by default (and
 * sentence-transformers' Normalize module, which the GGUF converter drops,
 * did). A file without the key (a chat model's) records no way to pool:
 * llama.cpp then gives per-token rows, and any one pooling would be a
 * guess, so it needs the caller's choice. */
static spindle_status gguf_pooling(const spindle_model *m, bool chosen, sp_st_config *cfg,
                                   spindle_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg->normalize = true;
    if (chosen) return SPINDLE_OK;
    const sp_gguf *g = sp_gguf_weights_file(m->gguf);
    const sp_gguf_value *v = sp_gguf_arch_value(g, m->arch->gguf->arch,
                                                "pooling_type");
    if (!v)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "the GGUF records no pooling (%s.pooling_type): choose one with "
                       "--pooling mean|cls|last (%s)", m->arch->gguf->arch, m->dir);
    int64_t kind = -1;
    if (!sp_gguf_value_i64(v, &kind)) kind = -1;
    if (kind < 1 || kind > 3)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: %s.pooling_type %lld is not supported (1 mean, "
                       "2 cls, 3 last)", m->dir, m->arch->gguf->arch,
                       (long long)kind);
    cfg->pooling = kind == 1 ? SP_POOL_MEAN : kind == 2 ? SP_POOL_CLS
                                                       : SP_POOL_LAST;
    return SPINDLE_OK;
}

spindle_status spindle_embedder_new(spindle_model *model,
                                    const spindle_embedder_options *options,
                                    spindle_embedder **out,
                                    spindle_error *err) {
    sp_error_clear(err);
    if (!model || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    const spindle_pooling pooling = options ? options->pooling : SPINDLE_POOLING_MODEL;
    if (pooling < SPINDLE_POOLING_MODEL || pooling > SPINDLE_POOLING_LAST)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "pooling %d is not a spindle_pooling",
                       (int)pooling);
    spindle_embedder *e = calloc(1, sizeof *e);
    if (!e) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    e->model = model;
    const bool chosen = pooling != SPINDLE_POOLING_MODEL;
    spindle_status st = model->gguf
        ? gguf_pooling(model, chosen, &e->st, err)
        : sp_st_config_load(model->dir, model->arch->encoder,
                            model->cfg.hidden_size, &e->st, err);
    if (st) {
        free(e);
        return st;
    }
    if (chosen)
        e->st.pooling = pooling == SPINDLE_POOLING_MEAN ? SP_POOL_MEAN
                        : pooling == SPINDLE_POOLING_CLS ? SP_POOL_CLS : SP_POOL_LAST;
    int limit = model->max_context > 0 ? model->max_context : 1 << 20;
    /* An encoder's positions are rows of its position table, whatever
     * context the model was loaded with. */
    if (model->arch->encoder && model->cfg.max_position > 0 &&
        model->cfg.max_position < limit)
        limit = model->cfg.max_position;
    e->max_tokens = e->st.max_seq_length > 0 && e->st.max_seq_length < limit
                        ? e->st.max_seq_length : limit;
    if (options && options->max_tokens > 0)
        e->max_tokens = options->max_tokens < limit ? options->max_tokens : limit;
    e->pool = sp_pool_create(options ? options->n_threads : 0);
    pthread_mutex_init(&e->lock, NULL);
    *out = e;
    return SPINDLE_OK;
}

void spindle_embedder_free(spindle_embedder *e) {
    if (!e) return;
    sp_forward_free(e->fwd);
    sp_pool_destroy(e->pool);
    sp_st_config_free(&e->st);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int spindle_embedder_dim(const spindle_embedder *e) {
    return e ? e->model->cfg.hidden_size : 0;
}

int spindle_embedder_max_tokens(const spindle_embedder *e) {
    return e ? e->max_tokens : 0;
}

/* ------------------------------------------------------------ tokens */

/* One input's ids, owned, already truncated. */
typedef struct embed_ids {
    int32_t *ids;
    int n;
} embed_ids;

/* The ids of `text` with the tokenizer's special tokens, at most `max`:
 * like tokenizers' truncation (applied before the post-processor adds its
 * tokens), the content is cut at its end and the added tokens stay. */
static spindle_status encode_truncated(const spindle_tokenizer *tok,
                                       const char *text, int max,
                                       embed_ids *out, spindle_error *err) {
    int32_t *full = NULL, *plain = NULL;
    size_t n_full = 0, n_plain = 0;
    size_t len = strlen(text);
    spindle_status st = spindle_tokenizer_encode(tok, text, len, true, &full,
                                                 &n_full, err);
    if (!st && n_full > (size_t)max)
        st = spindle_tokenizer_encode(tok, text, len, false, &plain, &n_plain,
                                      err);
    if (st || n_full <= (size_t)max) {
        out->ids = full;
        out->n = (int)n_full;
        spindle_free(plain);
        return st;
    }
    /* Where the content sits among the special tokens; a post-processor
     * that changed it (none known) gets its ids cut at the end. */
    size_t n = (size_t)max;
    if (n_full > n_plain) {
        const size_t added = n_full - n_plain;
        size_t lead = 0;
        while (lead <= added &&
               memcmp(full + lead, plain, n_plain * sizeof *plain) != 0)
            lead++;
        if (lead <= added && added < (size_t)max) {
            const size_t keep = (size_t)max - added;
            memmove(full + lead + keep, full + lead + n_plain,
                    (added - lead) * sizeof *full);
        }
    }
    spindle_free(plain);
    out->ids = full;
    out->n = (int)n;
    return SPINDLE_OK;
}

static char *with_prompt(const char *prompt, const char *text) {
    size_t a = strlen(prompt), b = strlen(text);
    char *s = malloc(a + b + 1);
    if (!s) return NULL;
    memcpy(s, prompt, a);
    memcpy(s + a, text, b + 1);
    return s;
}

static spindle_status input_ids(const spindle_embedder *e,
                                const spindle_embed_request *r, int i,
                                const char *prompt, embed_ids *out,
                                spindle_error *err) {
    const spindle_embed_input *in = &r->inputs[i];
    if (in->tokens) {
        if (in->n_tokens < 1)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT, "input %d has no tokens", i);
        for (int t = 0; t < in->n_tokens; t++)
            if (in->tokens[t] < 0 || in->tokens[t] >= e->model->cfg.vocab_size)
                return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                               "input %d: token id %d is outside the "
                               "vocabulary (%d)", i, in->tokens[t],
                               e->model->cfg.vocab_size);
        int n = in->n_tokens < e->max_tokens ? in->n_tokens : e->max_tokens;
        out->ids = malloc((size_t)n * sizeof *out->ids);
        if (!out->ids) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        memcpy(out->ids, in->tokens, (size_t)n * sizeof *out->ids);
        out->n = n;
        return SPINDLE_OK;
    }
    if (!in->text)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "input %d has no text", i);
    if (!r->tokenizer)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "text inputs need a tokenizer");
    char *text = prompt && *prompt ? with_prompt(prompt, in->text) : NULL;
    if (prompt && *prompt && !text)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = encode_truncated(r->tokenizer, text ? text : in->text,
                                         e->max_tokens, out, err);
    free(text);
    if (!st && out->n < 1)
        st = sp_fail(err, SPINDLE_ERR_ARGUMENT,
                     "input %d encodes to no tokens", i);
    return st;
}

/* ----------------------------------------------------------- pooling */

/* The scratch of pooling one input: hidden floats of a normalized row, of
 * the pooled vector, and doubles of the sum. */
typedef struct pool_scratch {
    float *row, *pooled;
    double *acc;
} pool_scratch;

/* Pool sequence s's output rows into ps->pooled. */
static void pool_rows(const spindle_embedder *e, const sp_forward *f, int s,
                      const pool_scratch *ps) {
    const spindle_model *m = e->model;
    const int d = m->cfg.hidden_size;
    const sp_forward_seq *sq = &f->seqs[s];
    int first = 0, count = sq->n_rows;
    if (e->st.pooling == SP_POOL_CLS) count = 1;
    if (e->st.pooling == SP_POOL_LAST) first = sq->n_rows - 1, count = 1;
    double *acc = ps->acc;
    for (int i = 0; i < d; i++) acc[i] = 0.0;
    for (int t = first; t < first + count; t++) {
        const float *x = f->x + (size_t)(sq->first_row + t) * d;
        /* A decoder's hidden states leave through its final norm. */
        if (!m->arch->encoder) {
            sp_rmsnorm(ps->row, x, m->final_norm, d, m->cfg.rms_norm_eps,
                       0.0f);
            x = ps->row;
        }
        for (int i = 0; i < d; i++) acc[i] += x[i];
    }
    for (int i = 0; i < d; i++) ps->pooled[i] = (float)(acc[i] / count);
}

/* Matryoshka truncation to `width`, then the Normalize module's L2 norm
 * (torch's F.normalize: x / max(|x|, 1e-12)). */
static void finish(const spindle_embedder *e, const float *pooled, int width,
                   float *out) {
    memcpy(out, pooled, (size_t)width * sizeof *out);
    if (!e->st.normalize) return;
    double ss = 0.0;
    for (int i = 0; i < width; i++) ss += (double)out[i] * out[i];
    double norm = sqrt(ss);
    if (norm < 1e-12) norm = 1e-12;
    for (int i = 0; i < width; i++) out[i] = (float)(out[i] / norm);
}

/* --------------------------------------------------------- the passes */

/* One forward pass over inputs [first, first + n), into out rows. */
static spindle_status run_pass(spindle_embedder *e, embed_ids *ids,
                               int first, int n, int width, float *out,
                               spindle_error *err) {
    spindle_model *m = e->model;
    spindle_batch_entry *entries = calloc((size_t)n, sizeof *entries);
    const size_t d = (size_t)m->cfg.hidden_size;
    float *floats = malloc(2 * d * sizeof *floats);
    double *acc = malloc(d * sizeof *acc);
    const pool_scratch ps = {floats, floats + d, acc};
    spindle_status st = entries && floats && acc
                            ? SPINDLE_OK
                            : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int i = 0; i < n && !st; i++) {
        st = spindle_seq_new(m, &entries[i].seq, err);
        entries[i].tokens = ids[first + i].ids;
        entries[i].n_tokens = ids[first + i].n;
        entries[i].logits_mode = SPINDLE_LOGITS_NONE;
    }
    if (!st && !e->fwd && !(st = sp_forward_reserve(&e->fwd, m, 1, 1, err)))
        e->fwd->pool = e->pool;
    if (!st) st = sp_forward_layers(m, &e->fwd, entries, n, err);
    for (int i = 0; i < n && !st; i++) {
        pool_rows(e, e->fwd, i, &ps);
        finish(e, ps.pooled, width, out + (size_t)(first + i) * width);
    }
    for (int i = 0; entries && i < n; i++) spindle_seq_free(entries[i].seq);
    free(entries);
    free(floats);
    free(acc);
    return st;
}

static spindle_status embed_locked(spindle_embedder *e,
                                   const spindle_embed_request *r,
                                   const char *prompt, int width, float *out,
                                   int64_t *n_tokens, spindle_error *err) {
    embed_ids *ids = calloc((size_t)r->n_inputs, sizeof *ids);
    if (!ids) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = SPINDLE_OK;
    int64_t total = 0;
    for (int i = 0; i < r->n_inputs && !st; i++) {
        st = input_ids(e, r, i, prompt, &ids[i], err);
        if (!st) total += ids[i].n;
    }
    /* Consecutive inputs share a pass up to PASS_TOKENS tokens (one longer
     * input runs alone). */
    for (int first = 0; first < r->n_inputs && !st;) {
        int n = 0, rows = 0;
        while (first + n < r->n_inputs &&
               (n == 0 || rows + ids[first + n].n <= PASS_TOKENS))
            rows += ids[first + n++].n;
        st = run_pass(e, ids, first, n, width, out, err);
        first += n;
    }
    for (int i = 0; i < r->n_inputs; i++) spindle_free(ids[i].ids);
    free(ids);
    if (!st && n_tokens) *n_tokens = total;
    return st;
}

spindle_status spindle_embed(spindle_embedder *e,
                             const spindle_embed_request *r, float *out,
                             int64_t *n_prompt_tokens, spindle_error *err) {
    sp_error_clear(err);
    if (!e || !r || !out || (r->n_inputs > 0 && !r->inputs))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    if (r->n_inputs < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "no inputs");
    const int d = e->model->cfg.hidden_size;
    if (r->dimensions > d)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "dimensions %d exceeds the embedding width %d",
                       r->dimensions, d);
    const int width = r->dimensions > 0 ? r->dimensions : d;
    const char *prompt = r->prompt;
    if (!prompt) {
        const char *name = r->prompt_name ? r->prompt_name
                                          : e->st.default_prompt;
        prompt = sp_st_prompt(&e->st, name);
        if (r->prompt_name && !prompt)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "unknown prompt name '%s'", r->prompt_name);
    }
    pthread_mutex_lock(&e->lock);
    spindle_status st = embed_locked(e, r, prompt, width, out,
                                     n_prompt_tokens, err);
    pthread_mutex_unlock(&e->lock);
    return st;
}
