/* The routed mixture-of-experts MLP, shared by every MoE family.
 *
 * A router (an sp_linear, optional bias) gives n_experts logits per row;
 * sp_route (compute/routing.h) picks top_k experts and their weights; each
 * chosen expert is a gated MLP down(act(gate(x)) * up(x)) with optional
 * biases; the row's output is the weighted sum of its experts' outputs,
 * plus an optional shared expert that every row goes through (scaled by
 * sigmoid(shared_expert_gate(x)) when that gate exists).
 *
 * The experts are views into the files' tensors, never copies: a stacked
 * [n_experts][out][in] tensor (mlx-lm's switch_mlp.*, float or MLX affine
 * with 3-D weight/scales/biases; GGUF's ffn_*_exps in any block type) is
 * cut into per-expert sp_weight views (sp_weight_row_block), and the
 * Hugging Face layout (one tensor per expert) binds each expert's own
 * tensor; every matmul kernel then runs per expert unchanged.
 *
 * A forward pass groups the rows by expert (gather the rows routed to
 * expert e, one sp_matmul per projection over them, scatter-add with the
 * routing weights), so each chosen expert's weights are read once per pass
 * and a decode step reads only the top_k experts it picked. The LoRA
 * terms of the sequences' adapters join per expert group too
 * (sp_lora_apply_experts). Scratch lives in the forward state and grows;
 * nothing is allocated per token. */
#ifndef SP_MODELS_MOE_H
#define SP_MODELS_MOE_H

#include "models/blocks.h"
#include "compute/routing.h"

/* gate[i] = act(gate[i], up[i]) for i < n (sp_silu_mul's contract). */
typedef void (*sp_moe_act_fn)(float *gate, const float *up, int n);

/* What a family states about its MoE layers. Module names are relative to
 * the prefix handed to sp_moe_bind (the layer's MLP, "model.layers.N.mlp"). */
typedef struct sp_moe_spec {
    int n_experts;
    int top_k;                  /* 1 <= top_k <= n_experts */
    int64_t inter;              /* each expert's intermediate size */
    sp_route_mode routing;
    bool norm_topk;             /* SP_ROUTE_SOFTMAX_TOPK: renormalize */
    bool expert_bias;           /* experts' .bias tensors are required */
    sp_moe_act_fn act;          /* NULL: SwiGLU, silu(gate) * up */
    const char *router;         /* "gate": <router>.weight [n_experts][hidden],
                                   optional <router>.bias */
    /* Gemma 4's router: its input RMS-normalized with weight
     * <router_norm> [hidden] times hidden^-0.5 (NULL: the input as it is),
     * and each chosen expert's weight times <expert_scale>[e]
     * [n_experts] (NULL: none). */
    const char *router_norm;
    const char *expert_scale;
    /* SP_ROUTE_SIGMOID_GROUPED: <score_bias> [n_experts] (DeepSeek-V3's
     * "gate.e_score_correction_bias") and the groups (compute/routing.h;
     * groups.bias is bound by sp_moe_bind). */
    const char *score_bias;
    sp_route_groups groups;
    /* Stacked experts: <stacked>.{gate,up,down}_proj.weight (3-D), e.g.
     * "switch_mlp"; when absent, the per-expert layout
     * <per_expert>.N.{gate,up,down}_proj.weight (NULL: none), e.g.
     * "experts". */
    const char *stacked;
    const char *per_expert;
    /* What adapters call the stacked experts when not `stacked`: mlx-lm's
     * name after its sanitize ("experts.switch_glu" for Gemma 4's Hugging
     * Face "experts"); NULL: `stacked`. */
    const char *adapter_stacked;
    /* Fused stacked experts, tried first when set: <stacked>.<gate_up>
     * [n_experts][2 inter][hidden] with gate row i at 2i and up row i at
     * 2i + 1 (Hugging Face's gpt-oss "gate_up_proj"), beside
     * <stacked>.down_proj; with gate_up_halves, gate rows [0, inter) then
     * up rows [inter, 2 inter) (GGUF's ffn_gate_up_exps), bound as views
     * of each half. */
    const char *gate_up;
    bool gate_up_halves;
    /* Shared expert: <shared>.{gate,up,down}_proj of shared_inter
     * (0: none) and its gate <shared_gate>.weight [1][hidden] (NULL:
     * added ungated). */
    int64_t shared_inter;
    const char *shared;
    const char *shared_gate;
} sp_moe_spec;

/* One bound MoE layer. */
typedef struct sp_moe {
    sp_moe_spec spec;
    int64_t hidden;
    sp_linear router;
    sp_linear *gate, *up, *down;     /* [n_experts] each; owned */
    bool fused;      /* gate[e] is the interleaved gate_up; up[] unused */
    sp_linear shared_gate_proj, shared_up, shared_down;
    sp_linear shared_expert_gate;    /* rows 0: none */
    float *router_norm;              /* [hidden] owned, pre-scaled; or NULL */
    const float *expert_scale;       /* [n_experts] or NULL */
    const float *score_bias;         /* [n_experts] or NULL */
} sp_moe;

/* Bind the layer's router and experts under `prefix` (m->cfg.hidden_size
 * wide), checking every shape against the spec: a tensor with another
 * expert count or size fails naming it. On failure *out holds nothing to
 * free. */
spindle_status sp_moe_bind(spindle_model *m, const char *prefix,
                           const sp_moe_spec *spec, sp_moe *out,
                           spindle_error *err);
/* Release what sp_moe_bind allocated (not moe itself). */
void sp_moe_free(sp_moe *moe);

