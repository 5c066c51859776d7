/* Phi-3 (and Phi-3.5, Phi-4 mini): the Llama layer with fused projections
 * and Phi's RoPE options, as mlx-lm's phi3.py computes them:
 *  - self_attn.qkv_proj holds the q, k and v rows, mlp.gate_up_proj the
 *    gate then the up rows; both are bound as row views of one weight;
 *  - head_dim is hidden_size / num_attention_heads;
 *  - partial_rotary_factor rotates the first part of each head;
 *  - rope_scaling "longrope" / "su": frequencies divided by long_factor
 *    (always: mlx-lm never switches to short_factor), the rotated
 *    dimensions scaled by sqrt(1 + log(s) / log(original)) with
 *    s = max_position_embeddings (default 131072) /
 *    original_max_position_embeddings (the top-level key, default 4096);
 *    "linear" as usual; no other scaling.
 *
 * GGUF (llama.cpp's "phi3"): attn_qkv and a double-width ffn_up (gate then
 * up); rotate-half RoPE, no permutation. Files with rope_factors_long /
 * rope_factors_short (128k-context models, between which llama.cpp picks
 * by context size) are refused. */
#include "models/blocks.h"
#include "base/error.h"

static spindle_status phi3_rope(spindle_model *m, spindle_error *err) {
    sp_rope_config r = m->cfg.rope;
    if (r.type == SP_ROPE_LLAMA3 || r.type == SP_ROPE_YARN)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s/config.json: phi3 applies only longrope, su and "
                       "linear rope_scaling (as mlx-lm's phi3)", m->dir);
    if (r.type != SP_ROPE_LONGROPE) return SPINDLE_OK;
    double orig = 0;
    spindle_status st = sp_model_positive(
        m, "original_max_position_embeddings", 4096.0, &orig, err);
    if (st) return st;
    if (orig > (double)(1 << 30) || orig != (double)(int)orig)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: 'original_max_position_embeddings' "
                       "must be an integer in [1, 2^30]", m->dir);
    double max_pos = m->cfg.max_position > 0 ? m->cfg.max_position : 131072;
    r.original_max_position = (int)orig;
    r.factor = max_pos / orig;
    m->rope_interleaved = false; /* SuScaledRoPE is rotate-half */
    sp_rope_free(&m->rope);
    if (sp_rope_init(&m->rope, &r))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

static spindle_status phi3_load(spindle_model *m, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    if (c->head_dim * c->n_heads != c->hidden_size)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: phi3's head size is hidden_size / "
                       "num_attention_heads, not head_dim %d", m->dir,
                       c->head_dim);
    if (m->gguf && (sp_model_find_tensor(m, "rope_factors_long.weight") ||
                    sp_model_find_tensor(m, "rope_factors_short.weight")))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: phi3 rope_factors_long/short (longrope in GGUF) "
                       "are not supported", m->dir);
    spindle_status st = phi3_rope(m, err);
    if (st) return st;
    /* llama.cpp also reads separate attn_q/k/v; the MLP is always fused. */
    sp_decoder_options opt = {
        .fused_qkv = sp_model_find_tensor(
                         m, "model.layers.0.self_attn.q_proj.weight") == NULL,
        .fused_gate_up = true,
    };
    return sp_bind_decoder_layers(m, &opt, err);
}

static const sp_gguf_name_map phi3_gguf_layers[] = {
    {"attn_qkv", "self_attn.qkv_proj"},
    {"ffn_up", "mlp.gate_up_proj"},
    {NULL, NULL},
};

static const sp_gguf_family phi3_gguf = {
    .arch = "phi3",
    .model_type = "phi3",
    .hf_class = "Phi3ForCausalLM",
    .layer_names = phi3_gguf_layers,
};

const sp_arch sp_arch_phi3 = {.model_type = "phi3",
                              .gguf = &phi3_gguf,
                              .load = phi3_load,
                              .layer = sp_prenorm_decoder_layer};
