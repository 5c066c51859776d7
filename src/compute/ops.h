/* Element-wise and per-row operations of the transformer blocks. All work on
 * f32 activations. */
#ifndef SP_COMPUTE_OPS_H
#define SP_COMPUTE_OPS_H

#include <stdint.h>

#include "compute/threadpool.h"
#include "spindle.h"

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * (weight_offset + w[i]).
 * w may be NULL (no scale). weight_offset is 0 for Llama/Qwen and 1 for
 * Gemma's (1 + w) norms. out may alias x. */
void sp_rmsnorm(float *out, const float *x, const float *w, int n, float eps,
                float weight_offset);

/* gate[i] = silu(gate[i]) * up[i] */
void sp_silu_mul(float *gate, const float *up, int n);
/* gate[i] = gelu_tanh(gate[i]) * up[i] (Gemma's GeGLU) */
void sp_gelu_tanh_mul(float *gate, const float *up, int n);
/* x[i] = gelu(x[i]) with the exact erf form (BERT's "gelu") */
void sp_gelu_erf(float *x, int n);
/* out = (x - mean) / sqrt(var + eps) * w + b, the biased variance as
 * torch's LayerNorm takes it; out may alias x. */
void sp_layernorm(float *out, const float *x, const float *w, const float *b,
                  int n, float eps);

/* In-place numerically stable softmax. */
void sp_softmax(float *x, int n);
/* In-place log-softmax. */
void sp_log_softmax(float *x, int n);

/* ---- rotary position embedding (Hugging Face rotate-half convention) ---- */

typedef enum sp_rope_type {
    SP_ROPE_DEFAULT = 0,
    SP_ROPE_LINEAR,
    SP_ROPE_LLAMA3,
    SP_ROPE_YARN,
    SP_ROPE_LONGROPE,      /* Phi-3's "longrope" / "su" */
    /* Gemma 4's "proportional": pairs (i, i + rotary_dim/2) over the whole
     * rotary_dim, the first rotated_dim/2 of them at the default
     * frequencies of rotary_dim divided by factor, the rest not rotated. */
    SP_ROPE_PROPORTIONAL
} sp_rope_type;

typedef struct sp_rope_config {
    sp_rope_type type;
    int rotary_dim;        /* dimensions rotated (head_dim unless partial) */
    double theta;          /* rope_theta */
    double factor;         /* linear / llama3 / yarn scaling factor */
    /* llama3 */
    double low_freq_factor, high_freq_factor;
    int original_max_position;
    /* yarn */
    double beta_fast, beta_slow;
    double mscale, mscale_all_dim; /* 0 when absent */
    double attention_factor;       /* 0 when absent: derived */
    /* longrope: rotary_dim / 2 divisors of the frequencies (borrowed; read
     * only by sp_rope_init), and `factor` is the context extension
     * max_position / original_max_position. */
    const float *long_factor;
    /* proportional: the dimensions that do rotate (even, <= rotary_dim) */
    int rotated_dim;
} sp_rope_config;

typedef struct sp_rope {
    int rotary_dim;
    float *inv_freq;       /* rotary_dim / 2 entries, owned */
    float attn_scale;      /* multiplies cos and sin (yarn), 1 otherwise */
} sp_rope;

/* Compute inv_freq for the scaling type exactly as transformers'
 * ROPE_INIT_FUNCTIONS do. Returns 0 on success, -1 on allocation failure. */
int sp_rope_init(sp_rope *rope, const sp_rope_config *cfg);
void sp_rope_free(sp_rope *rope);

/* Rotate `n_heads` heads of `head_dim` floats (contiguous) at position pos:
 * pairs (i, i + rotary_dim/2) for i < rotary_dim/2; dims >= rotary_dim are
 * untouched. */
void sp_rope_apply(const sp_rope *rope, float *x, int n_heads, int head_dim,
                   int pos);
/* The same rotation on interleaved pairs (2i, 2i + 1), i < rotary_dim/2
 * (mlx-lm's rope_traditional, llama.cpp's rope mode 0). */
void sp_rope_apply_interleaved(const sp_rope *rope, float *x, int n_heads,
                               int head_dim, int pos);

/* ---- attention over a KV cache ---- */

/* Element type of a KV cache; the same values as spindle_kv_type. */
typedef enum sp_kv_dtype {
    SP_KV_F32 = 0,
    SP_KV_BF16,  /* upper half of an f32 */
    SP_KV_F16    /* IEEE binary16 */
} sp_kv_dtype;

