/* Linear attention of the hybrid models (Qwen3-Next, Qwen3.5): the short
 * causal convolution over q/k/v, the gated delta rule that replaces softmax
 * attention, and the gated RMSNorm on its output, each as mlx-lm computes it
 * (mlx_lm/models/gated_delta.py, qwen3_next.py).
 *
 * One linear-attention layer of one sequence, T new tokens:
 *   x = in_proj(h)                     q | k | v rows, and z, a, b
 *   x = silu(conv1d(window ++ x))      sp_conv1d_silu (window: last K-1 rows)
 *   q, k = l2norm(q, k), q *= Dk^-1/2  sp_gated_delta_prepare, which also
 *   log_g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)
 *   y = delta_rule(q, k, v, log_g, beta; state)      sp_gated_delta
 *   y = rmsnorm(y) * silu(z) per value head          sp_rmsnorm_gated
 *
 * Everything is f32. The state of a value head is S[Dv][Dk] (mlx-lm's
 * [B, Hv, Dv, Dk] and llama.cpp's layout); per token t
 *   S = g_t S;  S += beta_t (v_t - S k_t) k_t^T;  y_t = S q_t.
 * Value head h reads key head h / (Hv / Hk) (mlx-lm's repeat of q and k),
 * or h % Hk where the value heads are tiled (llama.cpp's qwen35 GGUF). */
#ifndef SP_COMPUTE_LINEAR_ATTENTION_H
#define SP_COMPUTE_LINEAR_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/threadpool.h"
#include "spindle.h"

/* Tokens per chunk of the chunked delta rule (llama.cpp's CS for a scalar
 * gate, fla's chunk_gated_delta_rule default). */
#define SP_DELTA_CHUNK 64

/* ---- causal depthwise convolution ---- */

/* out[t][c] = silu(sum_j w_t[j][c] * in[t + j][c]), j < kernel, over the
 * rows in = window (kernel - 1 rows, oldest first) followed by x (T rows):
 * mlx-lm's Conv1d(groups = channels, padding 0, no bias) over the
 * concatenation of its conv state and the new rows, then SiLU. Afterwards
 * `window` holds the last kernel - 1 rows of that concatenation. The
 * weights are transposed from the files' [channels][kernel] to
 * [kernel][channels], so that every product runs along the channels.
 *
 * window_snapshots[i] (n_snapshots <= T of them, [kernel-1][channels]
 * each) receives the window as it stands after token T - n_snapshots + i,
 * for rolling the sequence back to that point.
 *
 * sp_conv1d is the same convolution plus `bias` and without the SiLU
 * (LFM2's short convolution, whose gates are outside it). */
typedef struct sp_conv1d_args {
    int n_tokens;            /* T >= 1 */
    int channels;
    int kernel;              /* >= 1; window has kernel - 1 rows */
    const float *x;          /* row t at x + t * x_stride */
    int64_t x_stride;
    const float *w_t;        /* [kernel][channels] */
    float *window;           /* [kernel - 1][channels], updated */
    float *out;              /* row t at out + t * out_stride; no alias of
                                x or window */
    int64_t out_stride;
    float *const *window_snapshots;
    int n_snapshots;
    const float *bias;       /* [channels] or NULL; sp_conv1d only */
} sp_conv1d_args;

/* Fails with SPINDLE_ERR_ARGUMENT (one line, nothing written) on NULL
 * buffers, non-positive sizes, strides below channels, or a bad snapshot
 * count. Parallel over channel blocks. */
spindle_status sp_conv1d_silu(sp_pool *pool, const sp_conv1d_args *args,
                              spindle_error *err);
spindle_status sp_conv1d(sp_pool *pool, const sp_conv1d_args *args,
                         spindle_error *err);

/* ---- inputs of the delta rule ---- */

/* In place, for T rows: every key head of q and k is L2-normalized and q is
 * scaled by Dk^-1/2, exactly as mlx-lm's normalize_qk (an RMSNorm with eps
 * 1e-6 / Dk, times Dk^-1 for q and Dk^-1/2 for k); and for every value head
 * log_g = a_scale * softplus(a + dt_bias) with a_scale = -exp(A_log) (the
 * log of mlx-lm's compute_g; llama.cpp stores a_scale as ssm_a),
 * beta = sigmoid(b), written over a and b. */
typedef struct sp_delta_prepare_args {
    int n_tokens;
    int n_k_heads, k_dim;
    float *q, *k;            /* key head h of row t at q + t * qk_stride +
                                h * k_dim */
    int64_t qk_stride;
    int n_v_heads;
    float *a;                /* [T][n_v_heads]: in a, out log_g */
    float *b;                /* [T][n_v_heads]: in b, out beta */
    const float *a_scale;    /* [n_v_heads]: -exp(A_log) */
    const float *dt_bias;    /* [n_v_heads] */
} sp_delta_prepare_args;

void sp_gated_delta_prepare(const sp_delta_prepare_args *args);

/* ---- the gated delta rule ---- */

typedef enum sp_delta_form {
    SP_DELTA_AUTO = 0,       /* chunked for runs of two or more tokens */
    SP_DELTA_RECURRENT,      /* token by token (tests) */
    SP_DELTA_CHUNKED         /* chunks of SP_DELTA_CHUNK tokens (tests) */
} sp_delta_form;

/* T tokens of one sequence through every value head, continuing from (and
 * updating) `state`. The chunked form (the WY form of fla's
 * chunk_gated_delta_rule and llama.cpp's build_delta_net_chunking) agrees
 * with the recurrent one to f32 rounding. With n_snapshots > 0 the last
 * n_snapshots tokens run recurrently and snapshots[i] ([Hv][Dv][Dk])
 * receives the state after token T - n_snapshots + i. */
typedef struct sp_gated_delta_args {
    int n_tokens;            /* T >= 1 */
    int n_k_heads, n_v_heads;/* n_v_heads a multiple of n_k_heads */
    int k_dim, v_dim;
    bool heads_tiled;        /* value head h reads key head h % n_k_heads */
    const float *q, *k;      /* as prepared: key head h of row t at
                                q + t * qk_stride + h * k_dim */
    int64_t qk_stride;
    const float *v;          /* value head h of row t at v + t * v_stride +
                                h * v_dim */
    int64_t v_stride;
    const float *log_g;      /* [T][n_v_heads] */
    const float *beta;       /* [T][n_v_heads] */
    float *state;            /* [n_v_heads][v_dim][k_dim], updated */
    float *out;              /* value head h of row t at out + t *
                                out_stride + h * v_dim; aliases no input */
    int64_t out_stride;
    float *const *snapshots;
    int n_snapshots;         /* 0 .. T */
    sp_delta_form form;
} sp_gated_delta_args;

/* Fails with SPINDLE_ERR_ARGUMENT (one line, nothing written) on NULL
 * buffers, non-positive sizes, heads that do not divide, short strides or a
 * bad snapshot count; SPINDLE_ERR_MEMORY when its scratch cannot be had.
 * Parallel over value heads. */
spindle_status sp_gated_delta(sp_pool *pool, const sp_gated_delta_args *args,
                              spindle_error *err);

/* ---- output norm ---- */

/* For each of n_heads heads of head_dim floats: out = rmsnorm(x) * w *
 * silu(z), the RMSNorm with a plain weight (mlx-lm's Qwen3NextRMSNormGated,
 * the gate applied in f32 after the norm). out may alias x. */
void sp_rmsnorm_gated(float *out, const float *x, const float *z,
                      const float *w, int n_heads, int head_dim, float eps);

#endif