/* Weights and parameters of the layer: every expert (total) and what one
 * row reads (active: router, top_k experts, shared expert). */
typedef struct sp_moe_size {
    int64_t params, bytes;
    int64_t active_params, active_bytes;
} sp_moe_size;
sp_moe_size sp_moe_measure(const sp_moe *moe);

/* f->out = moe(f->xn) over the pass's rows. A failure (out of memory for
 * the scratch) is left in f->status. */
void sp_moe_block(sp_forward *f, const sp_moe *moe);
/* The same with the router reading router_in [n_rows][hidden] instead of
 * f->xn (Gemma 4 routes on the residual stream, the experts read its
 * normalized copy). */
void sp_moe_block_routed(sp_forward *f, const sp_moe *moe,
                         const float *router_in);

/* The Qwen MoE config keys, as mlx-lm's qwen3_moe and qwen3_next read
 * them. is_moe[n_layers]: layer l is MoE unless it is in mlp_only_layers
 * or (l + 1) is not a multiple of decoder_sparse_step. The spec: softmax
 * top-k routing over num_experts (num_experts_per_tok, renormalized when
 * norm_topk_prob, always for GGUF files as llama.cpp does), experts of
 * moe_intermediate_size (GGUF files without it: feed_forward_length /
 * top_k), router "gate", stacked "switch_mlp" or per-expert "experts"; no
 * shared expert (the family adds its own). One-line errors naming the key. */
spindle_status sp_moe_qwen_layers(const spindle_model *m, bool *is_moe,
                                  spindle_error *err);
spindle_status sp_moe_qwen_spec(const spindle_model *m, sp_moe_spec *spec,
                                spindle_error *err);

/* The DeepSeek-V3 MoE config keys (mlx-lm's deepseek_v3, glm4_moe_lite,
 * glm4_moe), with a family's values for absent keys: n_routed_experts
 * (absent or null: spec->n_experts 0, every layer dense),
 * num_experts_per_tok, moe_intermediate_size (required), n_shared_experts
 * (one shared SwiGLU of n_shared * moe_intermediate_size),
 * n_group / topk_group, norm_topk_prob (default true),
 * routed_scaling_factor; topk_method only "noaux_tc", scoring_func only
 * "sigmoid". Routing SP_ROUTE_SIGMOID_GROUPED with
 * gate.e_score_correction_bias; experts stacked "switch_mlp" or
 * per-expert "experts", shared "shared_experts". One-line errors naming
 * the key, or the group arithmetic that cannot give the top-k. */
typedef struct sp_moe_grouped_defaults {
    int n_routed, n_shared, top_k;
    double routed_scale;
} sp_moe_grouped_defaults;
spindle_status sp_moe_grouped_spec(const spindle_model *m,
                                   const sp_moe_grouped_defaults *dflt,
                                   sp_moe_spec *spec, spindle_error *err);

/* llama.cpp's spelling of sp_moe_grouped_spec's model in GGUF files
 * (deepseek2, glm4moe): the rows of a family's sp_gguf_family.layer_names
 * and .keys. The correction bias is blk.N.exp_probs_b.bias, so a GGUF
 * family's spec names it SP_MOE_GGUF_SCORE_BIAS. */
#define SP_MOE_GROUPED_GGUF_LAYERS                              \
    {"ffn_gate_inp", "mlp.gate"},                               \
    {"exp_probs_b", "mlp.exp_probs_b"},                         \
    {"ffn_gate_exps", "mlp.switch_mlp.gate_proj"},              \
    {"ffn_up_exps", "mlp.switch_mlp.up_proj"},                  \
    {"ffn_down_exps", "mlp.switch_mlp.down_proj"},              \
    {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},         \
    {"ffn_up_shexp", "mlp.shared_experts.up_proj"},             \
    {"ffn_down_shexp", "mlp.shared_experts.down_proj"}
#define SP_MOE_GROUPED_GGUF_KEYS                                          \
    {"expert_count", "n_routed_experts", SP_GGUF_KEY_COUNT},              \
    {"expert_used_count", "num_experts_per_tok", SP_GGUF_KEY_COUNT},      \
    {"expert_feed_forward_length", "moe_intermediate_size",               \
     SP_GGUF_KEY_COUNT},                                                  \
    {"expert_group_count", "n_group", SP_GGUF_KEY_COUNT},                 \
    {"expert_group_used_count", "topk_group", SP_GGUF_KEY_COUNT},         \
    {"expert_weights_scale", "routed_scaling_factor", SP_GGUF_KEY_REAL}
#define SP_MOE_GGUF_SCORE_BIAS "exp_probs_b.bias"

/* The routing keys of a grouped-MoE GGUF file of architecture `arch` that
 * do not map key for key, into its config.json object:
 * leading_dense_block_count and expert_shared_count (counts that may be
 * 0), expert_weights_norm (norm_topk_prob; absent: false, as llama.cpp)
 * and expert_gating_func (scoring_func; only 2, sigmoid, is supported;
 * absent: `absent_sigmoid` says whether llama.cpp assumes sigmoid or
 * softmax for the architecture). */
spindle_status sp_moe_gguf_routing(const sp_gguf *g, const char *arch,
                                   bool absent_sigmoid, cJSON *json,
                                   spindle_error *err);

/* Replace json[key] by item (taking it; NULL: out of memory). */
spindle_status sp_json_replace(cJSON *json, const char *key, cJSON *item,
                               spindle_error *err);

/* The scratch sp_moe_block keeps in sp_forward.moe. */
typedef struct sp_moe_scratch sp_moe_scratch;
void sp_moe_scratch_free(sp_moe_scratch *s);

#endif
