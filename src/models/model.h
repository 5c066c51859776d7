/* The in-memory model: configuration, weight views into the mmapped files,
 * and the per-architecture hooks. Internal to libspindle.
 *
 * Ownership: the model owns its tensor set (the mappings), every f32 copy of
 * a small vector (norms, biases), its thread pool and its forward scratch.
 * sp_weight views borrow from the mappings and live as long as the model. */
#ifndef SP_MODELS_MODEL_H
#define SP_MODELS_MODEL_H

#include "spindle.h"
#include "artifacts/adapter_config.h"
#include "artifacts/config.h"
#include "artifacts/gguf_model.h"
#include "artifacts/safetensors.h"
#include "compute/ops.h"
#include "compute/tensor.h"
#include "compute/threadpool.h"
#include "runtime/seq_state.h"
#include "runtime/kv_pool.h"

/* y = W x (+ b) */
typedef struct sp_linear {
    sp_weight w;
    const float *bias;   /* NULL when the layer has none */
} sp_linear;

struct sp_moe;

/* A sequence-classification head on the first token's final row, as
 * transformers' BertForSequenceClassification (pooler, classifier) and
 * XLMRobertaForSequenceClassification (classifier.dense, out_proj) compute
 * it: an optional dense + tanh, then the n_labels logits. Bound by an
 * encoder family when its files have one (a cross-encoder reranker);
 * n_labels 0 otherwise. A decoder's: a reranker GGUF's "yes" and "no"
 * rows of the lm_head (classifier, n_labels 2; no pooler). */
typedef struct sp_cls_head {
    sp_linear pooler;     /* pooler.w.data NULL: none */
    sp_linear classifier;
    int n_labels;
    /* Separators between a pair's two texts in the family's tokenizer
     * template: BERT's one [SEP], RoBERTa's two </s>. */
    int pair_separators;
} sp_cls_head;

typedef struct sp_layer {
    /* The norms before the attention and the MLP (input_layernorm, the
     * pre-MLP norm), and after them, on the block's output before it joins
     * the residual stream (Gemma's sandwich, OLMo 2's post-norms); NULL
     * where the layer has none. */
    const float *attn_norm, *mlp_norm;
    const float *post_attn_norm, *post_mlp_norm;
    /* RMSNorm of queries and keys before RoPE: per head over head_dim
     * (Qwen3), or over the whole projection when qk_norm_full (OLMo 2). */
    const float *q_norm, *k_norm;
    bool qk_norm_full;
    /* RMSNorm without a scale of each value head before it is stored
     * (Gemma 4). */
    bool v_norm;
    bool mlp_geglu;              /* GeGLU (tanh GELU) instead of SwiGLU */
    sp_linear q, k, v, o;
    sp_linear gate, up, down;
    /* A routed-experts MLP (models/moe.h) in place of gate/up/down, owned
     * by the family data; NULL for a dense MLP. */
    const struct sp_moe *moe;
    /* Routed experts beside the dense MLP, which the family's layer runs
     * itself (Gemma 4's MoE block); owned by the family data, NULL: none. */
    const struct sp_moe *moe_beside;
    const sp_rope *rope;         /* NULL: no position encoding (NoPE) */
    /* Attention sinks: one logit per query head in each softmax's
     * denominator (gpt-oss); NULL: none. */
    const float *sinks;
    /* Llama 4 attention temperature: queries at position p are scaled by
     * 1 + attn_temp_beta * log(1 + floor(p / attn_temp_period)); 0: off. */
    float attn_temp_beta;
    int attn_temp_period;
    /* The size of this layer's heads; 0: the config's head_dim (a family
     * sets another before binding the layer: Gemma 4's global_head_dim). */
    int head_dim;
    /* Its KV heads; 0: the config's num_key_value_heads (Gemma 4's K = V
     * full-attention layers: num_global_key_value_heads). Set before
     * binding, like head_dim. */
    int n_kv_heads;
    /* Attends the keys and values layer kv_layer stores (Gemma 4's KV
     * sharing): no k/v projections, k norm or sequence state of its own. */
    bool shares_kv;
    int kv_layer;
    /* Its values are its key projection (Gemma 4's attention_k_eq_v),
     * before the key norm and RoPE: no v_proj. */
    bool v_is_k;
    /* Its dense MLP's width; 0: the config's intermediate_size (Gemma 4's
     * double-wide MLPs). Set, like head_dim, before binding. */
    int intermediate;
    /* Attention through a sliding window of this many positions (0: all).
     * Unless the family's layer_state hook says otherwise, it also gives
     * the layer's sequence state: full KV for 0, window KV otherwise. */
    int window;
} sp_layer;

