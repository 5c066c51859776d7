/* Gemma 4 text models (model_type "gemma4_text"), as mlx-lm's gemma4_text
 * computes them; llama.cpp's "gemma4" GGUF files through gemma4_gguf.c.
 *
 * The layer is Gemma 3's (gemma3.c: sandwich norms, per-head q/k norms,
 * GeGLU MLP, sliding-window layers with their own RoPE, embeddings times
 * sqrt(hidden_size), final logit softcap), with these differences:
 *  - RMSNorms scale by w, not 1 + w, and the embedding factor is the f32
 *    sqrt(hidden_size) (Gemma 3 rounds it to bf16);
 *  - attention scores are not scaled (scale 1: the q/k norms set it);
 *  - values get a per-head RMSNorm without a scale before they are stored;
 *  - each layer's output is multiplied by its `layer_scalar` weight;
 *  - full-attention layers have heads of global_head_dim (sp_layer.head_dim);
 *  - the last num_kv_shared_layers layers attend the keys and values of the
 *    last earlier layer of their kind (sp_layer.shares_kv), with MLPs twice
 *    as wide when use_double_wide_mlp;
 *  - each layer kind has its RoPE in rope_parameters.<kind>: "default" or
 *    "linear" over the whole head, or "proportional" (compute/ops.h);
 *  - defaults: sliding_window_pattern 5, final_logit_softcapping 30 (null:
 *    none); there is no query_pre_attn_scalar or attention softcap.
 *
 *  - per-layer inputs (hidden_size_per_layer_input P, mlx-lm's default
 *    256; 0 or null: none): per token and layer P floats from a token table
 *    and a projection of the embeddings (gemma4_begin_layers), which each
 *    layer gates into its output before the layer_scalar.
 *
 *  - attention_k_eq_v: the full-attention layers' values are their key
 *    projections (sp_layer.v_is_k), with num_global_key_value_heads KV
 *    heads when it is set (sp_layer.n_kv_heads).
 *
 *  - enable_moe_block (Gemma 4 26B): beside each layer's dense MLP, routed
 *    experts (models/moe.h) whose router reads the residual stream
 *    (RMS-normalized by router.scale * hidden^-0.5; the top_k_experts
 *    largest logits, softmax over them, times router.per_expert_scale) and
 *    whose experts (GeGLU, moe_intermediate_size) read
 *    pre_feedforward_layernorm_2 of it:
 *      x += post_ff_norm(post_ff_norm_1(mlp(pre_ff_norm(x)))
 *                        + post_ff_norm_2(experts(pre_ff_norm_2(x))))
 *    Weights as mlx-lm writes them (experts.switch_glu.*_proj), or as
 *    transformers does (experts.gate_up_proj [E][2 inter][hidden], gate
 *    rows first, and experts.down_proj [E][hidden][inter]: bare
 *    parameters, each half of gate_up a view), the language model of a
 *    Gemma4ForConditionalGeneration checkpoint under
 *    "model.language_model." (models/weights.c).
 */
#include "models/gemma4.h"
#include "models/blocks.h"
#include "models/moe.h"
#include "base/error.h"
#include "compute/matmul/matmul.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One layer's gate on its per-layer input. */
typedef struct per_layer_gate {
    sp_linear gate;              /* per_layer_input_gate [P][hidden] */
    sp_linear proj;              /* per_layer_projection [hidden][P] */
    const float *norm;           /* post_per_layer_input_norm [hidden] */
} per_layer_gate;

/* A MoE layer's norms around its two MLP paths. */
typedef struct moe_norms {
    const float *post_1, *pre_2, *post_2;
} moe_norms;

typedef struct gemma4 {
    sp_gemma_io io;              /* first: the shared Gemma hooks read it */
    sp_rope rope_sliding;        /* the sliding-window layers' rope */
    float *layer_scalar;         /* [n_layers] */
    /* Per-layer inputs: P = hidden_size_per_layer_input floats per token
     * and layer (0: none), from a token table and a projection of the
     * embeddings, each layer gating its own. */
    int per_layer;
    sp_linear embed_per_layer;   /* [vocab_per_layer][n_layers * P] */
    sp_linear model_projection;  /* [n_layers * P][hidden] */
    const float *projection_norm; /* [P] */
    per_layer_gate *gates;       /* [n_layers] */
    /* enable_moe_block: every layer's experts and norms; NULL: none. */
    sp_moe *moe;                 /* [n_layers] */
    moe_norms *moe_norms;        /* [n_layers] */
    int n_layers;
} gemma4;

