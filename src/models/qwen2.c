/* Qwen2 / Qwen2.5: the Llama layer with biases on q, k and v (never on o). */
#include "models/blocks.h"

static spindle_status qwen2_load(spindle_model *m, spindle_error *err) {
    sp_decoder_options opt = {.qkv_bias = true, .o_bias = false};
    return sp_bind_decoder_layers(m, &opt, err);
}

const sp_arch sp_arch_qwen2 = {"qwen2", qwen2_load, sp_prenorm_decoder_layer};