typedef struct sp_forward sp_forward;

struct spindle_model;
/* Layer l's head size (sp_layer.head_dim or the config's). */
int sp_layer_head_dim(const struct spindle_model *m, int l);
/* Layer l's KV head count (sp_layer.n_kv_heads or the config's). */
int sp_layer_kv_heads(const struct spindle_model *m, int l);
/* Layer l's dense MLP width (sp_layer.intermediate or the config's). */
int sp_layer_intermediate(const struct spindle_model *m, int l);

/* What one architecture family contributes. Adding a family means one file
 * in models/ defining one of these and a line in models/registry.c; what
 * only that family knows stays in its file, behind the hooks below and
 * spindle_model.family.
 *
 * Sequence state. Each layer keeps one kind of state between forward
 * passes (runtime/seq_state.h): full KV, window KV (what a sliding window
 * still needs plus the rollback margin), recurrent (a conv window and a
 * fixed-size f32 state, e.g. gated DeltaNet's), or none. The layer_state
 * hook declares it per layer; without the hook it follows sp_layer.window.
 * Attention layers use sp_attention_block, which stores into and reads the
 * KV kinds. A recurrent layer's hook gets its sequence's state through
 * f->seqs[i].state: sp_seq_state_recurrent(state, l) is the work copy to
 * update in place token by token, sp_seq_state_checkpoint(state, l, t)
 * after new token t records it for rollback (from
 * sp_seq_state_first_checkpoint(state) on); the forward pass commits the
 * work copies only when every layer succeeded.
 *
 * Mixture-of-experts (models/moe.h): a family binds each MoE layer's
 * router and experts with sp_moe_bind into its spindle_model.family data
 * and points sp_layer.moe at it; the shared blocks then run sp_moe_block
 * in place of the dense MLP. */
typedef struct sp_arch {
    const char *model_type;
    /* llama.cpp's spelling of the family in GGUF files (tensor names,
     * metadata keys), handed to the artifacts/ GGUF reader; NULL when the
     * family has no GGUF form of its own. */
    const sp_gguf_family *gguf;
    /* An encoder (BERT): no lm_head, final norm or sequence state; the
     * family's load binds spindle_model.embed, spindle_forward refuses it
     * and spindle_embed runs its layers (models/embed.c). */
    bool encoder;
    /* A masked-diffusion family (LLaDA): every row of a forward pass
     * attends to all the other rows of its sequence in that pass, later
     * ones included (llama.cpp's causal_attn false), since a denoising
     * step reads the whole canvas at once; the model carries a mask token
     * (spindle_model_diffusion_info) and the autoregressive engine refuses
     * it (generation/diffusion.c generates). */
    bool diffusion;
    /* A diffusion family whose position i's logits predict token i + 1
     * when the file does not say (diffusion.shift_logits): Dream, as
     * llama-diffusion-cli assumes for a file without the key. */
    bool diffusion_shifted;
    /* Validate family-specific config keys and bind every weight. */
    spindle_status (*load)(spindle_model *m, spindle_error *err);
    /* Transform the residual stream f->x of all batch tokens by layer l. */
    void (*layer)(sp_forward *f, int l);

    /* Optional hooks; NULL means the plain decoder's behaviour. */
    /* The final norm's tensor (default "model.norm.weight"; LFM2's is
     * "model.embedding_norm.weight"). */
    const char *final_norm;
    /* Transform the embedding rows x[n_rows][hidden] just looked up
     * (default: used as stored). */
    void (*embed_rows)(const spindle_model *m, float *x, int n_rows);
    /* After the embeddings (f->x, f->tokens), before layer 0: what the
     * family's layers take from the whole pass (Gemma 4's per-layer
     * inputs); a failure goes to f->status (default: nothing). */
    void (*begin_layers)(sp_forward *f);
    /* Transform n logits as they leave the lm_head (default: none). */
    void (*logits)(const spindle_model *m, float *logits, size_t n);
    /* Release spindle_model.family (default: nothing to release). */
    void (*free_family)(void *family);
    /* The sequence state of layer l, called once per layer after load
     * (default: sp_layer.window > 0 ? window KV of that window : full KV,
     * with the config's KV heads and head_dim). The model checks it
     * (sp_layer_state_desc_check) and fails the load if it is invalid. */
    void (*layer_state)(const spindle_model *m, int l,
                        sp_layer_state_desc *out);
    /* The weights of layer l the family keeps outside sp_layer (in
     * spindle_model.family), for `spindle info`'s counts: up to max of its
     * matrices into out (their number returned), and in *vector_floats
     * the elements of its small float vectors (default: none). */
    int (*layer_extra)(const spindle_model *m, int l, const sp_linear **out,
                       int max, int64_t *vector_floats);
    /* Layer l's projection `mod` (a DeltaNet module, SP_LORA_LINEAR_FIRST
     * on) that the family keeps outside sp_layer, for LoRA adapters: NULL
     * when the layer has no such matrix (default: none has). */
    const sp_linear *(*lora_linear)(const spindle_model *m, int l,
                                    sp_lora_module mod);
    /* Bind the one decoder layer of target's multi-token-prediction head
     * ("mtp.layers.0.*", models/mtp.h) into head->layers[0], with the
     * family data it needs in head->family (released by free_family);
     * *norms_plus_one tells whether the files store (1 + w) norms as w:
     * on entry -1 to decide it from the target's files (a head inside
     * the target's checkpoint), or 0 / 1 as the head's own files say (a
     * companion directory). NULL: the family has no such head. */
    spindle_status (*mtp_load)(spindle_model *head, const spindle_model *target,
                               int *norms_plus_one, spindle_error *err);
} sp_arch;

