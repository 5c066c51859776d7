/* Dream (Dream-org/Dream-v0-7B, masked diffusion from Qwen2.5): Qwen2's
 * layer (q/k/v biases, rotate-half RoPE) with bidirectional passes
 * (sp_arch.diffusion) and shifted logits: position i's logits predict
 * token i + 1, as in its autoregressive parent (sp_arch.diffusion_shifted).
 *
 * GGUF: llama.cpp's "dream" (DreamModel in its converter: Qwen2's tensor
 * names, tokenizer.ggml.mask_token_id, no diffusion.shift_logits key). */
#include "models/blocks.h"

static spindle_status dream_load(spindle_model *m, spindle_error *err) {
    sp_decoder_options opt = {.qkv_bias = true, .o_bias = false};
    spindle_status st = sp_diffusion_check_mask(m, err);
    return st ? st : sp_bind_decoder_layers(m, &opt, err);
}

static const sp_gguf_family dream_gguf = {
    .arch = "dream",
    .model_type = "dream",
    .hf_class = "DreamModel",
};

const sp_arch sp_arch_dream = {.model_type = "dream",
                               .gguf = &dream_gguf,
                               .diffusion = true,
                               .diffusion_shifted = true,
                               .load = dream_load,
                               .layer = sp_prenorm_decoder_layer};
