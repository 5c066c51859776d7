/* BERT (model_type "bert"), the encoder of sentence-transformers models such
 * as all-MiniLM-L6-v2, as transformers' modeling_bert computes it:
 *   x = LayerNorm(word[tok] + position[pos] + token_type[type])
 *   per layer (post-norm residuals):
 *     x = LayerNorm(x + o(attention(q(x), k(x), v(x))))   bidirectional
 *     x = LayerNorm(x + down(gelu_erf(up(x))))
 * Every input is one sequence of the batch and attends to its own tokens
 * only, so the padding mask of a padded batch is implicit (there is no
 * padding). No lm_head and no sequence state: spindle_embed runs it,
 * spindle_forward refuses it. Each row's token type comes from the pass
 * (f->token_types: a pair's second text is type 1), else 0, as
 * sentence-transformers encodes one text.
 *
 * BertForSequenceClassification (a cross-encoder reranker) adds the pooler
 * and the classifier, bound as the model's sp_cls_head when present.
 *
 * GGUF (llama.cpp's "bert" architecture, as convert_hf_to_gguf.py writes
 * it): the layers' modules under their llama.cpp names (bert_gguf_names),
 * the embeddings as token_embd, position_embd, token_types and
 * token_embd_norm. */
#include "models/blocks.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bert_norm {
    const float *w, *b;
} bert_norm;

typedef struct bert_family {
    const float *position;    /* [max_position][hidden] */
    const float *token_type;  /* [type_vocab][hidden] */
    int type_vocab;
    int position_offset;      /* the table row of position 0 */
    bert_norm embed_norm;
    bert_norm *attn_norm, *out_norm;  /* [n_layers] */
    float eps;
} bert_family;

/* blk.N.<gguf> <-> the encoder layer's <hf> module. */
static const sp_gguf_name_map bert_gguf_names[] = {
    {"attn_q", "attention.self.query"},
    {"attn_k", "attention.self.key"},
    {"attn_v", "attention.self.value"},
    {"attn_output", "attention.output.dense"},
    {"attn_output_norm", "attention.output.LayerNorm"},
    {"ffn_up", "intermediate.dense"},
    {"ffn_down", "output.dense"},
    {"layer_output_norm", "output.LayerNorm"},
    {NULL, NULL},
};

/* The classification head as llama.cpp's converter names it (its rank
 * pooling: cls = the pooler's dense + tanh, cls.output = the classifier). */
static const sp_gguf_name_map bert_gguf_globals[] = {
    {"cls", "pooler.dense"},
    {"cls.output", "classifier"},
    {NULL, NULL},
};

static const sp_gguf_key_map bert_gguf_keys[] = {
    {"attention.layer_norm_epsilon", "layer_norm_eps", SP_GGUF_KEY_REAL},
    {NULL, NULL, 0},
};

/* No hf_class: `spindle convert` refuses it (its layer names would not be
 * transformers' encoder.layer.N). */
static const sp_gguf_family bert_gguf = {.arch = "bert", .model_type = "bert",
                                         .layer_names = bert_gguf_names,
                                         .global_names = bert_gguf_globals,
                                         .keys = bert_gguf_keys};

/* The embeddings' tensor names: Hugging Face's, or llama.cpp's in GGUF. */
typedef struct bert_names {
    const char *word, *position, *token_type, *norm, *layer;
} bert_names;

static const bert_names hf_names = {
    "embeddings.word_embeddings", "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm",
    "encoder.layer."};
static const bert_names gguf_names = {
    "model.embed_tokens", "position_embd.weight", "token_types.weight",
    "token_embd_norm", "model.layers."};

static void bert_free(void *p) {
    bert_family *b = p;
    if (!b) return;
    free(b->attn_norm);
    free(b->out_norm);
    free(b);
}

static spindle_status bind_norm(spindle_model *m, const char *prefix,
                                bert_norm *out, spindle_error *err) {
    char name[200];
    const int d = m->cfg.hidden_size;
    snprintf(name, sizeof name, "%s.weight", prefix);
    spindle_status st = sp_bind_vector(m, name, d, &out->w, err);
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (!st) st = sp_bind_vector(m, name, d, &out->b, err);
    return st;
}