static void gemma4_free(void *family) {
    gemma4 *g = family;
    sp_rope_free(&g->rope_sliding);
    free(g->layer_scalar);
    free(g->gates);
    for (int l = 0; g->moe && l < g->n_layers; l++) sp_moe_free(&g->moe[l]);
    free(g->moe);
    free(g->moe_norms);
    free(g);
}

/* config.json `key` as a count: absent gives mlx-lm's default `dflt`;
 * null and false give 0, true 1 (the booleans and Optional[int]s). */
static spindle_status config_count(const spindle_model *m, const char *key,
                                   int dflt, int *out, spindle_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->cfg.json, key);
    if (v && (cJSON_IsNull(v) || cJSON_IsBool(v))) {
        *out = cJSON_IsTrue(v);
        return SPINDLE_OK;
    }
    return sp_model_int(m, key, false, dflt, 0, 1 << 24, out, err);
}

/* enable_moe_block: every layer's routed experts beside its MLP
 * (num_experts, top_k_experts and moe_intermediate_size required). */
static spindle_status bind_moe(spindle_model *m, gemma4 *g,
                               spindle_error *err) {
    int on, experts = 0, top_k = 0, inter = 0;
    spindle_status st = config_count(m, "enable_moe_block", 0, &on, err);
    if (st || !on) return st;
    if ((st = sp_model_int(m, "num_experts", true, 0, 1, 1 << 16, &experts,
                           err)) ||
        (st = sp_model_int(m, "top_k_experts", true, 0, 1, 1 << 16, &top_k,
                           err)) ||
        (st = sp_model_int(m, "moe_intermediate_size", true, 0, 1, 1 << 30,
                           &inter, err)))
        return st;
    sp_moe_spec spec = {.n_experts = experts, .top_k = top_k,
                        .inter = inter,
                        .routing = SP_ROUTE_TOPK_SOFTMAX,
                        .act = sp_gelu_tanh_mul,
                        .router = "router.proj",
                        .router_norm = "router.scale",
                        .expert_scale = "router.per_expert_scale",
                        .stacked = "experts.switch_glu"};
    if (m->gguf) {
        /* gemma4_gguf.c's names: ffn_gate_inp.{weight,scale} ->
         * router.{weight,scale}, per_expert_scale as ffn_down_exps.scale,
         * the converter's fused ffn_gate_up_exps (gate rows first) or
         * separate ffn_{gate,up}_exps. */
        spec.router = "router";
        spec.expert_scale = "experts.switch_glu.down_proj.scale";
        spec.gate_up = "gate_up_proj";
        spec.gate_up_halves = true;
    }
    const int n = m->cfg.n_layers;
    g->n_layers = n;
    g->moe = calloc((size_t)n, sizeof *g->moe);
    g->moe_norms = calloc((size_t)n, sizeof *g->moe_norms);
    if (!g->moe || !g->moe_norms)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    const int64_t d = m->cfg.hidden_size;
    char p[256];
    for (int l = 0; l < n && !st; l++) {
        moe_norms *N = &g->moe_norms[l];
#define NAME(s) (snprintf(p, sizeof p, "model.layers.%d" s, l), p)
        if (!m->gguf && sp_model_find_tensor(m, NAME(".experts.gate_up_proj"))) {
            /* transformers' layout, which mlx-lm's sanitize splits: the
             * fused experts.gate_up_proj (gate rows first) and
             * experts.down_proj, bare parameters used in place */
            spec.stacked = "experts";
            spec.gate_up = "gate_up_proj";
            spec.gate_up_halves = true;
            /* adapters name mlx-lm's split experts, as trained */
            spec.adapter_stacked = "experts.switch_glu";
        }
        if (!(st = sp_moe_bind(m, NAME(""), &spec, &g->moe[l], err)) &&
            !(st = sp_bind_vector(m, NAME(".post_feedforward_layernorm_1.weight"),
                                  d, &N->post_1, err)) &&
            !(st = sp_bind_vector(m, NAME(".pre_feedforward_layernorm_2.weight"),
                                  d, &N->pre_2, err)))
            st = sp_bind_vector(m, NAME(".post_feedforward_layernorm_2.weight"),
                                d, &N->post_2, err);
        m->layers[l].moe_beside = &g->moe[l];
#undef NAME
    }
    return st;
}

