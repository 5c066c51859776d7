/* The hybrid families' config and weights (qwen3_hybrid.h); the forward
 * pass is qwen3_hybrid_forward.c. */
#include "models/qwen3_hybrid.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* config.json `key` as a positive integer up to 2^20 (dflt when absent;
 * NAN: required). */
static spindle_status positive_int(spindle_model *m, const char *key,
                                   double dflt, int *out, spindle_error *err) {
    double v = 0;
    spindle_status st = sp_model_positive(m, key, dflt, &v, err);
    if (st) return st;
    if (v != floor(v) || v > (double)(1 << 20))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: '%s' must be a positive integer",
                       m->dir, key);
    *out = (int)v;
    return SPINDLE_OK;
}

static spindle_status read_dims(spindle_model *m, sp_hybrid *h,
                                spindle_error *err) {
    spindle_status st;
    if ((st = positive_int(m, "linear_num_key_heads", NAN, &h->n_k_heads, err)) ||
        (st = positive_int(m, "linear_num_value_heads", NAN, &h->n_v_heads, err)) ||
        (st = positive_int(m, "linear_key_head_dim", NAN, &h->k_dim, err)) ||
        (st = positive_int(m, "linear_conv_kernel_dim", NAN, &h->conv_kernel, err)))
        return st;
    /* GGUF files give the value heads' total width (ssm.inner_size). */
    int inner = 0;
    if ((st = positive_int(m, "ssm_inner_size", 0, &inner, err))) return st;
    if (inner && !cJSON_GetObjectItemCaseSensitive(m->cfg.json,
                                                   "linear_value_head_dim")) {
        if (inner % h->n_v_heads)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: ssm.inner_size %d is not a multiple of the "
                           "%d value heads", m->dir, inner, h->n_v_heads);
        h->v_dim = inner / h->n_v_heads;
    } else if ((st = positive_int(m, "linear_value_head_dim", NAN, &h->v_dim,
                                  err))) {
        return st;
    }
    if (h->n_v_heads % h->n_k_heads)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: linear_num_value_heads %d is not a "
                       "multiple of linear_num_key_heads %d", m->dir,
                       h->n_v_heads, h->n_k_heads);
    h->key_dim = (int64_t)h->n_k_heads * h->k_dim;
    h->value_dim = (int64_t)h->n_v_heads * h->v_dim;
    h->conv_dim = 2 * h->key_dim + h->value_dim;
    return SPINDLE_OK;
}

/* Which layers are linear: layer_types when the config lists them, else
 * every layer but each full_attention_interval-th (mlx-lm's rule, which
 * ignores layer_types: a config giving both must agree). */
static spindle_status read_pattern(spindle_model *m, sp_hybrid *h,
                                   spindle_error *err) {
    const int n = m->cfg.n_layers;
    int interval = 4;
    spindle_status st =
        positive_int(m, "full_attention_interval", 4, &interval, err);
    if (st) return st;
    h->linear = calloc((size_t)n, sizeof *h->linear);
    if (!h->linear) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if ((st = sp_model_layer_kinds(m, "linear_attention", interval, h->linear,
                                   err)))
        return st;
    if (!cJSON_GetObjectItemCaseSensitive(m->cfg.json, "full_attention_interval"))
        return SPINDLE_OK;
    for (int l = 0; l < n; l++)
        if (h->linear[l] != ((l + 1) % interval != 0))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: layer_types[%d] disagrees with "
                           "full_attention_interval %d", m->dir, l, interval);
    return SPINDLE_OK;
}

/* ----------------------------------------------------------------- binding */

typedef struct binder {
    spindle_model *m;
    const char *layers;      /* the layers' name prefix: "model.layers" */
    const sp_hybrid_options *opt;
    int l;
    char name[256];
    spindle_error *err;
} binder;

static const char *layer_name(binder *b, const char *suffix) {
    snprintf(b->name, sizeof b->name, "%s.%d.%s", b->layers, b->l, suffix);
    return b->name;
}

static bool has(binder *b, const char *suffix) {
    return sp_model_find_tensor(b->m, layer_name(b, suffix)) != NULL;
}