static spindle_status bind_layer(spindle_model *m, bert_family *b, int l,
                                 const bert_names *names, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    const int64_t d = c->hidden_size, ff = c->intermediate_size;
    sp_layer *L = &m->layers[l];
    char p[160];
    const struct {
        const char *name;
        int64_t rows, cols;
        sp_linear *out;
    } lin[] = {
        {"attention.self.query", d, d, &L->q},
        {"attention.self.key", d, d, &L->k},
        {"attention.self.value", d, d, &L->v},
        {"attention.output.dense", d, d, &L->o},
        {"intermediate.dense", ff, d, &L->up},
        {"output.dense", d, ff, &L->down},
    };
    spindle_status st = SPINDLE_OK;
    for (size_t i = 0; i < sizeof lin / sizeof *lin && !st; i++) {
        snprintf(p, sizeof p, "%s%d.%s", names->layer, l, lin[i].name);
        st = sp_bind_linear(m, p, lin[i].rows, lin[i].cols, true, lin[i].out,
                            err);
    }
    snprintf(p, sizeof p, "%s%d.attention.output.LayerNorm", names->layer, l);
    if (!st) st = bind_norm(m, p, &b->attn_norm[l], err);
    snprintf(p, sizeof p, "%s%d.output.LayerNorm", names->layer, l);
    if (!st) st = bind_norm(m, p, &b->out_norm[l], err);
    return st;
}

/* The sequence-classification head, when the files have one:
 * BertForSequenceClassification's pooler under the encoder's prefix
 * ("bert.pooler.dense") and classifier outside it ("classifier"), or
 * RoBERTa's head, all outside it ("classifier.dense", then
 * "classifier.out_proj"); the prefix is off while those are looked up. */
static spindle_status bind_cls_head(spindle_model *m, spindle_error *err) {
    const int64_t d = m->cfg.hidden_size;
    char prefix[sizeof m->tensor_prefix];
    memcpy(prefix, m->tensor_prefix, sizeof prefix);
    m->tensor_prefix[0] = '\0';
    const bool roberta = sp_model_find_tensor(m, "classifier.out_proj.weight");
    const char *out = roberta ? "classifier.out_proj" : "classifier";
    const sp_tensor_info *c = sp_model_find_tensor(
        m, roberta ? "classifier.out_proj.weight" : "classifier.weight");
    spindle_status st = SPINDLE_OK;
    if (c && (c->ndim != 2 || c->shape[0] < 1 || c->shape[0] > 4096))
        st = sp_fail(err, SPINDLE_ERR_FORMAT,
                     "%s: %s.weight is not a [labels][hidden] matrix", m->dir,
                     out);
    else if (c)
        st = sp_bind_linear(m, out, c->shape[0], d, false, &m->cls.classifier,
                            err);
    if (!st && c && roberta)
        st = sp_bind_linear(m, "classifier.dense", d, d, false, &m->cls.pooler,
                            err);
    memcpy(m->tensor_prefix, prefix, sizeof prefix);
    if (st || !c) return st;
    m->cls.n_labels = (int)c->shape[0];
    if (!roberta && sp_model_find_tensor(m, "pooler.dense.weight"))
        st = sp_bind_linear(m, "pooler.dense", d, d, false, &m->cls.pooler,
                            err);
    return st;
}

/* What config.json must say for this math to be BERT's, or NULL. */
static const char *unsupported_config(const spindle_model *m) {
    const sp_model_config *c = &m->cfg;
    if (c->n_kv_heads != c->n_heads) return "num_key_value_heads";
    if (c->n_heads * c->head_dim != c->hidden_size) return "head_dim";
    /* The attention keys and values are laid out head-major in the MLP's
     * scratch rows (see bert_attention). */
    if (c->intermediate_size < c->hidden_size) return "intermediate_size";
    return NULL;
}

static spindle_status check_config_strings(spindle_model *m,
                                           spindle_error *err) {
    const char *keys[] = {"hidden_act", "position_embedding_type"};
    const char *want[] = {"gelu", "absolute"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->cfg.json, keys[i]);
        if (v && !cJSON_IsNull(v) &&
            (!cJSON_IsString(v) || strcmp(v->valuestring, want[i])))
            return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                           "%s/config.json: bert with %s other than \"%s\" "
                           "is not supported", m->dir, keys[i], want[i]);
    }
    return SPINDLE_OK;
}