/* A number of rope_parameters.<kind> (absent: dflt). */
static spindle_status rope_num(const spindle_model *m, const cJSON *p,
                               const char *kind, const char *key,
                               double dflt, double lo, double hi,
                               double *out, spindle_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, key);
    *out = cJSON_IsNumber(v) ? v->valuedouble : dflt;
    if (v && !cJSON_IsNumber(v) && !cJSON_IsNull(v))
        *out = NAN;
    if (!(*out > lo && *out <= hi))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: rope_parameters.%s.%s must be a "
                       "number in (%g, %g]", m->dir, kind, key, lo, hi);
    return SPINDLE_OK;
}

/* The rope of one layer kind from rope_parameters (absent: mlx-lm's
 * defaults, proportional 0.25 at 1e6 for full attention, default at 1e4
 * for sliding), and its config in *used (what `spindle info` shows). */
static spindle_status init_rope(const spindle_model *m, const char *kind,
                                int hd, sp_rope *rope, sp_rope_config *used,
                                spindle_error *err) {
    const cJSON *all =
        cJSON_GetObjectItemCaseSensitive(m->cfg.json, "rope_parameters");
    bool full = !strcmp(kind, "full_attention");
    const cJSON *p = NULL;
    if (all && !cJSON_IsNull(all)) {
        if (!cJSON_IsObject(all))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: 'rope_parameters' must be an "
                           "object", m->dir);
        p = cJSON_GetObjectItemCaseSensitive(all, kind);
    }
    bool defaults = !all || cJSON_IsNull(all);
    /* mlx-lm reads "type" before "rope_type". */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(p, "rope_type");
    const char *type = cJSON_IsString(t) ? t->valuestring
                       : defaults && full ? "proportional" : "default";
    double theta, factor, partial;
    spindle_status st;
    if ((st = rope_num(m, p, kind, "rope_theta",
                       defaults && full ? 1000000.0 : 10000.0, 0, INFINITY,
                       &theta, err)) ||
        (st = rope_num(m, p, kind, "factor", 1.0, 0, INFINITY, &factor,
                       err)) ||
        (st = rope_num(m, p, kind, "partial_rotary_factor",
                       defaults && full ? 0.25 : 1.0, 0, 1, &partial, err)))
        return st;
    sp_rope_config rc = {.type = SP_ROPE_DEFAULT, .rotary_dim = hd,
                         .theta = theta, .factor = 1.0};
    if (!strcmp(type, "linear")) {
        rc.type = SP_ROPE_LINEAR;
        rc.factor = factor;
    } else if (!strcmp(type, "proportional")) {
        rc.type = SP_ROPE_PROPORTIONAL;
        rc.factor = factor;
        rc.rotated_dim = (int)(hd * partial);  /* partial in (0, 1] */
        if (rc.rotated_dim % 2)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: rope_parameters.%s."
                           "partial_rotary_factor gives an odd rotated "
                           "dimension %d", m->dir, kind, rc.rotated_dim);
    } else if (strcmp(type, "default")) {
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s/config.json: rope_parameters.%s.rope_type '%s' "
                       "is not supported (supported: default, linear, "
                       "proportional)", m->dir, kind, type);
    }
    if (sp_rope_init(rope, &rc))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    *used = rc;
    return SPINDLE_OK;
}

/* The last num_kv_shared_layers layers attend the keys and values of the
 * last earlier layer of their kind, and their MLPs are twice as wide when
 * use_double_wide_mlp (mlx-lm's defaults: 20, true). */