static spindle_status linear(binder *b, const char *module, int64_t rows,
                             int64_t cols, bool bias, sp_linear *out) {
    return sp_bind_linear(b->m, layer_name(b, module), rows, cols, bias, out,
                          b->err);
}

/* A norm of the layer: (1 + w) folded in where the files store w. */
static spindle_status norm(binder *b, const char *suffix, int64_t n,
                           const float **out) {
    spindle_status st = sp_bind_vector(b->m, layer_name(b, suffix), n, out,
                                       b->err);
    if (!st && b->opt->norms_plus_one)
        sp_fold_norm_plus_one(b->m, b->name, *out, (int)n);
    return st;
}

static spindle_status bind_attention(binder *b) {
    const sp_model_config *c = &b->m->cfg;
    sp_layer *L = &b->m->layers[b->l];
    const int64_t d = c->hidden_size, hd = c->head_dim;
    const int64_t qw = (int64_t)c->n_heads * hd, kw = (int64_t)c->n_kv_heads * hd;
    const bool bias = c->attention_bias;
    spindle_status st;
    if ((st = linear(b, "self_attn.q_proj", 2 * qw, d, bias, &L->q)) ||
        (st = linear(b, "self_attn.k_proj", kw, d, bias, &L->k)) ||
        (st = linear(b, "self_attn.v_proj", kw, d, bias, &L->v)) ||
        (st = linear(b, "self_attn.o_proj", d, qw, bias, &L->o)) ||
        (st = norm(b, "self_attn.q_norm.weight", hd, &L->q_norm)))
        return st;
    return norm(b, "self_attn.k_norm.weight", hd, &L->k_norm);
}

/* conv1d.weight (the files' [channels][kernel]) as [kernel][channels]. */
static spindle_status bind_conv(binder *b, const sp_hybrid *h,
                                sp_delta_net *D) {
    const int64_t C = h->conv_dim, K = h->conv_kernel;
    const float *w;
    spindle_status st = sp_bind_float_matrix(
        b->m, layer_name(b, "linear_attn.conv1d.weight"), C, K, &w, b->err);
    if (st) return st;
    float *tmp = malloc(sizeof(float) * (size_t)(C * K));
    if (!tmp) return sp_fail(b->err, SPINDLE_ERR_MEMORY, "out of memory");
    memcpy(tmp, w, sizeof(float) * (size_t)(C * K));
    float *wt = (float *)w; /* the owned copy */
    for (int64_t c = 0; c < C; c++)
        for (int64_t j = 0; j < K; j++) wt[j * C + c] = tmp[c * K + j];
    free(tmp);
    D->conv_w = wt;
    return SPINDLE_OK;
}

/* A_log (safetensors) or llama.cpp's ssm_a = -exp(A_log) (GGUF, a tensor
 * without a suffix, so under its GGUF name). */
static spindle_status bind_decay(binder *b, const sp_hybrid *h,
                                 sp_delta_net *D) {
    const int64_t hv = h->n_v_heads;
    spindle_status st;
    if (b->m->gguf) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ssm_a", b->l);
        if ((st = sp_bind_vector(b->m, name, hv, &D->a_scale, b->err)))
            return st;
        return sp_bind_vector(b->m, layer_name(b, "linear_attn.dt_proj.bias"),
                              hv, &D->dt_bias, b->err);
    }
    if ((st = sp_bind_vector(b->m, layer_name(b, "linear_attn.dt_bias"), hv,
                             &D->dt_bias, b->err)) ||
        (st = sp_bind_vector(b->m, layer_name(b, "linear_attn.A_log"), hv,
                             &D->a_scale, b->err)))
        return st;
    float *a = (float *)D->a_scale; /* the owned copy */
    for (int64_t i = 0; i < hv; i++) a[i] = -expf(a[i]);
    return SPINDLE_OK;
}

