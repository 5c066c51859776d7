/* Qwen3: the Llama layer plus a per-head RMSNorm of queries and keys
 * (q_norm, k_norm over head_dim) before RoPE; no attention biases unless
 * attention_bias says so. */
#include "models/blocks.h"

static spindle_status qwen3_load(spindle_model *m, spindle_error *err) {
    sp_decoder_options opt = {.qkv_bias = m->cfg.attention_bias,
                              .o_bias = m->cfg.attention_bias,
                              .qk_norm = true};
    return sp_bind_decoder_layers(m, &opt, err);
}

static const sp_gguf_family qwen3_gguf = {
    .arch = "qwen3",
    .model_type = "qwen3",
    .hf_class = "Qwen3ForCausalLM",
};

const sp_arch sp_arch_qwen3 = {.model_type = "qwen3",
                               .gguf = &qwen3_gguf,
                               .load = qwen3_load,
                               .layer = sp_prenorm_decoder_layer};