static spindle_status share_kv(spindle_model *m, const bool *sliding,
                               spindle_error *err) {
    int n = m->cfg.n_layers, shared, wide;
    spindle_status st;
    if ((st = config_count(m, "num_kv_shared_layers", 20, &shared, err)) ||
        (st = config_count(m, "use_double_wide_mlp", 1, &wide, err)))
        return st;
    if (shared >= n)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s/config.json: "
                       "num_kv_shared_layers %d leaves no layer of its own "
                       "KV among %d", m->dir, shared, n);
    for (int l = n - shared; l < n; l++) {
        sp_layer *L = &m->layers[l];
        L->shares_kv = true;
        L->kv_layer = -1;
        for (int i = 0; i < n - shared; i++)
            if (sliding[i] == sliding[l]) L->kv_layer = i;
        if (L->kv_layer < 0)
            return sp_fail(err, SPINDLE_ERR_FORMAT, "%s/config.json: layer "
                           "%d shares KV, but no earlier layer is of its "
                           "kind", m->dir, l);
        if (wide) L->intermediate = 2 * m->cfg.intermediate_size;
    }
    return SPINDLE_OK;
}

/* Each layer's shapes, set before binding: the full-attention layers'
 * heads are global_head_dim wide (absent: mlx-lm's 512; null or 0:
 * head_dim), and the KV sharing. */
static spindle_status set_layer_shapes(spindle_model *m, int pattern,
                                       int *global_hd, spindle_error *err) {
    int n = m->cfg.n_layers;
    spindle_status st = config_count(m, "global_head_dim", 512, global_hd,
                                     err);
    if (st) return st;
    if (!*global_hd) *global_hd = m->cfg.head_dim;
    if (*global_hd % 2)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s/config.json: "
                       "global_head_dim %d is odd", m->dir, *global_hd);
    bool *sliding = calloc((size_t)n, sizeof *sliding);
    if (!sliding) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    st = sp_model_layer_kinds(m, "sliding_attention", pattern, sliding, err);
    int k_eq_v = 0, global_kv = 0;
    if (!st) st = config_count(m, "attention_k_eq_v", 0, &k_eq_v, err);
    if (!st)
        st = config_count(m, "num_global_key_value_heads", 0, &global_kv,
                          err);
    if (!st && k_eq_v && global_kv && m->cfg.n_heads % global_kv)
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s/config.json: "
                     "num_attention_heads %d is not a multiple of "
                     "'num_global_key_value_heads' %d", m->dir,
                     m->cfg.n_heads, global_kv);
    for (int l = 0; l < n && !st; l++) {
        m->layers[l].head_dim = sliding[l] ? m->cfg.head_dim : *global_hd;
        m->layers[l].v_is_k = k_eq_v && !sliding[l];
        if (m->layers[l].v_is_k && global_kv) m->layers[l].n_kv_heads = global_kv;
    }
    if (!st) st = share_kv(m, sliding, err);
    free(sliding);
    return st;
}

static spindle_status bind_layers(spindle_model *m, gemma4 *g,
                                  spindle_error *err) {
    sp_decoder_options opt = {.qk_norm = true,
                              .geglu = true,
                              .norms = SP_NORMS_SANDWICH};
    spindle_status st = sp_bind_decoder_layers(m, &opt, err);
    int n = m->cfg.n_layers;
    g->layer_scalar = malloc((size_t)n * sizeof *g->layer_scalar);
    if (!st && !g->layer_scalar)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    char p[256];
    for (int l = 0; l < n && !st; l++) {
        const float *s = NULL;
        /* GGUF: layer_output_scale.weight */
        snprintf(p, sizeof p, "model.layers.%d.layer_scalar%s", l,
                 m->gguf ? ".weight" : "");
        if (!(st = sp_bind_vector(m, p, 1, &s, err)))
            g->layer_scalar[l] = s[0];
        m->layers[l].v_norm = !m->layers[l].shares_kv;
    }
    return st;
}

