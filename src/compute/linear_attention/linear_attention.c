/* Entry points of the linear-attention kernels (linear_attention.h): the
 * convolution, the delta rule's inputs and the gated norm here, the delta
 * rule's inner loops in the kernel tables of delta_net_simd.inc, chosen by
 * the kernel level and the head sizes. */
#include "compute/linear_attention/linear_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "compute/cpu_features.h"
#include "compute/linear_attention/delta_net_simd.h"
#include "compute/ops.h"

/* Below this many multiply-adds a convolution runs on the calling thread
 * (a decode step's is a few thousand: not worth waking the pool). */
#define SP_CONV_SERIAL_WORK 65536
#define SP_CONV_GRAIN 256

/* ------------------------------------------------------------ convolution */

/* Row r of the concatenation window ++ x. */
static const float *conv_row(const sp_conv1d_args *a, int r) {
    return r < a->kernel - 1 ? a->window + (int64_t)r * a->channels
                             : a->x + (int64_t)(r - (a->kernel - 1)) * a->x_stride;
}

/* Channels [c0, c1) of the window after token t (its rows are those of the
 * concatenation from t + 1 on). Ascending rows read at or after the row
 * they write, so dst may be the window itself. */
static void conv_window_after(const sp_conv1d_args *a, float *dst, int t,
                              int64_t c0, int64_t c1) {
    for (int r = 0; r < a->kernel - 1; r++) {
        const float *src = conv_row(a, t + 1 + r);
        float *d = dst + (int64_t)r * a->channels;
        if (src != d) memmove(d + c0, src + c0, sizeof(float) * (size_t)(c1 - c0));
    }
}

/* One convolution for the pool: its arguments and whether SiLU follows. */
typedef struct conv_job {
    const sp_conv1d_args *a;
    bool silu;
} conv_job;

static void conv_channels(void *ctx, int64_t c0, int64_t c1, int thread_id) {
    const conv_job *job = ctx;
    const sp_conv1d_args *a = job->a;
    const int64_t n = c1 - c0;
    for (int t = 0; t < a->n_tokens; t++) {
        float *o = a->out + t * a->out_stride + c0;
        const float *row = conv_row(a, t) + c0, *w = a->w_t + c0;
        for (int64_t c = 0; c < n; c++) o[c] = w[c] * row[c];
        for (int j = 1; j < a->kernel; j++) {
            row = conv_row(a, t + j) + c0;
            w = a->w_t + (int64_t)j * a->channels + c0;
            for (int64_t c = 0; c < n; c++) o[c] += w[c] * row[c];
        }
        if (a->bias && !job->silu)
            for (int64_t c = 0; c < n; c++) o[c] += a->bias[c0 + c];
        /* expf(-v) overflows to inf for v < -88: v / inf = -0, the limit. */
        if (job->silu)
            for (int64_t c = 0; c < n; c++) o[c] = o[c] / (1.0f + expf(-o[c]));
    }
    /* Snapshots first: the final update overwrites rows they may read. */
    const int first = a->n_tokens - a->n_snapshots;
    for (int i = 0; i < a->n_snapshots; i++)
        conv_window_after(a, a->window_snapshots[i], first + i, c0, c1);
    conv_window_after(a, a->window, a->n_tokens - 1, c0, c1);
    (void)thread_id;
}

static spindle_status conv1d_run(sp_pool *pool, const sp_conv1d_args *a,
                                 bool silu, spindle_error *err) {
    if (!a || !a->x || !a->w_t || !a->out || (a->kernel > 1 && !a->window))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "conv1d: NULL buffer");
    if (a->n_tokens < 1 || a->channels < 1 || a->kernel < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "conv1d: %d tokens, %d channels, kernel %d",
                       a->n_tokens, a->channels, a->kernel);
    if (a->x_stride < a->channels || a->out_stride < a->channels)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "conv1d: row stride below %d channels", a->channels);
    if (a->n_snapshots < 0 || a->n_snapshots > a->n_tokens ||
        (a->n_snapshots > 0 && !a->window_snapshots))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "conv1d: %d window snapshots of %d tokens",
                       a->n_snapshots, a->n_tokens);
    for (int i = 0; i < a->n_snapshots; i++)
        if (!a->window_snapshots[i] && a->kernel > 1)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "conv1d: window snapshot %d is NULL", i);
    const int64_t work = (int64_t)a->n_tokens * a->channels * a->kernel;
    conv_job job = {.a = a, .silu = silu};
    sp_pool_for(work < SP_CONV_SERIAL_WORK ? NULL : pool, a->channels,
                SP_CONV_GRAIN, conv_channels, &job);
    return SPINDLE_OK;
}

