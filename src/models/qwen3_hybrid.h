/* What the hybrid families Qwen3.5 (qwen3_5.c, dense and MoE) and
 * Qwen3-Next (qwen3_next.c) share, as mlx-lm's qwen3_next.py and qwen3_5.py compute
 * them: most layers mix tokens with a gated DeltaNet (linear attention with
 * a recurrent state, compute/linear_attention/), every
 * full_attention_interval-th one (or those layer_types names
 * "full_attention") with gated softmax attention.
 *
 * Gated attention: q_proj has twice the query width, each head's query
 * followed by its gate; per-head q/k RMSNorms, RoPE on the first
 * partial_rotary_factor of each head, and the attention output is scaled by
 * sigmoid(gate) before o_proj.
 *
 * Gated DeltaNet: in_proj_qkv (q, k and v of every head, the convolution's
 * channels), in_proj_z, in_proj_b, in_proj_a (Qwen3.5), or in_proj_qkvz and
 * in_proj_ba whose rows are grouped per key head (Qwen3-Next's own files:
 * [q, k, v, z] and [b, a] of each key head, which the forward pass regroups);
 * a causal depthwise conv1d + SiLU over q|k|v, the delta rule, the gated
 * RMSNorm over each value head with z, out_proj.
 *
 * Hugging Face checkpoints store the layer norms, the final norm and the q/k
 * norms as w for (1 + w) RMSNorms; mlx-lm adds the 1 when it converts them
 * (its sanitize), llama.cpp's converter too, so MLX and GGUF files hold the
 * effective weights. The DeltaNet's own norm is plain in every format.
 *
 * The family data (spindle_model.family) begins with an sp_hybrid, so that
 * the shared hooks find it whatever the family adds after it. */
#ifndef SP_MODELS_QWEN3_HYBRID_H
#define SP_MODELS_QWEN3_HYBRID_H

#include "models/blocks.h"
#include "models/moe.h"

/* One DeltaNet layer's weights. The input projections are either split
 * (qkv, z; b, a) or fused per key head (qkvz; ba), decided by the tensors
 * the files hold: rows 0 marks the form that is absent. */
typedef struct sp_delta_net {
    sp_linear qkv, z, qkvz;
    sp_linear b, a, ba;
    const float *conv_w;     /* [kernel][conv_dim], transposed at load */
    const float *dt_bias;    /* [n_v_heads] */
    const float *a_scale;    /* [n_v_heads]: -exp(A_log) */
    const float *norm;       /* [v_dim] */
    sp_linear out;
} sp_delta_net;

typedef struct sp_hybrid {
    bool *linear;            /* [n_layers]: DeltaNet, else gated attention */
    sp_delta_net *delta;     /* [n_layers], bound where linear */
    int n_k_heads, n_v_heads, k_dim, v_dim, conv_kernel;
    int64_t key_dim, value_dim, conv_dim;
    bool heads_tiled;        /* llama.cpp's qwen35 order of value heads */
    /* Read-only after loading: the per-pass rows live in the pass
     * (sp_forward.family_scratch), since the engine and an embedder may run
     * passes over one model at once. */
} sp_hybrid;

typedef struct sp_hybrid_options {
    /* The checkpoint stores (1 + w) norms as w (Hugging Face layout). */
    bool norms_plus_one;
    /* Value heads tiled over the key heads (v head h reads key head
     * h % n_k_heads): llama.cpp's qwen35 converter reorders them so. */
    bool heads_tiled;
} sp_hybrid_options;

/* The family data of a hybrid family with routed experts (Qwen3-Next,
 * Qwen3.5 MoE; the dense Qwen3.5 too, its moe NULL): the hybrid layers,
 * then the MoE layers' experts. */
typedef struct sp_hybrid_moe {
    sp_hybrid hybrid;  /* first: the shared hooks read it */
    sp_moe *moe;       /* [n_layers] or NULL; unbound (zeroed) on dense layers */
    int n_layers;
} sp_hybrid_moe;

/* A zeroed sp_hybrid_moe in m->family (moe allocated when with_moe), and
 * its free_family hook. */
spindle_status sp_hybrid_moe_new(spindle_model *m, bool with_moe,
                                 sp_hybrid_moe **out, spindle_error *err);
void sp_hybrid_moe_free(void *family);

/* The Qwen MoE spec (sp_moe_qwen_spec) with the sigmoid-gated shared
 * expert of shared_expert_intermediate_size both families have. */
spindle_status sp_hybrid_moe_spec(spindle_model *m, sp_moe_spec *spec,
                                  spindle_error *err);

/* Every layer's MLP under "<layers>.N.mlp": the experts of `spec` where
 * is_moe[l] (q->moe[l], sp_layer.moe pointing at it), else the dense SwiGLU
 * of intermediate_size (is_moe NULL: every layer dense). */
spindle_status sp_hybrid_bind_mlps(spindle_model *m, sp_hybrid_moe *q,
                                   const char *layers, const bool *is_moe,
                                   const sp_moe_spec *spec,
                                   spindle_error *err);

/* Read the linear-attention config keys (linear_num_key_heads, ...,
 * full_attention_interval or layer_types; GGUF files carry them under
 * llama.cpp's names, SP_QWEN_HYBRID_GGUF_KEYS) into h: the sizes and which
 * layers are linear. Every malformed value fails with a one-line error
 * naming it. */
spindle_status sp_hybrid_config(spindle_model *m, sp_hybrid *h,
                                spindle_error *err);
