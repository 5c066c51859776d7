/* The in-memory model: configuration, weight views into the mmapped files,
 * and the per-architecture hooks. Internal to libspindle.
 *
 * Ownership: the model owns its tensor set (the mappings), every f32 copy of
 * a small vector (norms, biases), its thread pool and its forward scratch.
 * sp_weight views borrow from the mappings and live as long as the model. */
#ifndef SP_MODELS_MODEL_H
#define SP_MODELS_MODEL_H

#include "spindle.h"
#include "artifacts/config.h"
#include "artifacts/gguf_model.h"
#include "artifacts/safetensors.h"
#include "compute/ops.h"
#include "compute/tensor.h"
#include "compute/threadpool.h"
#include "runtime/kv_cache.h"

/* y = W x (+ b) */
typedef struct sp_linear {
    sp_weight w;
    const float *bias;   /* NULL when the layer has none */
} sp_linear;

typedef struct sp_layer {
    const float *attn_norm;      /* input_layernorm */
    const float *mlp_norm;       /* post_attention_layernorm (Llama naming) */
    const float *q_norm, *k_norm;/* per-head RMSNorm over head_dim (Qwen3) */
    /* Gemma's sandwich norms on the block outputs (NULL elsewhere); Gemma
     * binds pre_feedforward_layernorm as mlp_norm. */
    const float *post_attn_norm, *post_mlp_norm;
    sp_linear q, k, v, o;
    sp_linear gate, up, down;
    const sp_rope *rope;
    int window;                  /* sliding-window size, 0: full attention */
} sp_layer;

typedef struct sp_forward sp_forward;

/* What one architecture family contributes. Adding a family means one file
 * in models/ defining one of these and a line in models/registry.c. */
typedef struct sp_arch {
    const char *model_type;
    /* Validate family-specific config keys and bind every weight. */
    spindle_status (*load)(spindle_model *m, spindle_error *err);
    /* Transform the residual stream f->x of all batch tokens by layer l. */
    void (*layer)(sp_forward *f, int l);
} sp_arch;

struct spindle_model {
    char *dir;
    sp_model_config cfg;
    const sp_arch *arch;
    sp_tensor_set *tensors;      /* safetensors weights, or */
    sp_gguf_weights *gguf;       /* a GGUF file's (then dir is its path) */
    sp_pool *pool;

    sp_weight embed;             /* [vocab][hidden] */
    float embed_scale;           /* multiplies embeddings (1 but Gemma) */
    sp_linear lm_head;           /* a copy of embed's view when tied */
    bool tied;
    const float *final_norm;
    float norm_offset;           /* 0, or 1 for Gemma's (1 + w) norms */
    float attn_scale;            /* family-specific score scale (Gemma) */
    float attn_softcap;          /* 0: none */
    float final_logit_softcap;   /* 0: none; logits = cap * tanh(l / cap) */
    sp_layer *layers;
    sp_rope rope;                /* global rope */
    sp_rope rope_local;          /* sliding-window layers' rope (Gemma) */
    bool rope_interleaved;       /* pairs (2i, 2i+1): rope_traditional, and
                                    llama.cpp's permuted Llama q/k */
    int max_context;
    sp_kv_dtype kv_type;         /* element type of every sequence's cache */

    /* f32 vectors copied out of the files (norm weights, biases). */
    float **owned;
    int n_owned, cap_owned;

    sp_forward *fwd;             /* reusable forward scratch */
};

struct spindle_seq {
    spindle_model *model;
    sp_kv_cache cache;
};

/* ---- weight binding helpers (models/weights.c) ---- */

/* A tensor by Hugging Face name in whichever files the model came from. */
const sp_tensor_info *sp_model_find_tensor(const spindle_model *m,
                                           const char *name);
size_t sp_model_tensor_count(const spindle_model *m);

/* Bind `<prefix>.weight` (float or MLX affine, per the config's rules and
 * the tensor shapes) as a [rows x cols] matrix, and `<prefix>.bias` when
 * present (required if `need_bias`). */
spindle_status sp_bind_linear(spindle_model *m, const char *prefix,
                              int64_t rows, int64_t cols, bool need_bias,
                              sp_linear *out, spindle_error *err);
/* Copy a float vector of n elements to an owned f32 array. */
spindle_status sp_bind_vector(spindle_model *m, const char *name, int64_t n,
                              const float **out, spindle_error *err);
/* Like sp_bind_vector, but *out = NULL when the tensor is absent. */
spindle_status sp_bind_vector_opt(spindle_model *m, const char *name,
                                  int64_t n, const float **out,
                                  spindle_error *err);
/* Embedding table, final norm and (tied or separate) lm_head, HF names. */
spindle_status sp_bind_embeddings_and_head(spindle_model *m,
                                           spindle_error *err);

/* ---- registry (models/registry.c) ---- */
const sp_arch *sp_find_arch(const char *model_type);
/* "llama, qwen2, qwen3" for error messages */
const char *sp_supported_archs(void);

#endif