/* Keys and values of one layer of one sequence, elements of `type`:
 * position pos >= first_key_pos is at
 * k[h * head_stride + (pos - first_key_pos) * head_dim + d], same for v,
 * h < n_kv_heads. A sliding-window cache drops old positions, so its view
 * starts later than position 0. Attention reads them as f32 (bf16/f16
 * widen exactly). */
typedef struct sp_kv_view {
    const void *k;
    const void *v;
    int64_t head_stride;  /* in elements */
    sp_kv_dtype type;
    int first_key_pos;    /* position of the first row (0: a full cache) */
    /* Paged (a block pool): position p is row (p - first_key_pos) %
     * block_rows of block blocks[(p - first_key_pos) / block_rows], whose
     * head h starts at element blocks[i] * block_stride + h * head_stride
     * of k / v. NULL blocks: one linear block (row r of head h at
     * h * head_stride + r * head_dim). */
    const int32_t *blocks;
    int block_rows;
    int n_blocks;
    int64_t block_stride;  /* in elements */
} sp_kv_view;

/* Element offset of the row of KV head h at position pos in a view, and in
 * *run how many rows follow it contiguously (to the end of its block). */
static inline int64_t sp_kv_view_row(const sp_kv_view *v, int h, int pos,
                                     int head_dim, int *run) {
    const int r = pos - v->first_key_pos;
    if (!v->blocks) {
        *run = 1 << 30;
        return (int64_t)h * v->head_stride + (int64_t)r * head_dim;
    }
    const int in_block = r % v->block_rows;
    *run = v->block_rows - in_block;
    return (int64_t)v->blocks[r / v->block_rows] * v->block_stride +
           (int64_t)h * v->head_stride + (int64_t)in_block * head_dim;
}

/* Causal (or, with `bidirectional`, full) grouped-query attention for n_q
 * consecutive query tokens of one
 * sequence, at positions first_pos .. first_pos + n_q - 1, whose keys and
 * values are already in the cache. q and out: [n_q][n_heads * head_dim].
 * Query head h reads KV head h / (n_heads / n_kv_heads). Token at position p
 * attends to positions max(0, p - window + 1) .. p (window <= 0: no limit).
 * scores = scale * q.k (+ softcap if > 0: cap * tanh(s / cap)). With
 * `sinks` (gpt-oss), query head h's softmax has one more logit, sinks[h],
 * in its denominator only: weights exp(s_j) / (exp(sinks[h]) +
 * sum_j exp(s_j)). */
typedef struct sp_attention_args {
    const float *q;
    float *out;
    int n_q;
    int first_pos;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    sp_kv_view kv;
    float scale;
    int window;
    float softcap;
    const float *sinks;   /* [n_heads] or NULL: none */
    /* Every query attends to every key of the view up to the last query's
     * position, its own later ones included (encoders; window ignored). */
    bool bidirectional;
    /* NULL, or [n_q]: query t also sees the ahead[t] queries after it (a
     * bidirectional span of a causal sequence: its rows see each other),
     * ahead[t] <= n_q - 1 - t (portable path only). */
    const int *ahead;
} sp_attention_args;

/* Fails with SPINDLE_ERR_ARGUMENT (a one-line message in err), writing
 * nothing, when the arguments are inconsistent: NULL buffers, non-positive
 * sizes, n_heads not a multiple of n_kv_heads, a negative first_pos, an
 * unknown cache type, positions past the cache (head_stride), or a first
 * query that needs keys before kv.first_key_pos. */
spindle_status sp_attention(sp_pool *pool, const sp_attention_args *args,
                            spindle_error *err);

/* Multi-head latent attention's absorbed form (attention_latent.c): the
 * n_heads query heads of args (head_dim each) attend the rows of one KV
 * head (n_kv_heads 1, kv.k paged; kv.v is not read), whose first v_dim
 * elements are also the values; out is [n_q][n_heads][v_dim]. Causal
 * only: no window, sinks, soft-capping or bidirectional rows
 * (SPINDLE_ERR_UNSUPPORTED). Each query token reads its rows once for all
 * heads. `partials` holds sp_attention_latent_partials(args, v_dim)
 * floats of per-unit state; the bits do not depend on the thread count. */
size_t sp_attention_latent_partials(const sp_attention_args *args,
                                    int v_dim);
spindle_status sp_attention_latent(sp_pool *pool,
                                   const sp_attention_args *args, int v_dim,
                                   float *partials, spindle_error *err);

#endif