static spindle_status bind_per_layer_inputs(spindle_model *m, gemma4 *g,
                                            spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    int n = c->n_layers, P, vocab;
    spindle_status st;
    if ((st = config_count(m, "hidden_size_per_layer_input", 256, &P, err)))
        return st;
    if (!P) return SPINDLE_OK;
    if ((st = sp_model_int(m, "vocab_size_per_layer_input", false, 262144,
                           c->vocab_size, 1 << 30, &vocab, err)))
        return st;
    g->per_layer = P;
    g->gates = calloc((size_t)n, sizeof *g->gates);
    if (!g->gates) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    int64_t d = c->hidden_size, w = (int64_t)n * P;
    if ((st = sp_bind_linear(m, "model.embed_tokens_per_layer", vocab, w,
                             false, &g->embed_per_layer, err)) ||
        (st = sp_bind_linear(m, "model.per_layer_model_projection", w, d,
                             false, &g->model_projection, err)) ||
        (st = sp_bind_vector(m, "model.per_layer_projection_norm.weight", P,
                             &g->projection_norm, err)))
        return st;
    char p[256];
    for (int l = 0; l < n && !st; l++) {
        per_layer_gate *G = &g->gates[l];
#define NAME(s) (snprintf(p, sizeof p, "model.layers.%d." s, l), p)
        if (!(st = sp_bind_linear(m, NAME("per_layer_input_gate"), P, d,
                                  false, &G->gate, err)) &&
            !(st = sp_bind_linear(m, NAME("per_layer_projection"), d, P,
                                  false, &G->proj, err)))
            st = sp_bind_vector(m, NAME("post_per_layer_input_norm.weight"),
                                d, &G->norm, err);
#undef NAME
    }
    return st;
}

/* The per-layer inputs of every row, [T][n_layers][P] in f->family_rows:
 * (norm(projection(x) / sqrt(hidden)) + table[token] * sqrt(P)) / sqrt(2),
 * x the scaled embeddings; then room for one layer's [T][P] gate. A row of
 * an embeddings span flagged SPINDLE_SPAN_NO_PER_LAYER_INPUT has no token
 * term: the multimodal models look up the padding id there, whose row of
 * the table is zero. */
static void gemma4_begin_layers(sp_forward *f) {
    const spindle_model *m = f->m;
    const gemma4 *g = m->family;
    const int T = f->n_rows, P = g->per_layer;
    const size_t w = (size_t)m->cfg.n_layers * P;
    const size_t moe_rows = g->moe ? (size_t)T * m->cfg.hidden_size : 0;
    if ((P || moe_rows) &&
        !sp_forward_family_rows(f, (size_t)T * (2 * w + P) + moe_rows)) {
        f->status = sp_fail(f->err, SPINDLE_ERR_MEMORY, "out of memory for "
                            "the per-layer rows of %d tokens", T);
        return;
    }
    if (!P) return;
    float *in = f->family_rows, *proj = in + (size_t)T * w;
    sp_linear_rows(f->pool, &g->model_projection, f->x, T, proj);
    const float proj_scale = 1.0f / sqrtf((float)m->cfg.hidden_size);
    const float table_scale = sqrtf((float)P), mix = 1.0f / sqrtf(2.0f);
    for (int t = 0; t < T; t++) {
        float *row = in + (size_t)t * w, *pr = proj + (size_t)t * w;
        if (f->any_span && (f->row_flags[t] & SPINDLE_SPAN_NO_PER_LAYER_INPUT))
            memset(row, 0, w * sizeof *row);
        else
            sp_weight_row(&g->embed_per_layer.w, f->tokens[t], row);
        for (size_t i = 0; i < w; i++) pr[i] *= proj_scale;
        for (size_t i = 0; i < w; i += (size_t)P)
            sp_rmsnorm(pr + i, pr + i, g->projection_norm, P,
                       m->cfg.rms_norm_eps, 0.0f);
        for (size_t i = 0; i < w; i++)
            row[i] = (pr[i] + row[i] * table_scale) * mix;
    }
}

/* x += norm(proj(gelu(gate(x)) * input_l)): layer l's per-layer input. */
static void add_per_layer_input(sp_forward *f, int l) {
    const gemma4 *g = f->m->family;
    const per_layer_gate *G = &g->gates[l];
    const int T = f->n_rows, P = g->per_layer;
    const size_t w = (size_t)f->m->cfg.n_layers * P;
    float *gate = f->family_rows + 2 * (size_t)T * w;
    sp_linear_rows(f->pool, &G->gate, f->x, T, gate);
    for (int t = 0; t < T; t++)
        sp_gelu_tanh_mul(gate + (size_t)t * P,
                         f->family_rows + (size_t)t * w + (size_t)l * P, P);
    sp_linear_rows(f->pool, &G->proj, gate, T, f->out);
    sp_norm_rows(f, f->out, G->norm, f->out);
    sp_add_rows(f, f->x, f->out);
}

