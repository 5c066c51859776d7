/* Shared transformer building blocks over a batch of tokens.
 *
 * A forward pass flattens every sequence's new tokens into T rows; matrix
 * products run once over all T rows (weights are read once per pass), while
 * attention runs per sequence against that sequence's own state. */
#ifndef SP_MODELS_BLOCKS_H
#define SP_MODELS_BLOCKS_H

#include "models/model.h"

/* One sequence's slice of the flattened batch. */
typedef struct sp_forward_seq {
    sp_seq_state *state;  /* reserved for n_rows new tokens */
    int first_row;      /* index of its first token among the T rows */
    int n_rows;
    int first_pos;      /* position of its first new token */
    /* Its LoRA adapter (NULL: none) and the factor on the adapter's own
     * scale (models/lora.h). */
    const struct spindle_adapter *adapter;
    float adapter_scale;
    bool sees_ahead;    /* some row is in a bidirectional span (f->ahead) */
} sp_forward_seq;

struct sp_forward {
    spindle_model *m;
    sp_pool *pool;            /* the kernels' threads (the model's unless
                                 the owner of this scratch has its own) */
    int n_rows;               /* T */
    int n_seqs;
    sp_forward_seq *seqs;
    int *pos;                 /* [T] position of each row */
    int32_t *tokens;          /* [T] token id of each row */
    /* [T] an encoder's segment of each row (BERT's token_type_ids: 0 the
     * first text of a pair, 1 the second); NULL: all 0. Set by the caller
     * between sp_forward_prepare and sp_forward_run_layers. */
    const int32_t *token_types;
    /* [T] each row's prefix-index key (0: a token; an embeddings span's
     * row: sp_span_position_key) and its span's SPINDLE_SPAN_* flags. */
    uint64_t *keys;
    uint32_t *row_flags;
    int *ahead;               /* [T] the later rows of its own sequence a
                                 row attends to (its bidirectional span's) */
    bool any_span;            /* some row came from an embeddings span */
    int cap_rows, cap_seqs;   /* allocated sizes */

    /* Activations, row-major [T][width]. */
    float *x;                 /* residual stream, hidden */
    float *xn;                /* normalized input of a block, hidden */
    float *out;               /* block output, hidden */
    float *q;                 /* n_heads * head_dim */
    float *k, *v;             /* n_kv_heads * head_dim */
    float *attn;              /* n_heads * head_dim */
    float *gate, *up;         /* intermediate */
    struct sp_moe_scratch *moe; /* sp_moe_block's, NULL until needed */
    /* A family's own per-pass rows (Gemma 4's per-layer inputs), grown by
     * sp_forward_family_rows. */
    float *family_rows;
    size_t family_cap;
    /* A family's own per-pass scratch (the hybrid families' DeltaNet
     * rows), created by the family's forward on first use and released
     * with the pass by family_scratch_free. Model data is read-only during
     * a pass: whatever a pass writes lives here or in the sequences. */
    void *family_scratch;
    void (*family_scratch_free)(void *scratch);
    bool any_adapter;         /* some sequence has a LoRA adapter */
    struct sp_lora_scratch *lora; /* sp_lora_apply's, NULL until needed */

    /* The first failure of the pass (the layer hooks return nothing):
     * later layers are skipped and spindle_forward returns it. */
    spindle_status status;
    spindle_error *err;
};

/* Grow the scratch for T rows and S sequences. */
spindle_status sp_forward_reserve(sp_forward **f, spindle_model *m, int rows,
                                  int seqs, spindle_error *err);
void sp_forward_free(sp_forward *f);
/* f->family_rows with room for n floats; false when out of memory. */
bool sp_forward_family_rows(sp_forward *f, size_t n);

/* out[t] = rmsnorm(in[t]) * w for every row (a family whose norms scale
 * by 1 + w folds the 1 into w when it binds them). */
