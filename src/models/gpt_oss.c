/* gpt-oss (model_type "gpt_oss", openai/gpt-oss-20b and -120b) as mlx-lm's
 * gpt_oss computes it:
 *  - the pre-norm decoder layer with biases on q/k/v/o and attention sinks
 *    (a learned logit per head in each softmax's denominator);
 *  - sliding-window (sliding_window, 128) and full attention layers as
 *    layer_types lists them (default: sliding on even layers);
 *  - a routed-experts MLP (models/moe.h) on every layer: the router (with
 *    bias) picks num_experts_per_tok of num_local_experts by raw logit, a
 *    softmax over the chosen gives their weights; each expert (with biases)
 *    is gpt-oss's clamped SwiGLU, (clip(up, -7, 7) + 1) * g * sigmoid(1.702
 *    g) with g = min(gate, 7);
 *  - YaRN rope_scaling (compute/rope.c, as mlx-lm's YarnRoPE).
 * Weights: mlx-lm's sanitized layout (mlp.router, stacked
 * mlp.experts.{gate,up,down}_proj with biases, self_attn.sinks), float,
 * MLX affine or mxfp4 (mlx-community's MXFP4 experts); or the Hugging Face
 * checkpoints' (openai/gpt-oss-*): MXFP4 experts as gate_up_proj_blocks
 * with interleaved gate/up rows, used in place (moe.h's gate_up) where
 * mlx-lm's sanitize splits them.
 *
 * GGUF (llama.cpp's "gpt-oss", src/models/openai-moe.cpp): blk.N.attn_sinks,
 * post_attention_norm as the pre-MLP norm, ffn_gate_inp as the router and
 * ffn_{gate,up,down}_exps (MXFP4 in llama.cpp's conversions) with biases;
 * every other layer sliding-window from layer 0 (its swa pattern 2). */
#include "models/blocks.h"
#include "models/moe.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define GPT_OSS_SWIGLU_LIMIT 7.0f
#define GPT_OSS_SWIGLU_ALPHA 1.702f

/* What spindle_model.family holds: every layer's experts. */
typedef struct gpt_oss {
    sp_moe *moe;       /* [n_layers] */
    int n_layers;
} gpt_oss;

static void gpt_oss_free(void *family) {
    gpt_oss *g = family;
    for (int l = 0; l < g->n_layers; l++) sp_moe_free(&g->moe[l]);
    free(g->moe);
    free(g);
}

/* mlx-lm's swiglu_oai: gate[i] = (clip(up, -L, L) + 1) * g * sigmoid(a g),
 * g = min(gate, L). */
static void swiglu_oai(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        const float g = fminf(gate[i], GPT_OSS_SWIGLU_LIMIT);
        const float u = fminf(fmaxf(up[i], -GPT_OSS_SWIGLU_LIMIT),
                              GPT_OSS_SWIGLU_LIMIT);
        gate[i] = (u + 1.0f) * (g / (1.0f + expf(-GPT_OSS_SWIGLU_ALPHA * g)));
    }
}

/* The sinks of layer l: mlx-lm's self_attn.sinks, or GGUF's attn_sinks
 * (read under HF names with its .weight suffix). */
static spindle_status bind_sinks(spindle_model *m, int l, spindle_error *err) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.self_attn.sinks", l);
    const float **out = &m->layers[l].sinks;
    spindle_status st = sp_bind_vector_opt(m, name, m->cfg.n_heads, out, err);
    if (st || *out) return st;
    snprintf(name, sizeof name, "model.layers.%d.self_attn.sinks.weight", l);
    return sp_bind_vector(m, name, m->cfg.n_heads, out, err);
}

static spindle_status gpt_oss_load(spindle_model *m, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    const int n = c->n_layers;
    int experts = 0, used = 0;
    spindle_status st;
    if ((st = sp_model_int(m, "num_local_experts", true, 0, 1, 1 << 16,
                           &experts, err)) ||
        (st = sp_model_int(m, "num_experts_per_tok", true, 0, 1, 1 << 16,
                           &used, err)))
        return st;
    if (used > experts)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: num_experts_per_tok %d exceeds "
                       "num_local_experts %d", m->dir, used, experts);
    const sp_moe_spec spec = {
        .n_experts = experts,
        .top_k = used,
        .inter = c->intermediate_size,
        .routing = SP_ROUTE_TOPK_SOFTMAX,
        .expert_bias = true,
        .act = swiglu_oai,
        .router = "router",
        .stacked = "experts",
        .gate_up = "gate_up_proj",
    };
    gpt_oss *g = calloc(1, sizeof *g);
    bool *own = calloc((size_t)n, sizeof *own);
    if (g) g->moe = calloc((size_t)n, sizeof *g->moe);
    if (!g || !g->moe || !own) {
        if (g) free(g->moe);
        free(g), free(own);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    g->n_layers = n;
    m->family = g;
    for (int l = 0; l < n; l++) own[l] = true;
    const sp_decoder_options opt = {.qkv_bias = true, .o_bias = true,
                                    .own_mlp = own};
    st = sp_bind_decoder_layers(m, &opt, err);
    /* layer_types, or mlx-lm's default: sliding, full, sliding, ... */
    if (!st) st = sp_model_sliding_layers(m, 2, NAN, NULL, err);
    char prefix[64];
    for (int l = 0; l < n && !st; l++) {
        snprintf(prefix, sizeof prefix, "model.layers.%d.mlp", l);
        st = sp_moe_bind(m, prefix, &spec, &g->moe[l], err);
        if (!st) st = bind_sinks(m, l, err);
        m->layers[l].moe = &g->moe[l];
    }
    free(own);
    return st;
}

static const sp_gguf_name_map gpt_oss_gguf_layers[] = {
    {"post_attention_norm", "post_attention_layernorm"},
    {"attn_sinks", "self_attn.sinks"},
    {"ffn_gate_inp", "mlp.router"},
    {"ffn_gate_exps", "mlp.experts.gate_proj"},
    {"ffn_up_exps", "mlp.experts.up_proj"},
    {"ffn_down_exps", "mlp.experts.down_proj"},
    {NULL, NULL},
};

static const sp_gguf_key_map gpt_oss_gguf_keys[] = {
    {"expert_count", "num_local_experts", SP_GGUF_KEY_COUNT},
    {"expert_used_count", "num_experts_per_tok", SP_GGUF_KEY_COUNT},
    {"expert_feed_forward_length", "intermediate_size", SP_GGUF_KEY_COUNT},
    {"attention.sliding_window", "sliding_window", SP_GGUF_KEY_COUNT},
    {"attention.sliding_window_pattern", "sliding_window_pattern",
     SP_GGUF_KEY_COUNT},
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

static const sp_gguf_family gpt_oss_gguf = {
    .arch = "gpt-oss",
    .model_type = "gpt_oss",
    .hf_class = "GptOssForCausalLM",
    .layer_names = gpt_oss_gguf_layers,
    .keys = gpt_oss_gguf_keys,
};

const sp_arch sp_arch_gpt_oss = {.model_type = "gpt_oss",
                                 .gguf = &gpt_oss_gguf,
                                 .load = gpt_oss_load,
                                 .layer = sp_prenorm_decoder_layer,
                                 .free_family = gpt_oss_free};
