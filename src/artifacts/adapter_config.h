/* adapter_config.json of a LoRA adapter directory, in either of the two
 * layouts Spindle reads:
 *  - PEFT (adapter_model.safetensors): peft_type "LORA", r, lora_alpha,
 *    use_rslora, target_modules; scale = lora_alpha / r, or
 *    lora_alpha / sqrt(r) with use_rslora;
 *  - mlx-lm (adapters.safetensors): fine_tune_type "lora", num_layers,
 *    lora_parameters {rank, scale, dropout, keys}; scale as written.
 * The features neither applies unmerged here (DoRA, PEFT's rank/alpha
 * patterns, modules_to_save, bias training, fan_in_fan_out) are refused
 * with SPINDLE_ERR_UNSUPPORTED naming the key. Pure: fuzzed by
 * tests/fuzz/fuzz_adapter_config. */
#ifndef SP_ARTIFACTS_ADAPTER_CONFIG_H
#define SP_ARTIFACTS_ADAPTER_CONFIG_H

#include <stddef.h>
#include "spindle.h"

/* The projections an adapter may target, by their Hugging Face names:
 * gate/up/down name a dense MLP's, a routed expert's and a shared
 * expert's alike; the router of an MoE layer is Qwen's mlp.gate ("gate"),
 * gpt-oss's mlp.router ("router") or Gemma 4's router.proj ("proj"), the
 * shared expert's sigmoid gate Qwen's mlp.shared_expert_gate; the gated
 * DeltaNet's (linear_attn.) input projections are Qwen3-Next's fused
 * in_proj_qkvz / in_proj_ba or Qwen3.5's in_proj_qkv, _z, _b, _a, its
 * output out_proj. New modules go last: the order numbers slots. */
typedef enum sp_lora_module {
    SP_LORA_Q = 0, SP_LORA_K, SP_LORA_V, SP_LORA_O,
    SP_LORA_GATE, SP_LORA_UP, SP_LORA_DOWN,
    SP_LORA_ROUTER,
    SP_LORA_SHARED_GATE,
    SP_LORA_IN_QKVZ, SP_LORA_IN_BA, SP_LORA_IN_QKV, SP_LORA_IN_Z,
    SP_LORA_IN_B, SP_LORA_IN_A, SP_LORA_OUT_PROJ,
    SP_LORA_N_MODULES
} sp_lora_module;

/* The first of the DeltaNet's modules, and their count. */
#define SP_LORA_LINEAR_FIRST SP_LORA_IN_QKVZ
#define SP_LORA_N_LINEAR (SP_LORA_N_MODULES - SP_LORA_LINEAR_FIRST)

#define SP_LORA_ALL_MODULES ((1u << SP_LORA_N_MODULES) - 1u)
#define SP_LORA_MAX_RANK 4096

typedef enum sp_adapter_format {
    SP_ADAPTER_PEFT = 0,
    SP_ADAPTER_MLX,
    /* llama.cpp's LoRA GGUF: no adapter_config.json (models/lora_load.c
     * reads its metadata) */
    SP_ADAPTER_GGUF
} sp_adapter_format;

typedef struct sp_adapter_config {
    sp_adapter_format format;
    int rank;              /* 1..SP_LORA_MAX_RANK */
    double scale;          /* the factor of B·A, finite */
    unsigned targets;      /* bit per sp_lora_module the config allows */
} sp_adapter_config;

/* "q_proj" ... "down_proj", "gate", "router" or "proj",
 * "shared_expert_gate", "in_proj_qkvz" ... "out_proj" (also
 * "self_attn.q_proj", "mlp.switch_mlp.up_proj": the last dotted part
 * decides) -> module, or -1 when it is none of them. */
int sp_lora_module_from_name(const char *name);
/* "q_proj" ... "down_proj", "gate", "shared_expert_gate", "in_proj_qkvz"
 * ... "out_proj". */
const char *sp_lora_module_name(sp_lora_module m);

/* Parse `len` bytes of adapter_config.json text; `what` names the file in
 * errors. The format is mlx-lm's when the object has lora_parameters, else
 * PEFT's. */
spindle_status sp_adapter_config_parse(const char *json, size_t len,
                                       const char *what,
                                       sp_adapter_config *out,
                                       spindle_error *err);

#endif