/* The MLP half of a MoE layer (the header's formula). The dense path's
 * output waits in f->family_rows, after the per-layer inputs. */
static void moe_mlp_half(sp_forward *f, int l) {
    const gemma4 *g = f->m->family;
    const sp_layer *L = &f->m->layers[l];
    const moe_norms *N = &g->moe_norms[l];
    const size_t w = (size_t)f->m->cfg.n_layers * g->per_layer;
    float *dense = f->family_rows + (size_t)f->n_rows * (2 * w + g->per_layer);
    sp_norm_rows(f, f->x, L->mlp_norm, f->xn);
    sp_mlp_geglu(f, l);
    sp_norm_rows(f, f->out, N->post_1, dense);
    sp_norm_rows(f, f->x, N->pre_2, f->xn);
    sp_moe_block_routed(f, &g->moe[l], f->x);
    if (f->status) return;
    sp_norm_rows(f, f->out, N->post_2, f->out);
    sp_add_rows(f, f->out, dense);
    sp_norm_rows(f, f->out, L->post_mlp_norm, f->out);
    sp_add_rows(f, f->x, f->out);
}

static spindle_status gemma4_load(spindle_model *m, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    spindle_status st;
    if ((st = sp_gemma_check_head_dim(m, err)))
        return st;
    int pattern;
    if ((st = sp_model_int(m, "sliding_window_pattern", false, 5, 1,
                           1 << 20, &pattern, err)))
        return st;
    gemma4 *g = calloc(1, sizeof *g);
    if (!g) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    m->family = g;
    /* Absent: mlx-lm's default 30; null: no cap. */
    const cJSON *cap =
        cJSON_GetObjectItemCaseSensitive(c->json, "final_logit_softcapping");
    double final_cap = 0;
    if (!cJSON_IsNull(cap) &&
        (st = sp_model_positive(m, "final_logit_softcapping", 30.0,
                                &final_cap, err)))
        return st;
    g->io = (sp_gemma_io){.embed_scale = sqrtf((float)c->hidden_size),
                          .final_softcap = (float)final_cap};
    sp_rope_free(&m->rope);
    sp_rope_config sliding;
    int global_hd = 0;
    if ((st = set_layer_shapes(m, pattern, &global_hd, err)) ||
        (st = init_rope(m, "full_attention", global_hd, &m->rope,
                        &m->cfg.rope, err)) ||
        (st = init_rope(m, "sliding_attention", c->head_dim,
                        &g->rope_sliding, &sliding, err)) ||
        (st = bind_layers(m, g, err)) ||
        (st = bind_per_layer_inputs(m, g, err)) ||
        (st = bind_moe(m, g, err)))
        return st;
    return sp_model_sliding_layers(m, pattern, 512.0, &g->rope_sliding, err);
}

static void gemma4_layer(sp_forward *f, int l) {
    const gemma4 *g = f->m->family;
    const sp_layer_scales s = {.attn = 1.0f, .residual = 1.0f};
    if (g->moe) {
        sp_decoder_attention(f, l, &s);
        moe_mlp_half(f, l);
    } else {
        sp_decoder_layer(f, l, &s);
    }
    if (g->per_layer && !f->status) add_per_layer_input(f, l);
    float k = g->layer_scalar[l];
    size_t n = (size_t)f->n_rows * f->m->cfg.hidden_size;
    for (size_t i = 0; i < n; i++) f->x[i] *= k;
}

const sp_arch sp_arch_gemma4_text = {
    .model_type = "gemma4_text",
    .gguf = &sp_gemma4_gguf,
    .load = gemma4_load,
    .layer = gemma4_layer,
    .embed_rows = sp_gemma_embed_rows,
    .begin_layers = gemma4_begin_layers,
    .logits = sp_gemma_logits,
    .free_family = gemma4_free,
};
