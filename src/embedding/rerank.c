/* spindle_rerank: query-document inputs (a cross-encoder's pair template,
 * or a decoder reranker's prompt) -> forward passes of many inputs each ->
 * one relevance score per document.
 *
 * Like the embedder, the reranker owns its forward scratch and thread
 * pool and reads the weights only, so a rerank request and an engine step
 * may run at once. */
#include "models/blocks.h"
#include "compute/matmul/matmul.h"
#include "base/error.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens per forward pass, as the embedder's. */
#define PASS_TOKENS 4096

/* Qwen3-Reranker's model card: the prompt around each input, and the
 * instruction when the caller gives none. */
static const char YES_NO_PREFIX[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements "
    "based on the Query and the Instruct provided. Note that the answer can "
    "only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
static const char YES_NO_SUFFIX[] =
    "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char DEFAULT_INSTRUCTION[] =
    "Given a web search query, retrieve relevant passages that answer the "
    "query";

/* Token ids, owned. */
typedef struct id_list {
    int32_t *ids;
    int n;
} id_list;

struct spindle_reranker {
    spindle_model *model;
    const spindle_tokenizer *tok;
    spindle_reranker_kind kind;
    int max_tokens;
    sp_pool *pool;
    sp_forward *fwd;
    pthread_mutex_t lock;
    /* Cross-encoder: the special tokens the tokenizer puts before and
     * after one text ([CLS] and [SEP] for BERT). */
    id_list lead, trail;
    /* Decoder: the prompt's fixed parts, the instruction, and the
     * lm_head rows of "yes" and "no" (with their biases). */
    id_list prefix, suffix;
    char *instruction;
    float *yes_row, *no_row;
    float yes_bias, no_bias;
};

/* One scored input: its ids and (cross-encoder) token types. */
typedef struct rerank_input {
    int32_t *ids, *types;
    int n;
} rerank_input;

static spindle_status encode(const spindle_tokenizer *tok, const char *text,
                             bool add_special, id_list *out,
                             spindle_error *err) {
    size_t n = 0;
    out->ids = NULL;
    spindle_status st = spindle_tokenizer_encode(tok, text, strlen(text),
                                                 add_special, &out->ids, &n,
                                                 err);
    out->n = st ? 0 : (int)n;
    return st;
}

static void id_list_free(id_list *l) {
    spindle_free(l->ids);
    l->ids = NULL;
    l->n = 0;
}

/* The single-text template's special tokens: the ids of a word with them,
 * split around the ids without them. */
static spindle_status find_template(spindle_reranker *r, spindle_error *err) {
    id_list full = {0}, plain = {0};
    spindle_status st = encode(r->tok, "a", true, &full, err);
    if (!st) st = encode(r->tok, "a", false, &plain, err);
    int lead = 0;
    while (!st && lead + plain.n <= full.n &&
           memcmp(full.ids + lead, plain.ids, (size_t)plain.n * sizeof *plain.ids))
        lead++;
    if (!st && (plain.n < 1 || lead + plain.n > full.n))
        st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                     "the tokenizer's special tokens do not surround a text "
                     "(no pair template to build)");
    const int trail = full.n - lead - plain.n;
    r->lead.ids = st ? NULL : malloc((size_t)(lead + 1) * sizeof(int32_t));
    r->trail.ids = st ? NULL : malloc((size_t)(trail + 1) * sizeof(int32_t));
    if (!st && (!r->lead.ids || !r->trail.ids))
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) {
        memcpy(r->lead.ids, full.ids, (size_t)lead * sizeof(int32_t));
        memcpy(r->trail.ids, full.ids + lead + plain.n,
               (size_t)trail * sizeof(int32_t));
        r->lead.n = lead;
        r->trail.n = trail;
    }
    id_list_free(&full);
    id_list_free(&plain);
    return st;
}