struct spindle_model {
    char *dir;
    sp_model_config cfg;
    const sp_arch *arch;
    sp_tensor_set *tensors;      /* safetensors weights, or */
    sp_gguf_weights *gguf;       /* a GGUF file's (then dir is its path) */
    sp_pool *pool;

    sp_weight embed;             /* [vocab][hidden] */
    sp_linear lm_head;           /* a copy of embed's view when tied */
    bool tied;
    const float *final_norm;
    sp_cls_head cls;             /* an encoder's classification head */
    sp_layer *layers;
    sp_rope rope;                /* the rope of every layer unless the
                                    family points a layer at its own */
    bool rope_interleaved;       /* pairs (2i, 2i+1): rope_traditional, and
                                    llama.cpp's permuted Llama q/k */
    int max_context;
    sp_kv_dtype kv_type;         /* element type of every sequence's cache */
    sp_layer_state_desc *state_desc; /* [n_layers] each layer's state kind */
    int max_rollback;            /* tokens truncation is guaranteed back */
    sp_kv_pool *kv_pool;         /* the full-KV blocks of every sequence */
    size_t kv_budget;            /* bytes it was sized for */

    /* What only the family knows (its per-model and per-layer data),
     * allocated by arch->load and released by arch->free_family. */
    void *family;

    /* f32 vectors copied out of the files (norm weights, biases). */
    float **owned;
    int n_owned, cap_owned;

    sp_forward *fwd;             /* reusable forward scratch */

    /* Where multimodal checkpoints keep the language model (decided by
     * the files): a tensor name or quantization path that starts with
     * tensor_prefix_from has that start replaced by tensor_prefix. mlx-lm
     * writes it under "language_model." (from "": every name prefixed),
     * transformers' *ForConditionalGeneration under
     * "model.language_model." (from "model.": lm_head stays at the top).
     * Both empty otherwise (sp_model_file_name). */
    char tensor_prefix[32];
    char tensor_prefix_from[8];

    /* spindle_model_fingerprint's value once computed ("" before), under
     * the lock of model_fingerprint.c. */
    char fingerprint[33];
};

struct spindle_seq {
    spindle_model *model;
    sp_seq_state *state;
};

/* Whether spindle_seq_snapshot_restore would take snap into seq (its
 * model, layers, cache type and length), without restoring; the error
 * restore would give (models/sequence.c). */
spindle_status sp_seq_snapshot_check(const spindle_seq *seq,
                                     const spindle_seq_snapshot *snap,
                                     spindle_error *err);

/* Fill m->state_desc from the layer_state hook or sp_layer.window, and
 * check it (models/sequence.c). */
spindle_status sp_model_init_state_desc(spindle_model *m, spindle_error *err);
/* Create m->kv_pool for the options' kv_bytes (0: the default budget,
 * what fits beside the weights in available memory) and its disk tier when
 * they name a prompt cache directory (models/kv_budget.c). */
spindle_status sp_model_init_kv_pool(spindle_model *m,
                                     const spindle_load_options *options,
                                     spindle_error *err);

/* A forward pass up to the last layer: f->x holds every row's output
 * (before the final norm), nothing is committed to the sequences. Runs in
 * *fwd (grown as needed), on the pool (*fwd)->pool. spindle_forward is this
 * plus the logits and the commit; spindle_embed reads the rows. */
spindle_status sp_forward_layers(spindle_model *m, sp_forward **fwd,
                                 spindle_batch_entry *e, int n,
                                 spindle_error *err);
