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
} sp_forward_seq;

struct sp_forward {
    spindle_model *m;
    int n_rows;               /* T */
    int n_seqs;
    sp_forward_seq *seqs;
    int *pos;                 /* [T] position of each row */
    int cap_rows, cap_seqs;   /* allocated sizes */

    /* Activations, row-major [T][width]. */
    float *x;                 /* residual stream, hidden */
    float *xn;                /* normalized input of a block, hidden */
    float *out;               /* block output, hidden */
    float *q;                 /* n_heads * head_dim */
    float *k, *v;             /* n_kv_heads * head_dim */
    float *attn;              /* n_heads * head_dim */
    float *gate, *up;         /* intermediate */

    /* The first failure of the pass (the layer hooks return nothing):
     * later layers are skipped and spindle_forward returns it. */
    spindle_status status;
    spindle_error *err;
};

/* Grow the scratch for T rows and S sequences. */
spindle_status sp_forward_reserve(sp_forward **f, spindle_model *m, int rows,
                                  int seqs, spindle_error *err);
void sp_forward_free(sp_forward *f);

/* out[t] = rmsnorm(in[t]) * w for every row (a family whose norms scale
 * by 1 + w folds the 1 into w when it binds them). */
void sp_norm_rows(sp_forward *f, const float *in, const float *w, float *out);
/* x += y over T rows of hidden width. */
void sp_add_rows(sp_forward *f, float *x, const float *y);

/* y = W x + b over all rows. */
void sp_linear_forward(sp_forward *f, const sp_linear *lin, const float *x,
                       float *y);

/* Self-attention of layer l: projections, optional per-head q/k norms, RoPE,
 * cache update, causal attention per sequence, output projection.
 * Reads f->xn, writes f->out. `softcap` 0: none. */
void sp_attention_block(sp_forward *f, int l, float scale, float softcap);

/* SwiGLU MLP: out = down(silu(gate(xn)) * up(xn)). */
void sp_mlp_swiglu(sp_forward *f, int l);
/* GeGLU MLP with tanh-approximated GELU (Gemma). */
void sp_mlp_geglu(sp_forward *f, int l);

/* The standard pre-norm decoder layer (Llama, Qwen2, Qwen3):
 *   h = x + attn(norm(x));  x' = h + mlp(norm(h)). */
void sp_prenorm_decoder_layer(sp_forward *f, int l);

/* Bind the standard Hugging Face decoder weight names of every layer:
 * model.layers.N.{input_layernorm, post_attention_layernorm,
 * self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj}; q/k/v biases when
 * `qkv_bias`; self_attn.{q,k}_norm when `qk_norm`. */
typedef struct sp_decoder_options {
    bool qkv_bias;
    bool o_bias;
    bool qk_norm;
} sp_decoder_options;

spindle_status sp_bind_decoder_layers(spindle_model *m,
                                      const sp_decoder_options *opt,
                                      spindle_error *err);

#endif
