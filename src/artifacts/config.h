/* config.json / generation_config.json of a Hugging Face model directory,
 * parsed into the fields the engine uses. Architecture-specific keys stay
 * reachable through `json` for the family files in models/. */
#ifndef SP_ARTIFACTS_CONFIG_H
#define SP_ARTIFACTS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "spindle.h"
#include "compute/ops.h"
#include "compute/tensor.h"

#define SP_MAX_EOS 16

typedef struct sp_model_config {
    char model_type[64];
    int hidden_size;
    int n_layers;
    int intermediate_size;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int vocab_size;
    int max_position;           /* max_position_embeddings, 0 if absent */
    float rms_norm_eps;
    sp_rope_config rope;
    float *rope_long_factor;    /* owned: what rope.long_factor points to */
    bool rope_traditional;      /* mlx-lm: interleaved pairs instead of halves */
    int tie_word_embeddings;    /* 1, 0, or -1 when config.json is silent */
    bool attention_bias;
    bool mlp_bias;
    sp_dtype torch_dtype;       /* F32 when absent */
    int32_t eos_ids[SP_MAX_EOS];
    int n_eos;
    int32_t bos_id;             /* -1 if absent */

    /* "quantization" (or "quantization_config") block of MLX checkpoints. */
    bool quantized;
    int quant_bits;
    int quant_group_size;
    bool quant_mxfp4;           /* its "mode" is "mxfp4" (else affine) */

    /* The effective config object (text_config of multimodal configs merged
     * over the outer object); owned. */
    cJSON *json;
    cJSON *root;                /* the whole config.json; owned */
} sp_model_config;

/* Per-module quantization as mlx-lm decides it when loading. */
typedef enum sp_quant_rule {
    SP_QUANT_FLOAT,         /* the config says the module stays float */
    SP_QUANT_EXPLICIT,      /* the config gives bits/group_size for it */
    SP_QUANT_INFER          /* infer from tensor shapes if .scales exist */
} sp_quant_rule;

/* The rule for module_path, with the bits, group size and mode ("mxfp4":
 * *mxfp4 true; else affine) it gives: a module's own entry names its mode
 * (mlx-lm's default for one without: affine); the others take the
 * block's. An unknown mode gives bits 0, which the binder rejects. */
sp_quant_rule sp_config_quant_rule(const sp_model_config *cfg,
                                   const char *module_path, int *bits,
                                   int *group_size, bool *mxfp4);

/* Parse dir/config.json (and dir/generation_config.json when present). */
spindle_status sp_config_load(const char *dir, sp_model_config *cfg,
                              spindle_error *err);
/* Parse an already built config object (GGUF metadata translated to
 * config.json keys), taking ownership of `root` whatever the outcome.
 * `label` names the source in error messages. */
spindle_status sp_config_from_json(cJSON *root, const char *label,
                                   sp_model_config *cfg, spindle_error *err);
void sp_config_free(sp_model_config *cfg);

/* The RoPE of a scaling block `scaling` (rope_scaling's form; NULL: none)
 * with base `theta`, and the rotary dimension of cfg's head_dim and
 * partial_rotary_factor, into *out (families whose config keeps these
 * elsewhere, e.g. rope_parameters). A longrope block's factors are stored
 * in cfg (replacing any before) and live as long as it. `label` names the
 * source in error messages. */
spindle_status sp_config_parse_rope(sp_model_config *cfg,
                                    const cJSON *scaling, double theta,
                                    const char *label, sp_rope_config *out,
                                    spindle_error *err);

/* Typed getters on cfg->json with defaults; they never fail. */
int sp_config_int(const sp_model_config *cfg, const char *key, int dflt);
double sp_config_num(const sp_model_config *cfg, const char *key, double dflt);
bool sp_config_bool(const sp_model_config *cfg, const char *key, bool dflt);

/* Resolve a model argument: an existing directory, or a Hugging Face repo id
 * ("org/name") in the local HF cache (HF_HUB_CACHE, else HF_HOME/hub, else
 * ~/.cache/huggingface/hub: models--org--name/snapshots/<refs/main>).
 * Returns a malloc'd directory path. */
spindle_status sp_resolve_model_path(const char *arg, char **dir,
                                     spindle_error *err);

/* The HF cache's hub folder (HF_HUB_CACHE, else HF_HOME/hub, else
 * ~/.cache/huggingface/hub), malloc'd; NULL when none can be named. */
char *sp_hub_cache_dir(void);

#endif