void sp_norm_rows(sp_forward *f, const float *in, const float *w, float *out);
/* x += y over T rows of hidden width. */
void sp_add_rows(sp_forward *f, float *x, const float *y);

/* y = W x + b over all rows, plus the LoRA terms of each sequence's
 * adapter when lin is one of a layer's projections (models/lora.h). */
void sp_linear_forward(sp_forward *f, const sp_linear *lin, const float *x,
                       float *y);
/* The same over n rows of x ([n][cols] -> [n][rows]). */
void sp_linear_rows(sp_pool *pool, const sp_linear *lin, const float *x,
                    int n, float *y);

/* Self-attention of layer l: projections, optional per-head q/k norms, RoPE,
 * cache update, causal attention per sequence, output projection.
 * Reads f->xn, writes f->out. `softcap` 0: none. */
void sp_attention_block(sp_forward *f, int l, float scale, float softcap);
/* The block between the projections: q/k norms and RoPE on f->q and f->k
 * (T rows, already projected), the keys and values into each sequence's
 * state, attention into f->attn. For families that project or gate
 * differently (Qwen3-Next's gated attention). */
void sp_attention_core(sp_forward *f, int l, float scale, float softcap);

/* A recurrent layer's work on rows row0 .. row0 + n - 1 of one sequence,
 * continuing that sequence's state rs. */
typedef spindle_status (*sp_recurrent_run_fn)(sp_forward *f, void *ctx,
                                              const sp_recurrent_state *rs,
                                              int row0, int n);
/* Recurrent layer l (SP_STATE_RECURRENT) over every sequence of the pass:
 * one run up to the sequence's first checkpoint, then one token at a time,
 * each followed by its checkpoint, so that truncation back to any of them
 * restores that state exactly. The first failure goes to f->status. */
void sp_recurrent_runs(sp_forward *f, int l, sp_recurrent_run_fn run,
                       void *ctx);

/* SwiGLU MLP: out = down(silu(gate(xn)) * up(xn)). */
void sp_mlp_swiglu(sp_forward *f, int l);
/* GeGLU MLP with tanh-approximated GELU (Gemma). */
void sp_mlp_geglu(sp_forward *f, int l);

/* The scalars of one decoder layer's math. */
typedef struct sp_layer_scales {
    float attn;          /* attention score scale (usually head_dim^-0.5) */
    float attn_softcap;  /* 0: none */
    float residual;      /* multiplies each block's output (Granite) */
} sp_layer_scales;

/* The decoder layer every family here shares, shaped by the layer's own
 * norms (sp_layer: pre-norms, post-norms, both or neither) and MLP kind:
 *   h  = x + residual * post_attn_norm(attn(attn_norm(x)))
 *   x' = h + residual * post_mlp_norm(mlp(mlp_norm(h)))
 * where an absent norm is the identity. */
void sp_decoder_layer(sp_forward *f, int l, const sp_layer_scales *s);
/* Its first half, h above, for a family whose MLP half is its own. */
void sp_decoder_attention(sp_forward *f, int l, const sp_layer_scales *s);

/* The standard decoder layer: the above with scale head_dim^-0.5 and
 * residual 1, over the layer's own norms (pre-norms in Llama, Qwen2,
 * Qwen3; post-norms in OLMo 2); the MLP is the layer's routed experts
 * when sp_layer.moe is set (Qwen3-MoE). */
void sp_prenorm_decoder_layer(sp_forward *f, int l);

/* Which norms a layer has, under their Hugging Face names. */
typedef enum sp_norm_layout {
    /* input_layernorm before attention, post_attention_layernorm before
     * the MLP (Llama) */
    SP_NORMS_PRE = 0,
    /* input_layernorm, post_attention_layernorm (on the attention output),
     * pre_feedforward_layernorm, post_feedforward_layernorm (Gemma) */
    SP_NORMS_SANDWICH,
    /* only post_attention_layernorm and post_feedforward_layernorm, on the
     * blocks' outputs (OLMo 2) */
    SP_NORMS_POST
} sp_norm_layout;