/* The one token `word` encodes to, or -1. */
static int32_t single_token(const spindle_tokenizer *tok, const char *word,
                            spindle_error *err) {
    id_list l = {0};
    int32_t id = encode(tok, word, false, &l, err) || l.n != 1 ? -1 : l.ids[0];
    id_list_free(&l);
    return id;
}

/* The lm_head row of token id as floats, and its bias. */
static float *head_row(const spindle_model *m, int32_t id, float *bias) {
    float *row = malloc((size_t)m->cfg.hidden_size * sizeof *row);
    if (row) sp_weight_row(&m->lm_head.w, id, row);
    *bias = m->lm_head.bias ? m->lm_head.bias[id] : 0.0f;
    return row;
}

/* Row `row` of the model's rank head (a reranker GGUF's cls.output). */
static float *rank_row(const spindle_model *m, int row, float *bias) {
    float *out = malloc((size_t)m->cfg.hidden_size * sizeof *out);
    if (out) sp_weight_row(&m->cls.classifier.w, row, out);
    *bias = m->cls.classifier.bias ? m->cls.classifier.bias[row] : 0.0f;
    return out;
}

static spindle_status setup_yes_no(spindle_reranker *r, const char *instruction,
                                   spindle_error *err) {
    const spindle_model *m = r->model;
    r->kind = SPINDLE_RERANKER_YES_NO;
    r->instruction = strdup(instruction ? instruction : DEFAULT_INSTRUCTION);
    if (m->cls.n_labels == 2) {
        /* The rows llama.cpp's converter kept: yes, then no. */
        r->yes_row = rank_row(m, 0, &r->yes_bias);
        r->no_row = rank_row(m, 1, &r->no_bias);
    } else {
        const int32_t yes = single_token(r->tok, "yes", err);
        const int32_t no = single_token(r->tok, "no", err);
        if (yes < 0 || no < 0 || yes >= m->cfg.vocab_size ||
            no >= m->cfg.vocab_size)
            return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                           "%s: not a yes/no reranker (\"yes\" and \"no\" are "
                           "not one token each)", m->dir);
        r->yes_row = head_row(m, yes, &r->yes_bias);
        r->no_row = head_row(m, no, &r->no_bias);
    }
    if (!r->instruction || !r->yes_row || !r->no_row)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = encode(r->tok, YES_NO_PREFIX, false, &r->prefix, err);
    if (!st) st = encode(r->tok, YES_NO_SUFFIX, false, &r->suffix, err);
    if (!st && r->prefix.n + r->suffix.n + 1 > r->max_tokens)
        st = sp_fail(err, SPINDLE_ERR_ARGUMENT,
                     "max_tokens %d leaves no room beside the reranker's "
                     "prompt (%d tokens)", r->max_tokens,
                     r->prefix.n + r->suffix.n);
    return st;
}

static int pair_specials(const spindle_reranker *r);

static spindle_status setup(spindle_reranker *r,
                            const spindle_reranker_options *o,
                            spindle_error *err) {
    spindle_model *m = r->model;
    int limit = m->max_context > 0 ? m->max_context : 1 << 20;
    if (m->arch->encoder && m->cfg.max_position > 0 && m->cfg.max_position < limit)
        limit = m->cfg.max_position;
    r->max_tokens = o && o->max_tokens > 0 && o->max_tokens < limit
                        ? o->max_tokens : limit;
    if (!m->arch->encoder)
        return setup_yes_no(r, o ? o->instruction : NULL, err);
    if (m->cls.n_labels != 1)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       m->cls.n_labels
                           ? "%s: a classification head of %d labels is not a "
                             "reranker's (one label)"
                           : "%s: not a cross-encoder (no classification head)",
                       m->dir, m->cls.n_labels);
    r->kind = SPINDLE_RERANKER_CROSS_ENCODER;
    spindle_status st = find_template(r, err);
    if (!st && pair_specials(r) + 2 > r->max_tokens)
        st = sp_fail(err, SPINDLE_ERR_ARGUMENT,
                     "max_tokens %d leaves no room for a query and a document",
                     r->max_tokens);
    return st;
}