static spindle_status bind_delta(binder *b, const sp_hybrid *h,
                                 sp_delta_net *D) {
    const int64_t d = b->m->cfg.hidden_size, hv = h->n_v_heads;
    spindle_status st;
    if (has(b, "linear_attn.in_proj_qkvz.weight"))
        st = linear(b, "linear_attn.in_proj_qkvz",
                    2 * h->key_dim + 2 * h->value_dim, d, false, &D->qkvz);
    else if (!(st = linear(b, "linear_attn.in_proj_qkv", h->conv_dim, d,
                           false, &D->qkv)))
        st = linear(b, "linear_attn.in_proj_z", h->value_dim, d, false, &D->z);
    if (st) return st;
    if (has(b, "linear_attn.in_proj_ba.weight"))
        st = linear(b, "linear_attn.in_proj_ba", 2 * hv, d, false, &D->ba);
    else if (!(st = linear(b, "linear_attn.in_proj_b", hv, d, false, &D->b)))
        st = linear(b, "linear_attn.in_proj_a", hv, d, false, &D->a);
    if (st || (st = bind_conv(b, h, D)) || (st = bind_decay(b, h, D)) ||
        (st = sp_bind_vector(b->m, layer_name(b, "linear_attn.norm.weight"),
                             h->v_dim, &D->norm, b->err)))
        return st;
    return linear(b, "linear_attn.out_proj", d, h->value_dim, false, &D->out);
}

/* Layer b->l's norms and mixer. */
static spindle_status bind_layer(binder *b, const sp_hybrid *h) {
    sp_layer *L = &b->m->layers[b->l];
    const int64_t d = b->m->cfg.hidden_size;
    L->rope = &b->m->rope;
    spindle_status st;
    if ((st = norm(b, "input_layernorm.weight", d, &L->attn_norm)) ||
        (st = norm(b, "post_attention_layernorm.weight", d, &L->mlp_norm)))
        return st;
    return h->linear[b->l] ? bind_delta(b, h, &h->delta[b->l])
                           : bind_attention(b);
}

spindle_status sp_hybrid_config(spindle_model *m, sp_hybrid *h,
                                spindle_error *err) {
    spindle_status st = read_dims(m, h, err);
    return st ? st : read_pattern(m, h, err);
}

spindle_status sp_hybrid_bind(spindle_model *m, sp_hybrid *h,
                              const sp_hybrid_options *opt,
                              spindle_error *err) {
    if (opt->norms_plus_one)
        sp_fold_norm_plus_one(m, "model.norm.weight", m->final_norm,
                              m->cfg.hidden_size);
    return sp_hybrid_bind_layers_at(m, h, "model.layers", opt, err);
}

spindle_status sp_hybrid_bind_layers_at(spindle_model *m, sp_hybrid *h,
                                        const char *layers,
                                        const sp_hybrid_options *opt,
                                        spindle_error *err) {
    h->heads_tiled = opt->heads_tiled;
    h->delta = calloc((size_t)m->cfg.n_layers, sizeof *h->delta);
    if (!h->delta) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    binder b = {.m = m, .layers = layers, .opt = opt, .err = err};
    spindle_status st = SPINDLE_OK;
    for (b.l = 0; b.l < m->cfg.n_layers && !st; b.l++) st = bind_layer(&b, h);
    return st;
}

bool sp_hybrid_hf_conv(const spindle_model *m, const sp_hybrid *h, int l) {
    if (m->gguf || !h->linear[l]) return false;
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.linear_attn.conv1d.weight", l);
    const sp_tensor_info *t = sp_model_find_tensor(m, name);
    return t && t->ndim == 3 && t->shape[1] == 1 && t->shape[2] != 1;
}

void sp_hybrid_release(sp_hybrid *h) {
    free(h->linear);
    free(h->delta);
}

void sp_hybrid_layer_state(const spindle_model *m, int l,
                           sp_layer_state_desc *out) {
    const sp_hybrid *h = m->family;
    if (h->linear[l])
        *out = (sp_layer_state_desc){
            .kind = SP_STATE_RECURRENT,
            .conv_kernel = h->conv_kernel,
            .conv_channels = (int)h->conv_dim,
            .state_floats = (int64_t)h->n_v_heads * h->v_dim * h->k_dim};
    else
        *out = (sp_layer_state_desc){.kind = SP_STATE_FULL_KV,
                                     .n_kv_heads = m->cfg.n_kv_heads,
                                     .head_dim = m->cfg.head_dim};
}