spindle_status sp_conv1d_silu(sp_pool *pool, const sp_conv1d_args *a,
                              spindle_error *err) {
    return conv1d_run(pool, a, true, err);
}

spindle_status sp_conv1d(sp_pool *pool, const sp_conv1d_args *a,
                         spindle_error *err) {
    return conv1d_run(pool, a, false, err);
}

/* ------------------------------------------------- inputs of the delta rule */

/* mlx's nn.softplus: logaddexp(x, 0) = max(x, 0) + log1p(e^-|x|). */
static float softplus(float x) {
    return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

void sp_gated_delta_prepare(const sp_delta_prepare_args *a) {
    /* The constants as mlx-lm's normalize_qk forms them in Python (double)
     * before they meet the f32 arrays. */
    const double inv_scale = pow((double)a->k_dim, -0.5);
    const float q_scale = (float)(inv_scale * inv_scale);
    const float k_scale = (float)inv_scale;
    const float eps = (float)(1e-6 * inv_scale * inv_scale);
    for (int t = 0; t < a->n_tokens; t++) {
        for (int h = 0; h < a->n_k_heads; h++) {
            float *q = a->q + t * a->qk_stride + (int64_t)h * a->k_dim;
            float *k = a->k + t * a->qk_stride + (int64_t)h * a->k_dim;
            sp_rmsnorm(q, q, NULL, a->k_dim, eps, 0.0f);
            sp_rmsnorm(k, k, NULL, a->k_dim, eps, 0.0f);
            for (int d = 0; d < a->k_dim; d++) {
                q[d] *= q_scale;
                k[d] *= k_scale;
            }
        }
        float *ga = a->a + (int64_t)t * a->n_v_heads;
        float *gb = a->b + (int64_t)t * a->n_v_heads;
        for (int h = 0; h < a->n_v_heads; h++) {
            ga[h] = a->a_scale[h] * softplus(ga[h] + a->dt_bias[h]);
            gb[h] = 1.0f / (1.0f + expf(-gb[h]));
        }
    }
}

/* --------------------------------------------------------- the delta rule */

static const sp_delta_kernels *delta_kernels(int k_dim, int v_dim) {
    const sp_delta_kernels *order[2];
    int n = 0;
    switch (sp_simd_current()) {
#if defined(__x86_64__)
    case SP_SIMD_AVX512: order[n++] = &sp_delta_kernels_avx512; /* fall through */
    case SP_SIMD_AVXVNNI: /* (no integer products here: AVX2's) */
    case SP_SIMD_AVX2: order[n++] = &sp_delta_kernels_avx2; break;
#elif defined(__aarch64__)
    case SP_SIMD_NEON:
    case SP_SIMD_DOTPROD:
    case SP_SIMD_I8MM: order[n++] = &sp_delta_kernels_neon; break;
#endif
    default: break;
    }
    for (int i = 0; i < n; i++)
        if (order[i]->covers(k_dim, v_dim)) return order[i];
    return &sp_delta_kernels_portable;
}

typedef struct delta_job {
    const sp_gated_delta_args *a;
    const sp_delta_kernels *kern;
    int n_chunked;           /* leading tokens taken in chunks */
    float *scratch;          /* per thread: scratch_floats each */
    int64_t scratch_floats;
} delta_job;

static void delta_heads(void *ctx, int64_t begin, int64_t end, int thread_id) {
    const delta_job *job = ctx;
    const sp_gated_delta_args *a = job->a;
    const int group = a->n_v_heads / a->n_k_heads;
    const int64_t state_floats = (int64_t)a->v_dim * a->k_dim;
    const int tail = a->n_tokens - job->n_chunked;
    for (int64_t h = begin; h < end; h++) {
        const int64_t kh = a->heads_tiled ? h % a->n_k_heads : h / group;
        const sp_delta_head hd = {
            .q = a->q + kh * a->k_dim, .k = a->k + kh * a->k_dim,
            .qk_stride = a->qk_stride,
            .v = a->v + h * a->v_dim, .v_stride = a->v_stride,
            .log_g = a->log_g + h, .beta = a->beta + h,
            .gate_stride = a->n_v_heads,
            .state = a->state + h * state_floats,
            .out = a->out + h * a->v_dim, .out_stride = a->out_stride,
            .k_dim = a->k_dim, .v_dim = a->v_dim};
        for (int t0 = 0; t0 < job->n_chunked; t0 += SP_DELTA_CHUNK) {
            const int c = job->n_chunked - t0 < SP_DELTA_CHUNK
                              ? job->n_chunked - t0 : SP_DELTA_CHUNK;
            job->kern->chunk(&hd, t0, c,
                             job->scratch + thread_id * job->scratch_floats);
        }
        job->kern->recurrent(&hd, job->n_chunked, tail - a->n_snapshots,
                             NULL, 0);
        job->kern->recurrent(&hd, a->n_tokens - a->n_snapshots,
                             a->n_snapshots, a->snapshots, h * state_floats);
    }
}

static spindle_status delta_check(const sp_gated_delta_args *a,
                                  spindle_error *err) {
    if (!a || !a->q || !a->k || !a->v || !a->log_g || !a->beta || !a->state ||
        !a->out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "gated delta: NULL buffer");
    if (a->n_tokens < 1 || a->n_k_heads < 1 || a->n_v_heads < 1 ||
        a->k_dim < 1 || a->v_dim < 1 || a->n_v_heads % a->n_k_heads != 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "gated delta: %d tokens, %d key heads of %d, "
                       "%d value heads of %d",
                       a->n_tokens, a->n_k_heads, a->k_dim, a->n_v_heads,
                       a->v_dim);
    if (a->qk_stride < (int64_t)a->n_k_heads * a->k_dim ||
        a->v_stride < (int64_t)a->n_v_heads * a->v_dim ||
        a->out_stride < (int64_t)a->n_v_heads * a->v_dim)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "gated delta: row stride below the heads' width");
    if (a->n_snapshots < 0 || a->n_snapshots > a->n_tokens ||
        (a->n_snapshots > 0 && !a->snapshots))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "gated delta: %d snapshots of %d tokens",
                       a->n_snapshots, a->n_tokens);
    for (int i = 0; i < a->n_snapshots; i++)
        if (!a->snapshots[i])
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "gated delta: snapshot %d is NULL", i);
    if (a->form != SP_DELTA_AUTO && a->form != SP_DELTA_RECURRENT &&
        a->form != SP_DELTA_CHUNKED)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "gated delta: unknown form %d",
                       (int)a->form);
    return SPINDLE_OK;
}