static spindle_status bert_load(spindle_model *m, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    const char *bad = unsupported_config(m);
    if (bad)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s/config.json: bert with this %s is not supported",
                       m->dir, bad);
    spindle_status st = check_config_strings(m, err);
    if (st) return st;
    /* BertForMaskedLM and friends keep the encoder under "bert.", the
     * XLM-RoBERTa classes under "roberta." */
    static const char *const prefixes[] = {"bert.", "roberta."};
    for (int i = 0; i < 2 && m->tensors &&
                    !sp_model_find_tensor(m, "embeddings.word_embeddings.weight");
         i++) {
        char name[64];
        snprintf(name, sizeof name, "%sembeddings.word_embeddings.weight",
                 prefixes[i]);
        if (sp_tensor_set_find(m->tensors, name))
            snprintf(m->tensor_prefix, sizeof m->tensor_prefix, "%s",
                     prefixes[i]);
    }
    bert_family *b = calloc(1, sizeof *b);
    if (!b) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    m->family = b;
    b->attn_norm = calloc((size_t)c->n_layers, sizeof *b->attn_norm);
    b->out_norm = calloc((size_t)c->n_layers, sizeof *b->out_norm);
    if (!b->attn_norm || !b->out_norm)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    b->eps = (float)sp_config_num(c, "layer_norm_eps", 1e-12);
    const bert_names *names = m->gguf ? &gguf_names : &hf_names;
    int type_vocab = sp_config_int(c, "type_vocab_size", 2);
    const sp_tensor_info *types = sp_model_find_tensor(m, names->token_type);
    /* A GGUF says it by the table's rows alone. */
    if (m->gguf && types && types->ndim == 2 && types->shape[0] < 1 << 20)
        type_vocab = (int)types->shape[0];
    if (type_vocab < 1)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: type_vocab_size %d is not positive",
                       m->dir, type_vocab);
    sp_linear word;
    st = sp_bind_linear(m, names->word, c->vocab_size, c->hidden_size, false,
                        &word, err);
    if (!st) {
        m->embed = word.w;
        st = sp_bind_float_matrix(m, names->position, c->max_position,
                                  c->hidden_size, &b->position, err);
    }
    if (!st)
        st = sp_bind_float_matrix(m, names->token_type, type_vocab,
                                  c->hidden_size, &b->token_type, err);
    if (!st) st = bind_norm(m, names->norm, &b->embed_norm, err);
    b->type_vocab = type_vocab;
    for (int l = 0; l < c->n_layers && !st; l++)
        st = bind_layer(m, b, l, names, err);
    m->cls.pair_separators = 1;
    if (!st) st = bind_cls_head(m, err);
    return st;
}

/* XLM-RoBERTa: BERT's layers, positions counted from pad_token_id + 1 (as
 * transformers' create_position_ids_from_input_ids numbers an unpadded
 * input), so an input has that many fewer of the table's rows, and two
 * separators between a pair's texts. */
static spindle_status xlm_roberta_load(spindle_model *m, spindle_error *err) {
    spindle_status st = bert_load(m, err);
    if (st) return st;
    bert_family *b = m->family;
    const int offset = sp_config_int(&m->cfg, "pad_token_id", 1) + 1;
    if (offset < 1 || offset >= m->cfg.max_position)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: pad_token_id %d leaves no positions",
                       m->dir, offset - 1);
    b->position_offset = offset;
    m->cfg.max_position -= offset;
    if (m->max_context > m->cfg.max_position)
        m->max_context = m->cfg.max_position;
    m->cls.pair_separators = 2;
    return SPINDLE_OK;
}

/* The element-wise parts run over the pool in row ranges: with the matmuls
 * on every thread, a serial LayerNorm or GELU would leave the other threads
 * idle for a fifth of an encoder pass. */
typedef enum bert_rows_op { ROWS_EMBED_TAIL, ROWS_NORM, ROWS_GELU } bert_rows_op;

typedef struct bert_rows {
    const sp_forward *f;
    bert_rows_op op;
    float *x;
    const bert_norm *norm;
} bert_rows;