int sp_hybrid_layer_extra(const spindle_model *m, int l, const sp_linear **out,
                          int max, int64_t *vector_floats) {
    const sp_hybrid *h = m->family;
    if (!h->linear[l]) return 0;
    const sp_delta_net *D = &h->delta[l];
    const sp_linear *all[] = {&D->qkv, &D->z, &D->qkvz, &D->b,
                              &D->a, &D->ba, &D->out};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all && n < max; i++)
        if (all[i]->w.rows) out[n++] = all[i];
    *vector_floats += h->conv_kernel * h->conv_dim + 2 * h->n_v_heads + h->v_dim;
    return n;
}

const sp_linear *sp_hybrid_lora_linear(const spindle_model *m, int l,
                                       sp_lora_module mod) {
    const sp_hybrid *h = m->family;
    if (!h || !h->linear || l < 0 || l >= m->cfg.n_layers || !h->linear[l] ||
        mod < SP_LORA_LINEAR_FIRST || mod >= SP_LORA_N_MODULES)
        return NULL;
    const sp_delta_net *D = &h->delta[l];
    const sp_linear *by_module[SP_LORA_N_LINEAR] = {
        &D->qkvz, &D->ba, &D->qkv, &D->z, &D->b, &D->a, &D->out};
    const sp_linear *lin = by_module[mod - SP_LORA_LINEAR_FIRST];
    return lin->w.rows ? lin : NULL;
}

/* ------------------------------------------------------------------- MLPs */

spindle_status sp_hybrid_moe_new(spindle_model *m, bool with_moe,
                                 sp_hybrid_moe **out, spindle_error *err) {
    sp_hybrid_moe *q = calloc(1, sizeof *q);
    if (!q) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    m->family = q;
    *out = q;
    if (!with_moe) return SPINDLE_OK;
    q->moe = calloc((size_t)m->cfg.n_layers, sizeof *q->moe);
    if (!q->moe) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    q->n_layers = m->cfg.n_layers;
    return SPINDLE_OK;
}

void sp_hybrid_moe_free(void *family) {
    sp_hybrid_moe *q = family;
    if (!q) return;
    sp_hybrid_release(&q->hybrid);
    for (int l = 0; l < q->n_layers && q->moe; l++) sp_moe_free(&q->moe[l]);
    free(q->moe);
    free(q);
}

spindle_status sp_hybrid_moe_spec(spindle_model *m, sp_moe_spec *spec,
                                  spindle_error *err) {
    spindle_status st = sp_moe_qwen_spec(m, spec, err);
    if (st) return st;
    double shared = 0;
    if ((st = sp_model_positive(m, "shared_expert_intermediate_size", NAN,
                                &shared, err)))
        return st;
    if (shared > (double)(1 << 30))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: 'shared_expert_intermediate_size' "
                       "is too large", m->dir);
    spec->shared_inter = (int64_t)shared;
    spec->shared = "shared_expert";
    spec->shared_gate = "shared_expert_gate";
    return SPINDLE_OK;
}

spindle_status sp_hybrid_bind_mlps(spindle_model *m, sp_hybrid_moe *q,
                                   const char *layers, const bool *is_moe,
                                   const sp_moe_spec *spec,
                                   spindle_error *err) {
    const int64_t d = m->cfg.hidden_size, inter = m->cfg.intermediate_size;
    char p[128];
    spindle_status st = SPINDLE_OK;
    for (int l = 0; l < m->cfg.n_layers && !st; l++) {
        sp_layer *L = &m->layers[l];
        if (is_moe && is_moe[l]) {
            snprintf(p, sizeof p, "%s.%d.mlp", layers, l);
            if (!(st = sp_moe_bind(m, p, spec, &q->moe[l], err)))
                L->moe = &q->moe[l];
            continue;
        }
#define NAME(s) (snprintf(p, sizeof p, "%s.%d.mlp." s, layers, l), p)
        if (!(st = sp_bind_linear(m, NAME("gate_proj"), inter, d, false, &L->gate, err)) &&
            !(st = sp_bind_linear(m, NAME("up_proj"), inter, d, false, &L->up, err)))
            st = sp_bind_linear(m, NAME("down_proj"), d, inter, false, &L->down, err);
#undef NAME
    }
    return st;
}