spindle_status sp_gated_delta(sp_pool *pool, const sp_gated_delta_args *a,
                              spindle_error *err) {
    spindle_status st = delta_check(a, err);
    if (st != SPINDLE_OK) return st;
    const int lead = a->n_tokens - a->n_snapshots;
    delta_job job = {.a = a, .kern = delta_kernels(a->k_dim, a->v_dim)};
    job.n_chunked = a->form == SP_DELTA_RECURRENT ? 0
                    : a->form == SP_DELTA_CHUNKED ? lead
                    : lead >= 2 ? lead : 0;
    if (job.n_chunked > 0) {
        job.scratch_floats = sp_delta_chunk_scratch(a->k_dim, a->v_dim);
        job.scratch = malloc(sizeof(float) * (size_t)job.scratch_floats *
                             (size_t)sp_pool_size(pool));
        if (!job.scratch)
            return sp_fail(err, SPINDLE_ERR_MEMORY,
                           "gated delta: out of memory for chunk scratch");
    }
    sp_pool_for(pool, a->n_v_heads, 1, delta_heads, &job);
    free(job.scratch);
    return SPINDLE_OK;
}

/* ------------------------------------------------------------ output norm */

void sp_rmsnorm_gated(float *out, const float *x, const float *z,
                      const float *w, int n_heads, int head_dim, float eps) {
    for (int h = 0; h < n_heads; h++) {
        float *o = out + (int64_t)h * head_dim;
        const float *zh = z + (int64_t)h * head_dim;
        sp_rmsnorm(o, x + (int64_t)h * head_dim, w, head_dim, eps, 0.0f);
        for (int d = 0; d < head_dim; d++)
            o[d] *= zh[d] / (1.0f + expf(-zh[d]));
    }
}
