/* Llama family (Llama 2/3/3.1/3.2, Mistral-style configs, SmolLM).
 * Pre-norm decoder, SwiGLU MLP, grouped-query attention, RoPE with the
 * default/linear/llama3/yarn scalings. attention_bias puts a bias on all four
 * attention projections, as in transformers' LlamaAttention.
 *
 * "mistral3" configs whose text_config names no model_type are this model
 * too (mlx-lm's mistral3.py; the weights under "language_model.").
 *
 * GGUF: llama.cpp writes Llama and Mistral checkpoints as "llama", with the
 * q/k rows permuted for its interleaved RoPE (LlamaModel.permute). */
#include "models/blocks.h"

static spindle_status llama_load(spindle_model *m, spindle_error *err) {
    sp_decoder_options opt = {.qkv_bias = m->cfg.attention_bias,
                              .o_bias = m->cfg.attention_bias};
    return sp_bind_decoder_layers(m, &opt, err);
}

static const sp_gguf_family llama_gguf = {
    .arch = "llama",
    .model_type = "llama",
    .hf_class = "LlamaForCausalLM",
    .rope_interleaved = true,
};

const sp_arch sp_arch_llama = {.model_type = "llama",
                               .gguf = &llama_gguf,
                               .load = llama_load,
                               .layer = sp_prenorm_decoder_layer};
const sp_arch sp_arch_mistral = {.model_type = "mistral",
                                 .load = llama_load,
                                 .layer = sp_prenorm_decoder_layer};
const sp_arch sp_arch_mistral3 = {.model_type = "mistral3",
                                  .load = llama_load,
                                  .layer = sp_prenorm_decoder_layer};
