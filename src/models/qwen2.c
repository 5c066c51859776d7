/* Qwen2 / Qwen2.5: the Llama layer with biases on q, k and v (never on o). */
#include "models/blocks.h"

static spindle_status qwen2_load(spindle_model *m, spindle_error *err) {
    sp_decoder_options opt = {.qkv_bias = true, .o_bias = false};
    return sp_bind_decoder_layers(m, &opt, err);
}

static const sp_gguf_family qwen2_gguf = {
    .arch = "qwen2",
    .model_type = "qwen2",
    .hf_class = "Qwen2ForCausalLM",
};

const sp_arch sp_arch_qwen2 = {.model_type = "qwen2",
                               .gguf = &qwen2_gguf,
                               .load = qwen2_load,
                               .layer = sp_prenorm_decoder_layer};