/* Bind the Hugging Face decoder weights of every layer:
 * model.layers.N.{norms per `norms`, self_attn.{q,k,v,o}_proj,
 * mlp.{gate,up,down}_proj}, every layer's rope the model's; q/k/v biases
 * when `qkv_bias`, o's when `o_bias`; self_attn.{q,k}_norm over head_dim
 * when `qk_norm`, over the whole projection when `qk_norm_full`;
 * self_attn.qkv_proj (q, k, v rows in that order) when `fused_qkv`, and
 * mlp.gate_up_proj (gate rows, then up) when `fused_gate_up`. */
typedef struct sp_decoder_options {
    bool qkv_bias;
    bool o_bias;
    bool qk_norm;
    bool qk_norm_full;
    bool fused_qkv;
    bool fused_gate_up;
    bool geglu;
    sp_norm_layout norms;
    /* [n_layers], or NULL: layers whose MLP the family binds itself (its
     * MoE layers); their mlp.* dense weights are not looked up. */
    const bool *own_mlp;
} sp_decoder_options;

spindle_status sp_bind_decoder_layers(spindle_model *m,
                                      const sp_decoder_options *opt,
                                      spindle_error *err);

/* ---- family config values (one-line errors naming config.json) ---- */

/* config.json `key` as a positive finite number; absent or null gives
 * `dflt`, or the error that the family needs it when dflt is NAN. */
spindle_status sp_model_positive(spindle_model *m, const char *key,
                                 double dflt, double *out,
                                 spindle_error *err);

/* Which layers are of `kind`: those `layer_types` (newer transformers
 * configs) lists as `kind` rather than "full_attention" (any other entry,
 * or a list of another length, fails naming it), or without that list
 * every layer but each pattern-th (pattern 0: none). is_kind[n_layers]. */
spindle_status sp_model_layer_kinds(spindle_model *m, const char *kind,
                                    int pattern, bool *is_kind,
                                    spindle_error *err);
/* config.json `key` as an integer in [lo, hi]; absent or null gives
 * `dflt`, or the error that the family needs it when `required`. */
spindle_status sp_model_int(const spindle_model *m, const char *key,
                            bool required, int dflt, int lo, int hi, int *out,
                            spindle_error *err);

/* Sliding-window layers: those `layer_types` lists as
 * "sliding_attention", or without that list every layer but each
 * pattern-th (pattern 0: none). They attend through config.json's
 * sliding_window (absent: window_dflt; NAN: required when some layer
 * slides) and, when sliding_rope is not NULL, rotate with it. Call after
 * binding the layers. */
spindle_status sp_model_sliding_layers(spindle_model *m, int pattern,
                                       double window_dflt,
                                       const sp_rope *sliding_rope,
                                       spindle_error *err);

/* ---- the Gemma families' shared pieces (gemma3.c, gemma4.c) ---- */

/* The start of a Gemma family's spindle_model.family data, which the two
 * hooks below read: embeddings times embed_scale, and logits
 * cap * tanh(l / cap) when final_softcap > 0. */
typedef struct sp_gemma_io {
    float embed_scale;
    float final_softcap;
} sp_gemma_io;

void sp_gemma_embed_rows(const spindle_model *m, float *x, int n_rows);
void sp_gemma_logits(const spindle_model *m, float *logits, size_t n);
/* Gemma's head_dim is not hidden / heads, and mlx-lm's default (256)
 * differs from the generic derivation: config.json must state it. */
spindle_status sp_gemma_check_head_dim(const spindle_model *m,
                                       spindle_error *err);

/* A diffusion family's load: fails unless config's mask_token_id is in
 * the vocabulary (models/llada.c). */
spindle_status sp_diffusion_check_mask(const spindle_model *m, spindle_error *err);

#endif