/* sp_forward_layers in two halves: the checks, the scratch and each row's
 * embedding in f->x (a head that builds its own input rows, models/mtp.c,
 * replaces them in between), then the layers. */
spindle_status sp_forward_prepare(spindle_model *m, sp_forward **fwd,
                                  spindle_batch_entry *e, int n,
                                  spindle_error *err);
spindle_status sp_forward_run_layers(spindle_model *m, sp_forward *f);
/* After the layers: each entry's hidden rows (when asked for), its logits
 * (m->final_norm, m->lm_head), and the commit of every sequence. */
void sp_forward_finish(spindle_model *m, sp_forward *f, spindle_batch_entry *e,
                       int n);

/* ---- weight binding helpers (models/weights.c) ---- */

/* A tensor by Hugging Face name in whichever files the model came from. */
const sp_tensor_info *sp_model_find_tensor(const spindle_model *m,
                                           const char *name);
/* The name the files give the model's tensor `name` (tensor_prefix), and
 * back: the model's name of the files' tensor `file_name` (false: not
 * under the prefix). False too when it does not fit in buf[n]. */
bool sp_model_file_name(const spindle_model *m, const char *name, char *buf,
                        size_t n);
bool sp_model_own_name(const spindle_model *m, const char *file_name,
                       char *buf, size_t n);
size_t sp_model_tensor_count(const spindle_model *m);

/* Bind `<prefix>.weight` (float or MLX affine, per the config's rules and
 * the tensor shapes) as a [rows x cols] matrix, and `<prefix>.bias` when
 * present (required if `need_bias`). */
spindle_status sp_bind_linear(spindle_model *m, const char *prefix,
                              int64_t rows, int64_t cols, bool need_bias,
                              sp_linear *out, spindle_error *err);
/* One matrix stored as several along its rows (fused projections:
 * qkv_proj, gate_up_proj), each part a view of its own rows, with the
 * matching slice of the bias. Every storage type keeps rows independent
 * (float, MLX affine rows with their own scales, GGML rows of blocks), so
 * nothing is copied. */
spindle_status sp_bind_linear_parts(spindle_model *m, const char *prefix,
                                    int n_parts, const int64_t *rows,
                                    int64_t cols, bool need_bias,
                                    sp_linear *const *out,
                                    spindle_error *err);
/* Bind a stacked tensor `<prefix>.weight` of n matrices [n][rows][cols]
 * (float; MLX affine with 3-D weight, scales and biases; or a GGUF block
 * type) as n views into it, out[i].w (no copy), and `<prefix>.bias`
 * [n][rows] when present (required if `need_bias`). */
spindle_status sp_bind_stacked_linear(spindle_model *m, const char *prefix,
                                      int64_t n, int64_t rows, int64_t cols,
                                      bool need_bias, sp_linear *out,
                                      spindle_error *err);
/* Copy a float vector of n elements to an owned f32 array. */
spindle_status sp_bind_vector(spindle_model *m, const char *name, int64_t n,
                              const float **out, spindle_error *err);
/* Like sp_bind_vector, but *out = NULL when the tensor is absent. */
spindle_status sp_bind_vector_opt(spindle_model *m, const char *name,
                                  int64_t n, const float **out,
                                  spindle_error *err);
/* Copy a float tensor of rows * cols elements, [rows][cols] up to any
 * dimensions of 1 (a depthwise Conv1d weight: MLX [C, K, 1], Hugging Face
 * [C, 1, K], GGUF [C, K]), to an owned f32 array. */
spindle_status sp_bind_float_matrix(spindle_model *m, const char *name,
                                    int64_t rows, int64_t cols,
                                    const float **out, spindle_error *err);
/* The norm weight w (n floats, an owned copy bound from `name`) becomes
 * 1 + w, rounded to the tensor's dtype as mlx-lm computes it, for the
 * (1 + w) RMSNorms of Gemma and of the Qwen3-Next family's Hugging Face
 * checkpoints. Nothing for a GGUF model: llama.cpp's converter stores the
 * weights with the 1 added. */
void sp_fold_norm_plus_one(spindle_model *m, const char *name, const float *w,
                           int n);
/* Embedding table, final norm and (tied or separate) lm_head, HF names. */
spindle_status sp_bind_embeddings_and_head(spindle_model *m,
                                           spindle_error *err);

/* ---- registry (models/registry.c) ---- */
const sp_arch *sp_find_arch(const char *model_type);
/* "llama, qwen2, qwen3" for error messages */
const char *sp_supported_archs(void);

#endif