/* Then bind every layer's norms and mixer (gated attention or DeltaNet)
 * into h and m->layers; the MLP is the family's. */
spindle_status sp_hybrid_bind(spindle_model *m, sp_hybrid *h,
                              const sp_hybrid_options *opt,
                              spindle_error *err);
/* The same for a model whose layers are named "<layers>.N." (a
 * multi-token-prediction head's "mtp.layers"), h->linear already set; the
 * final norm is left to the caller. */
spindle_status sp_hybrid_bind_layers_at(spindle_model *m, sp_hybrid *h,
                                        const char *layers,
                                        const sp_hybrid_options *opt,
                                        spindle_error *err);
/* Whether layer l's conv1d weight has the Hugging Face shape
 * [channels, 1, kernel] (mlx-lm's and GGUF files drop or move the 1): the
 * mark of an unconverted checkpoint. False when l is not linear. */
bool sp_hybrid_hf_conv(const spindle_model *m, const sp_hybrid *h, int l);
/* The DeltaNet's sizes (llama.cpp's ssm.* keys, Qwen3NextModel's
 * set_gguf_parameters) and the layer pattern, for the families'
 * sp_gguf_key_map tables. */
#define SP_QWEN_HYBRID_GGUF_KEYS                                              \
    {"ssm.conv_kernel", "linear_conv_kernel_dim", SP_GGUF_KEY_COUNT},         \
    {"ssm.state_size", "linear_key_head_dim", SP_GGUF_KEY_COUNT},             \
    {"ssm.group_count", "linear_num_key_heads", SP_GGUF_KEY_COUNT},           \
    {"ssm.time_step_rank", "linear_num_value_heads", SP_GGUF_KEY_COUNT},      \
    {"ssm.inner_size", "ssm_inner_size", SP_GGUF_KEY_COUNT},                  \
    {"full_attention_interval", "full_attention_interval", SP_GGUF_KEY_COUNT}

/* llama.cpp's spelling of the tensors both families share (gguf-py's
 * MODEL_TENSORS[QWEN35] / [QWEN3NEXT]) for their sp_gguf_name_map tables;
 * A_log is "blk.N.ssm_a" (no suffix, kept under its GGUF name). */
#define SP_QWEN_HYBRID_GGUF_NAMES                                             \
    {"attn_qkv", "linear_attn.in_proj_qkv"},                                  \
    {"attn_gate", "linear_attn.in_proj_z"},                                   \
    {"ssm_conv1d", "linear_attn.conv1d"},                                     \
    {"ssm_dt", "linear_attn.dt_proj"},                                        \
    {"ssm_norm", "linear_attn.norm"},                                         \
    {"ssm_out", "linear_attn.out_proj"},                                      \
    {"post_attention_norm", "post_attention_layernorm"}

/* llama.cpp's names of the MoE layers both MoE families have (every layer
 * MoE: the router, the stacked experts, the shared expert and its gate, a
 * vector), and their sizes' keys. */
#define SP_QWEN_HYBRID_MOE_GGUF_NAMES                                         \
    {"ffn_gate_inp", "mlp.gate"},                                             \
    {"ffn_gate_exps", "mlp.switch_mlp.gate_proj"},                            \
    {"ffn_up_exps", "mlp.switch_mlp.up_proj"},                                \
    {"ffn_down_exps", "mlp.switch_mlp.down_proj"},                            \
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},                        \
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},                            \
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},                        \
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"}
#define SP_QWEN_HYBRID_MOE_GGUF_KEYS                                          \
    {"expert_count", "num_experts", SP_GGUF_KEY_COUNT},                       \
    {"expert_used_count", "num_experts_per_tok", SP_GGUF_KEY_COUNT},          \
    {"expert_feed_forward_length", "moe_intermediate_size",                   \
     SP_GGUF_KEY_COUNT},                                                      \
    {"expert_shared_feed_forward_length", "shared_expert_intermediate_size",  \
     SP_GGUF_KEY_COUNT}

/* Release what sp_hybrid_config and sp_hybrid_bind allocated in h (not h
 * itself). */
void sp_hybrid_release(sp_hybrid *h);

/* f->out = mixer of layer l (f->xn): gated attention or the DeltaNet over
 * each sequence's recurrent state. */
void sp_hybrid_mixer(sp_forward *f, int l);

/* The hybrid decoder layer: x += mixer(input_layernorm(x));
 * x += mlp(post_attention_layernorm(x)), the MLP the layer's routed
 * experts when sp_layer.moe is set, else its dense SwiGLU. */
void sp_hybrid_layer(sp_forward *f, int l);

/* The layer_extra hook: a DeltaNet layer's projections, and its conv
 * taps, decay, dt_bias and norm as vectors. */
int sp_hybrid_layer_extra(const spindle_model *m, int l, const sp_linear **out,
                          int max, int64_t *vector_floats);

/* The lora_linear hook: a DeltaNet layer's in_proj_qkvz, in_proj_ba,
 * in_proj_qkv, _z, _b, _a or out_proj as bound (the fused or the split
 * form, as the files hold them), NULL for the other form and for gated
 * attention layers. The fused products get the LoRA term before the
 * forward regroups them, where mlx-lm adds it. */
const sp_linear *sp_hybrid_lora_linear(const spindle_model *m, int l,
                                       sp_lora_module mod);

/* The layer's sequence state: full KV for gated attention, recurrent (the
 * conv window and the delta-rule state) for DeltaNet layers. */
void sp_hybrid_layer_state(const spindle_model *m, int l,
                           sp_layer_state_desc *out);

#endif