spindle_status spindle_reranker_new(spindle_model *model,
                                    const spindle_tokenizer *tok,
                                    const spindle_reranker_options *options,
                                    spindle_reranker **out,
                                    spindle_error *err) {
    sp_error_clear(err);
    if (!model || !tok || !out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    spindle_reranker *r = calloc(1, sizeof *r);
    if (!r) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    r->model = model;
    r->tok = tok;
    pthread_mutex_init(&r->lock, NULL);
    spindle_status st = setup(r, options, err);
    if (!st && !(r->pool = sp_pool_create(options ? options->n_threads : 0)))
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (st) {
        spindle_reranker_free(r);
        return st;
    }
    *out = r;
    return SPINDLE_OK;
}

void spindle_reranker_free(spindle_reranker *r) {
    if (!r) return;
    sp_forward_free(r->fwd);
    sp_pool_destroy(r->pool);
    id_list_free(&r->lead);
    id_list_free(&r->trail);
    id_list_free(&r->prefix);
    id_list_free(&r->suffix);
    free(r->instruction);
    free(r->yes_row);
    free(r->no_row);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

spindle_reranker_kind spindle_reranker_kind_of(const spindle_reranker *r) {
    return r ? r->kind : (spindle_reranker_kind)0;
}

/* ------------------------------------------------------------ inputs */

/* The special tokens of a pair: lead, the separators between the texts
 * (the model family's count of trail), and trail at the end. */
static int pair_specials(const spindle_reranker *r) {
    return r->lead.n + (r->model->cls.pair_separators + 1) * r->trail.n;
}

/* tokenizers' longest_first truncation of a pair to `budget` content
 * tokens: only the longer text is cut while the shorter fits in half,
 * else both get half (the second the odd token). */
static void longest_first(int *n1, int *n2, int budget) {
    if (*n1 + *n2 <= budget) return;
    const bool swap = *n1 > *n2;
    int a = swap ? *n2 : *n1, b = swap ? *n1 : *n2;
    b = a > budget ? a : (a > budget - a ? a : budget - a);
    if (a + b > budget) {
        a = budget / 2;
        b = a + budget % 2;
    }
    const int first = swap ? b : a, second = swap ? a : b;
    if (first < *n1) *n1 = first;
    if (second < *n2) *n2 = second;
}

/* Append n ids (and their type) at in->ids[in->n]. */
static void put(rerank_input *in, const int32_t *ids, int n, int type) {
    memcpy(in->ids + in->n, ids, (size_t)n * sizeof *ids);
    if (in->types)
        for (int i = 0; i < n; i++) in->types[in->n + i] = type;
    in->n += n;
}

/* [lead] query [trail] x separators, document [trail], types 0 up to the
 * separators' end and 1 after: BERT's pair template ([CLS] A [SEP] B [SEP])
 * and RoBERTa's (<s> A </s></s> B </s>, whose one token type makes every
 * type 0 in the encoder). */
static spindle_status pair_input(const spindle_reranker *r, const id_list *q,
                                 const char *doc, rerank_input *in,
                                 spindle_error *err) {
    id_list d = {0};
    spindle_status st = encode(r->tok, doc, false, &d, err);
    if (st) return st;
    int nq = q->n, nd = d.n;
    longest_first(&nq, &nd, r->max_tokens - pair_specials(r));
    const size_t cap = (size_t)(pair_specials(r) + nq + nd);
    in->ids = malloc(cap * sizeof *in->ids);
    in->types = malloc(cap * sizeof *in->types);
    if (in->ids && in->types) {
        put(in, r->lead.ids, r->lead.n, 0);
        put(in, q->ids, nq, 0);
        for (int i = 0; i < r->model->cls.pair_separators; i++)
            put(in, r->trail.ids, r->trail.n, 0);
        put(in, d.ids, nd, 1);
        put(in, r->trail.ids, r->trail.n, 1);
    } else {
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    id_list_free(&d);
    return st;
}

/* prefix + "<Instruct>: I\n<Query>: Q\n<Document>: D" (cut at its end to
 * fit) + suffix, each part encoded alone as the model card does. */
static spindle_status yes_no_input(const spindle_reranker *r, const char *query,
                                   const char *doc, rerank_input *in,
                                   spindle_error *err) {
    static const char fmt[] = "<Instruct>: %s\n<Query>: %s\n<Document>: %s";
    const size_t len = strlen(r->instruction) + strlen(query) + strlen(doc) +
                       sizeof fmt;
    char *text = malloc(len);
    if (!text) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    snprintf(text, len, fmt, r->instruction, query, doc);
    id_list body = {0};
    spindle_status st = encode(r->tok, text, false, &body, err);
    free(text);
    if (st) return st;
    const int room = r->max_tokens - r->prefix.n - r->suffix.n;
    const int nb = body.n < room ? body.n : room;
    in->ids = malloc((size_t)(r->prefix.n + nb + r->suffix.n) * sizeof *in->ids);
    if (in->ids) {
        put(in, r->prefix.ids, r->prefix.n, 0);
        put(in, body.ids, nb, 0);
        put(in, r->suffix.ids, r->suffix.n, 0);
    } else {
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    id_list_free(&body);
    return st;
}

/* ------------------------------------------------------------ scoring */

static float sigmoid(double x) { return (float)(1.0 / (1.0 + exp(-x))); }

/* The classification head on each sequence's first row. */
static spindle_status score_cross(spindle_reranker *r, int n, float *scores,
                                  spindle_error *err) {
    const spindle_model *m = r->model;
    const sp_forward *f = r->fwd;
    const size_t d = (size_t)m->cfg.hidden_size;
    float *cls = malloc(2 * (size_t)n * d * sizeof *cls);
    float *logit = malloc((size_t)n * sizeof *logit);
    if (!cls || !logit) {
        free(cls);
        free(logit);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    float *pooled = cls + (size_t)n * d;
    for (int i = 0; i < n; i++)
        memcpy(cls + (size_t)i * d, f->x + (size_t)f->seqs[i].first_row * d,
               d * sizeof *cls);
    const float *in = cls;
    if (m->cls.pooler.w.data) {
        sp_linear_rows(r->pool, &m->cls.pooler, cls, n, pooled);
        for (size_t i = 0; i < (size_t)n * d; i++) pooled[i] = tanhf(pooled[i]);
        in = pooled;
    }
    sp_linear_rows(r->pool, &m->cls.classifier, in, n, logit);
    for (int i = 0; i < n; i++) scores[i] = sigmoid(logit[i]);
    free(cls);
    free(logit);
    return SPINDLE_OK;
}

/* softmax(yes, no)[yes] of each sequence's last row through the final
 * norm and the two lm_head rows. */
static spindle_status score_yes_no(spindle_reranker *r, int n, float *scores,
                                   spindle_error *err) {
    const spindle_model *m = r->model;
    const sp_forward *f = r->fwd;
    const int d = m->cfg.hidden_size;
    float *row = malloc((size_t)d * sizeof *row);
    if (!row) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int i = 0; i < n; i++) {
        const sp_forward_seq *sq = &f->seqs[i];
        sp_rmsnorm(row, f->x + (size_t)(sq->first_row + sq->n_rows - 1) * d,
                   m->final_norm, d, m->cfg.rms_norm_eps, 0.0f);
        double yes = r->yes_bias, no = r->no_bias;
        for (int k = 0; k < d; k++) {
            yes += (double)row[k] * r->yes_row[k];
            no += (double)row[k] * r->no_row[k];
        }
        float logits[2] = {(float)yes, (float)no};
        if (m->arch->logits) m->arch->logits(m, logits, 2);
        scores[i] = sigmoid((double)logits[0] - logits[1]);
    }
    free(row);
    return SPINDLE_OK;
}

/* One forward pass over inputs [0, n), scores into scores[0, n). */
static spindle_status run_pass(spindle_reranker *r, const rerank_input *in,
                               int n, float *scores, spindle_error *err) {
    spindle_model *m = r->model;
    spindle_batch_entry *entries = calloc((size_t)n, sizeof *entries);
    int32_t *types = NULL;
    int rows = 0;
    for (int i = 0; i < n; i++) rows += in[i].n;
    if (r->kind == SPINDLE_RERANKER_CROSS_ENCODER)
        types = malloc((size_t)rows * sizeof *types);
    spindle_status st = entries && (types || r->kind != SPINDLE_RERANKER_CROSS_ENCODER)
                            ? SPINDLE_OK
                            : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int i = 0, row = 0; i < n && !st; row += in[i++].n) {
        st = spindle_seq_new(m, &entries[i].seq, err);
        entries[i].tokens = in[i].ids;
        entries[i].n_tokens = in[i].n;
        entries[i].logits_mode = SPINDLE_LOGITS_NONE;
        if (types) memcpy(types + row, in[i].types, (size_t)in[i].n * sizeof *types);
    }
    if (!st && !r->fwd && !(st = sp_forward_reserve(&r->fwd, m, 1, 1, err)))
        r->fwd->pool = r->pool;
    if (!st) st = sp_forward_prepare(m, &r->fwd, entries, n, err);
    if (!st) {
        r->fwd->token_types = types;
        st = sp_forward_run_layers(m, r->fwd);
        r->fwd->token_types = NULL;
    }
    if (!st)
        st = r->kind == SPINDLE_RERANKER_CROSS_ENCODER
                 ? score_cross(r, n, scores, err)
                 : score_yes_no(r, n, scores, err);
    for (int i = 0; entries && i < n; i++) spindle_seq_free(entries[i].seq);
    free(entries);
    free(types);
    return st;
}

static spindle_status rerank_locked(spindle_reranker *r, const char *query,
                                    const char *const *docs, int n_docs,
                                    float *scores, int64_t *n_tokens,
                                    spindle_error *err) {
    rerank_input *in = calloc((size_t)n_docs, sizeof *in);
    id_list q = {0};
    spindle_status st = in ? SPINDLE_OK
                           : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st && r->kind == SPINDLE_RERANKER_CROSS_ENCODER)
        st = encode(r->tok, query, false, &q, err);
    int64_t total = 0;
    for (int i = 0; i < n_docs && !st; i++) {
        if (!docs[i])
            st = sp_fail(err, SPINDLE_ERR_ARGUMENT, "document %d is NULL", i);
        else if (r->kind == SPINDLE_RERANKER_CROSS_ENCODER)
            st = pair_input(r, &q, docs[i], &in[i], err);
        else
            st = yes_no_input(r, query, docs[i], &in[i], err);
        if (!st) total += in[i].n;
    }
    for (int first = 0; first < n_docs && !st;) {
        int n = 0, rows = 0;
        while (first + n < n_docs &&
               (n == 0 || rows + in[first + n].n <= PASS_TOKENS))
            rows += in[first + n++].n;
        st = run_pass(r, in + first, n, scores + first, err);
        first += n;
    }
    for (int i = 0; in && i < n_docs; i++) {
        free(in[i].ids);
        free(in[i].types);
    }
    free(in);
    id_list_free(&q);
    if (!st && n_tokens) *n_tokens = total;
    return st;
}

spindle_status spindle_rerank(spindle_reranker *r, const char *query,
                              const char *const *documents, int n_documents,
                              float *scores, int64_t *n_prompt_tokens,
                              spindle_error *err) {
    sp_error_clear(err);
    if (!r || !query || !scores || (n_documents > 0 && !documents))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    if (n_documents < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "no documents");
    pthread_mutex_lock(&r->lock);
    spindle_status st = rerank_locked(r, query, documents, n_documents, scores,
                                      n_prompt_tokens, err);
    pthread_mutex_unlock(&r->lock);
    return st;
}
