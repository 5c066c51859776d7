/* Multi-head latent attention (MLA: DeepSeek-V2/V3, Kimi K2, GLM-4.7-Flash),
 * as mlx-lm's deepseek_v3 computes it.
 *
 * Per token the layer projects x to a compressed latent c (kv_lora_rank,
 * RMS-normalized by kv_a_layernorm) and one rotary key k_pe
 * (qk_rope_head_dim, shared by every head), and its queries to per-head
 * q_nope (qk_nope_head_dim) and q_pe (qk_rope_head_dim; through the
 * q_a_proj / q_a_layernorm / q_b_proj low-rank path when q_lora_rank is
 * set). Head h's key is [W_uk[h] c ; k_pe] and its value W_uv[h] c, so
 *   score = scale (q_nope . W_uk[h] c + q_pe . k_pe)
 *         = scale ([W_uk[h]^T q_nope ; q_pe] . [c ; k_pe])
 * and the output W_uv[h] (sum_j p_j c_j). The cache keeps the row
 * [c ; k_pe] of each position and nothing else (SP_STATE_LATENT_KV, one
 * row of kv_lora_rank + qk_rope_head_dim elements), and every pass, prefill
 * and decode alike, attends in that absorbed form: queries are projected
 * into the latent space per head (embed_q = W_uk^T), the rows are read
 * once per token for all heads (sp_attention_latent: one KV head whose
 * rows' latent part is also the values), and the latent output goes
 * through unembed_out = W_uv per head.
 *
 * Weights: mlx-lm's layout (its sanitize splits kv_b_proj into
 * self_attn.embed_q [heads][kv_lora_rank][qk_nope_head_dim] and
 * self_attn.unembed_out [heads][v_head_dim][kv_lora_rank], float or MLX
 * affine), or the Hugging Face kv_b_proj [heads * (qk_nope + v)]
 * [kv_lora_rank] in a float type, whose key half is transposed once at
 * load into an owned f32 copy.
 *
 * RoPE: interleaved pairs over the qk_rope_head_dim dimensions (mlx-lm's
 * traditional=True), with the config's rope_scaling (YaRN's mscale /
 * mscale_all_dim on cos and sin); with a YaRN factor > 1 and
 * mscale_all_dim, the score scale is multiplied by
 * (0.1 mscale_all_dim ln(factor) + 1)^2, as mlx-lm does. */
#ifndef SP_MODELS_MLA_H
#define SP_MODELS_MLA_H

#include "models/blocks.h"

typedef struct sp_mla_config {
    int n_heads;
    int q_lora_rank;     /* 0: a plain q_proj */
    int kv_lora_rank;
    int qk_nope, qk_rope, v_head_dim;
    bool bias;           /* attention_bias: q_a, kv_a and o biases */
    /* q_a_layernorm's and kv_a_layernorm's: mlx-lm's deepseek_v3 fixes
     * 1e-6, its glm4_moe_lite takes rms_norm_eps */
    float latent_eps;
    float scale;
    sp_rope rope;        /* over qk_rope dimensions; owned */
} sp_mla_config;

/* One layer's weights (self_attn.*). */
typedef struct sp_mla_layer {
    sp_linear q;                     /* q_proj (no q_lora_rank) */
    sp_linear q_a, q_b;
    const float *q_a_norm;
    sp_linear kv_a;                  /* kv_a_proj_with_mqa */
    const float *kv_a_norm;
    sp_linear *embed_q;              /* [n_heads] kv_lora_rank x qk_nope */
    sp_linear *unembed_out;          /* [n_heads] v_head_dim x kv_lora_rank */
    sp_linear o;
    float *owned;                    /* the transposed kv_b_proj, or NULL */
} sp_mla_layer;

/* Read kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
 * v_head_dim, attention_bias and the rope from config.json; one-line
 * errors naming the key (a missing kv_lora_rank, an odd or non-positive
 * rope dimension). */
spindle_status sp_mla_config_read(spindle_model *m, sp_mla_config *c,
                                  spindle_error *err);
void sp_mla_config_free(sp_mla_config *c);

/* Bind layer l's model.layers.l.self_attn.* (shapes checked, one line
 * naming the tensor); on failure *out holds nothing to free. */
spindle_status sp_mla_bind(spindle_model *m, const sp_mla_config *c, int l,
                           sp_mla_layer *out, spindle_error *err);
void sp_mla_layer_free(sp_mla_layer *L);

/* The layer's sequence state: latent KV, one row of kv_lora_rank +
 * qk_rope_head_dim per position. */
void sp_mla_state(const sp_mla_config *c, sp_layer_state_desc *out);

/* f->out = attention of layer l over f->xn (the layer's cache written for
 * the pass's positions). A failure goes to f->status. */
void sp_mla_attention(sp_forward *f, int l, const sp_mla_config *c,
                      const sp_mla_layer *L);

/* Up to max of the layer's matrices into out (their number returned), for
 * `spindle info`'s counts; *vector_floats grows by the elements of its
 * norms. */
int sp_mla_matrices(const sp_mla_config *c, const sp_mla_layer *L,
                    const sp_linear **out, int max, int64_t *vector_floats);

#endif