static void rows_range(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const bert_rows *r = ctx;
    const spindle_model *m = r->f->m;
    const bert_family *b = m->family;
    const int d = m->cfg.hidden_size, inter = m->cfg.intermediate_size;
    for (int64_t t = begin; t < end; t++) {
        float *x = r->x + (size_t)t * (r->op == ROWS_GELU ? inter : d);
        if (r->op == ROWS_GELU) {
            sp_gelu_erf(x, inter);
            continue;
        }
        if (r->op == ROWS_EMBED_TAIL) {
            const float *p =
                b->position + (size_t)(r->f->pos[t] + b->position_offset) * d;
            /* A model of one segment (type_vocab_size 1) has no row for a
             * pair's second text: its tokenizer gives every token type 0. */
            int type = r->f->token_types ? r->f->token_types[t] : 0;
            if (type < 0 || type >= b->type_vocab) type = 0;
            const float *tt = b->token_type + (size_t)type * d;
            for (int i = 0; i < d; i++) x[i] += p[i] + tt[i];
        }
        sp_layernorm(x, x, r->norm->w, r->norm->b, d, b->eps);
    }
}

static void run_rows(sp_forward *f, bert_rows_op op, float *x,
                     const bert_norm *norm) {
    bert_rows r = {.f = f, .op = op, .x = x, .norm = norm};
    sp_pool_for(f->pool, f->n_rows, 0, rows_range, &r);
}

/* Bidirectional attention of every sequence over its own rows. Keys and
 * values go head-major ([head][token][head_dim], what sp_kv_view reads)
 * into f->gate and f->up, free until the MLP. */
static void bert_attention(sp_forward *f) {
    const sp_model_config *c = &f->m->cfg;
    const int hd = c->head_dim, H = c->n_heads, d = c->hidden_size;
    for (int s = 0; s < f->n_seqs && !f->status; s++) {
        const sp_forward_seq *sq = &f->seqs[s];
        const int n = sq->n_rows;
        for (int t = 0; t < n; t++) {
            const size_t src = (size_t)(sq->first_row + t) * d;
            for (int h = 0; h < H; h++) {
                const size_t dst = ((size_t)h * n + t) * hd;
                memcpy(f->gate + dst, f->k + src + (size_t)h * hd,
                       (size_t)hd * sizeof(float));
                memcpy(f->up + dst, f->v + src + (size_t)h * hd,
                       (size_t)hd * sizeof(float));
            }
        }
        sp_attention_args a = {
            .q = f->q + (size_t)sq->first_row * d,
            .out = f->attn + (size_t)sq->first_row * d,
            .n_q = n,
            .n_heads = H,
            .n_kv_heads = H,
            .head_dim = hd,
            .kv = {.k = f->gate, .v = f->up, .head_stride = (int64_t)n * hd,
                   .type = SP_KV_F32},
            .scale = 1.0f / sqrtf((float)hd),
            .bidirectional = true,
        };
        f->status = sp_attention(f->pool, &a, f->err);
    }
}

static void bert_layer(sp_forward *f, int l) {
    spindle_model *m = f->m;
    const bert_family *b = m->family;
    const sp_layer *L = &m->layers[l];
    /* The word rows are looked up; positions, the token type and the
     * embeddings' LayerNorm finish the embedding layer. */
    if (l == 0) run_rows(f, ROWS_EMBED_TAIL, f->x, &b->embed_norm);
    sp_linear_forward(f, &L->q, f->x, f->q);
    sp_linear_forward(f, &L->k, f->x, f->k);
    sp_linear_forward(f, &L->v, f->x, f->v);
    bert_attention(f);
    if (f->status) return;
    sp_linear_forward(f, &L->o, f->attn, f->out);
    sp_add_rows(f, f->x, f->out);
    run_rows(f, ROWS_NORM, f->x, &b->attn_norm[l]);
    sp_linear_forward(f, &L->up, f->x, f->up);
    run_rows(f, ROWS_GELU, f->up, NULL);
    sp_linear_forward(f, &L->down, f->up, f->out);
    sp_add_rows(f, f->x, f->out);
    run_rows(f, ROWS_NORM, f->x, &b->out_norm[l]);
}

static void bert_layer_state(const spindle_model *m, int l,
                             sp_layer_state_desc *out) {
    (void)m;
    (void)l;
    *out = (sp_layer_state_desc){.kind = SP_STATE_NONE};
}

const sp_arch sp_arch_bert = {.model_type = "bert",
                              .gguf = &bert_gguf,
                              .encoder = true,
                              .load = bert_load,
                              .layer = bert_layer,
                              .free_family = bert_free,
                              .layer_state = bert_layer_state};

const sp_arch sp_arch_xlm_roberta = {.model_type = "xlm-roberta",
                                     .encoder = true,
                                     .load = xlm_roberta_load,
                                     .layer = bert_layer,
                                     .free_family = bert_free,
                                     .layer_state = bert_layer_state};
