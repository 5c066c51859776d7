/* The linear-attention kernels (src/compute/linear_attention/) against
 * plain double references written from the definitions in
 * linear_attention.h: the gated delta rule token by token, the causal
 * depthwise convolution over window ++ x, mlx-lm's normalize_qk and gates,
 * and the gated RMSNorm.
 *
 * Every delta-rule case runs in each form (recurrent, chunked, auto), with
 * and without state snapshots, serially and on two threads, at every
 * kernel level the CPU has (portable, AVX2, AVX-512; NEON on AArch64). The
 * chunked form must agree with the reference to f32 rounding on runs of
 * more than one chunk, with strong decays that underflow. Inputs keep one
 * NaN-filled guard column past every row and head, so that a kernel reading
 * outside its head shows up as NaN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu_features.h"
#include "compute/linear_attention/linear_attention.h"
#include "compute/threadpool.h"

#define TEST_RNG_SEED 0x6A09E667F3BCC909ull
#include "test_util.h"

/* ------------------------------------------------------------ references */

/* y and the state after T tokens, token by token in double. */
static void ref_delta(const sp_gated_delta_args *a, double *state,
                      double *y, double **snaps) {
    const int group = a->n_v_heads / a->n_k_heads, dk = a->k_dim,
              dv = a->v_dim;
    for (int t = 0; t < a->n_tokens; t++) {
        for (int h = 0; h < a->n_v_heads; h++) {
            const int kh = a->heads_tiled ? h % a->n_k_heads : h / group;
            const float *q = a->q + t * a->qk_stride + kh * dk;
            const float *k = a->k + t * a->qk_stride + kh * dk;
            const float *v = a->v + t * a->v_stride + h * dv;
            const double g = exp((double)a->log_g[t * a->n_v_heads + h]);
            const double beta = a->beta[t * a->n_v_heads + h];
            double *S = state + (int64_t)h * dv * dk;
            for (int r = 0; r < dv; r++) {
                double kv = 0;
                for (int i = 0; i < dk; i++) {
                    S[r * dk + i] *= g;
                    kv += S[r * dk + i] * k[i];
                }
                const double d = beta * (v[r] - kv);
                double out = 0;
                for (int i = 0; i < dk; i++) {
                    S[r * dk + i] += d * k[i];
                    out += S[r * dk + i] * q[i];
                }
                y[(int64_t)t * a->n_v_heads * dv + h * dv + r] = out;
            }
        }
        const int s = t - (a->n_tokens - a->n_snapshots);
        if (s >= 0)
            memcpy(snaps[s], state, sizeof(double) * (size_t)a->n_v_heads *
                                        (size_t)dv * (size_t)dk);
    }
}

/* ------------------------------------------------------------ delta cases */

typedef struct delta_shape {
    int T, n_k_heads, n_v_heads, k_dim, v_dim, n_snapshots;
    bool tiled;              /* llama.cpp's tiled value-head order */
    float min_log_g;         /* log decays drawn from [min_log_g, 0] */
} delta_shape;

typedef struct delta_case {
    sp_gated_delta_args a;
    float *qk, *v, *log_g, *beta, *state0, *out, **snaps;
    double *ref_state, *ref_y, **ref_snaps;
} delta_case;

static float *nan_buffer(size_t n) {
    float *p = malloc(sizeof(float) * n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* Random unit keys and queries of norm Dk^-1/2 (what prepare produces),
 * values in [-1, 1], gates as described, a random initial state. */
static void delta_case_init(delta_case *c, const delta_shape *sh) {
    memset(c, 0, sizeof *c);
    const int T = sh->T, hk = sh->n_k_heads, hv = sh->n_v_heads;
    const int dk = sh->k_dim, dv = sh->v_dim;
    const int64_t qk_stride = 2 * (int64_t)hk * dk + 1;
    const int64_t v_stride = (int64_t)hv * dv + 1;
    const size_t state_n = (size_t)hv * dv * dk;
    c->qk = nan_buffer((size_t)T * qk_stride);
    c->v = nan_buffer((size_t)T * v_stride);
    c->log_g = nan_buffer((size_t)T * hv);
    c->beta = nan_buffer((size_t)T * hv);
    c->state0 = nan_buffer(state_n);
    c->out = nan_buffer((size_t)T * v_stride);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < 2 * hk; h++) {
            float *x = c->qk + t * qk_stride + (int64_t)h * dk;
            double n2 = 0;
            for (int i = 0; i < dk; i++) {
                x[i] = frand(-1, 1);
                n2 += (double)x[i] * x[i];
            }
            const double norm = h < hk ? sqrt(n2 * dk) : sqrt(n2);
            for (int i = 0; i < dk; i++) x[i] = (float)(x[i] / norm);
        }
        fill_uniform(c->v + t * v_stride, hv * dv, -1, 1);
        for (int h = 0; h < hv; h++) {
            c->log_g[t * hv + h] = frand(sh->min_log_g, 0);
            c->beta[t * hv + h] = frand(0, 1);
        }
    }
    fill_uniform(c->state0, (int)state_n, -1, 1);
    if (sh->n_snapshots > 0) {
        c->snaps = calloc((size_t)sh->n_snapshots, sizeof *c->snaps);
        c->ref_snaps = calloc((size_t)sh->n_snapshots, sizeof *c->ref_snaps);
        assert_non_null(c->snaps);
        assert_non_null(c->ref_snaps);
        for (int i = 0; i < sh->n_snapshots; i++) {
            c->snaps[i] = nan_buffer(state_n);
            c->ref_snaps[i] = malloc(sizeof(double) * state_n);
        }
    }
    c->a = (sp_gated_delta_args){
        .n_tokens = T, .n_k_heads = hk, .n_v_heads = hv, .k_dim = dk,
        .v_dim = dv, .heads_tiled = sh->tiled, .q = c->qk, .k = c->qk + (int64_t)hk * dk,
        .qk_stride = qk_stride, .v = c->v, .v_stride = v_stride,
        .log_g = c->log_g, .beta = c->beta, .out = c->out,
        .out_stride = v_stride, .snapshots = c->snaps,
        .n_snapshots = sh->n_snapshots};
    c->ref_state = malloc(sizeof(double) * state_n);
    c->ref_y = malloc(sizeof(double) * (size_t)T * hv * dv);
    for (size_t i = 0; i < state_n; i++) c->ref_state[i] = c->state0[i];
    ref_delta(&c->a, c->ref_state, c->ref_y, c->ref_snaps);
}

static void delta_case_free(delta_case *c) {
    for (int i = 0; i < c->a.n_snapshots; i++) {
        free(c->snaps[i]);
        free(c->ref_snaps[i]);
    }
    free(c->snaps);
    free(c->ref_snaps);
    free(c->qk);
    free(c->v);
    free(c->log_g);
    free(c->beta);
    free(c->state0);
    free(c->out);
    free(c->ref_state);
    free(c->ref_y);
}

/* f32 rounding of sums over a chunk (and the forward substitution) of
 * terms of order one. */
#define DELTA_ATOL 2e-5
#define DELTA_RTOL 2e-5

static void check_state(const float *got, const double *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        assert_close(got[i], want[i], DELTA_ATOL, DELTA_RTOL, (int)i);
}

static void run_delta(const delta_shape *sh, sp_delta_form form,
                      sp_pool *pool) {
    delta_case c;
    delta_case_init(&c, sh);
    const size_t state_n = (size_t)sh->n_v_heads * sh->v_dim * sh->k_dim;
    float *state = malloc(sizeof(float) * state_n);
    memcpy(state, c.state0, sizeof(float) * state_n);
    c.a.state = state;
    c.a.form = form;
    spindle_error err = {0};
    if (sp_gated_delta(pool, &c.a, &err) != SPINDLE_OK)
        fail_msg("sp_gated_delta: %s", err.message);
    for (int t = 0; t < sh->T; t++)
        for (int j = 0; j < sh->n_v_heads * sh->v_dim; j++)
            assert_close(c.out[t * c.a.out_stride + j],
                         c.ref_y[(int64_t)t * sh->n_v_heads * sh->v_dim + j],
                         DELTA_ATOL, DELTA_RTOL, t * 100000 + j);
    for (int t = 0; t < sh->T; t++) /* the guard column stays untouched */
        assert_true(isnan(c.out[t * c.a.out_stride + sh->n_v_heads * sh->v_dim]));
    check_state(state, c.ref_state, state_n);
    for (int i = 0; i < sh->n_snapshots; i++)
        check_state(c.snaps[i], c.ref_snaps[i], state_n);
    free(state);
    delta_case_free(&c);
}

static const delta_shape delta_shapes[] = {
    /* one token, GQA 2:4 */
    {.T = 1, .n_k_heads = 2, .n_v_heads = 4, .k_dim = 32, .v_dim = 16,
     .min_log_g = -3},
    /* the tiled head order, over more than a chunk */
    {.T = 80, .n_k_heads = 2, .n_v_heads = 6, .k_dim = 16, .v_dim = 16,
     .n_snapshots = 2, .min_log_g = -1, .tiled = true},
    /* a partial chunk, snapshots */
    {.T = 7, .n_k_heads = 1, .n_v_heads = 2, .k_dim = 64, .v_dim = 32,
     .n_snapshots = 3, .min_log_g = -1},
    /* exactly one chunk, then one more token */
    {.T = 65, .n_k_heads = 2, .n_v_heads = 2, .k_dim = 32, .v_dim = 32,
     .n_snapshots = 1, .min_log_g = -0.5f},
    /* several chunks at Qwen3-Next's head size, strong decays */
    {.T = 150, .n_k_heads = 1, .n_v_heads = 2, .k_dim = 128, .v_dim = 128,
     .n_snapshots = 4, .min_log_g = -20},
    /* weak decays: the state carries through chunks */
    {.T = 130, .n_k_heads = 1, .n_v_heads = 1, .k_dim = 64, .v_dim = 64,
     .min_log_g = -0.02f},
    /* sizes no vector width tiles: the portable kernels at every level */
    {.T = 70, .n_k_heads = 1, .n_v_heads = 3, .k_dim = 12, .v_dim = 5,
     .n_snapshots = 2, .min_log_g = -2},
    /* every token a snapshot */
    {.T = 5, .n_k_heads = 1, .n_v_heads = 1, .k_dim = 16, .v_dim = 16,
     .n_snapshots = 5, .min_log_g = -1},
};

/* `body` at every kernel level the CPU has; its own level is restored. */
static void every_level(void (*body)(void)) {
    const sp_simd_level own = sp_simd_current();
    for (int l = 0; l < SP_SIMD_COUNT; l++) {
        if (!sp_simd_force((sp_simd_level)l)) continue;
        body();
    }
    assert_true(sp_simd_force(own));
}

static void delta_all_forms(void) {
    sp_pool *pool = sp_pool_create(2);
    for (size_t s = 0; s < sizeof delta_shapes / sizeof *delta_shapes; s++)
        for (int form = SP_DELTA_AUTO; form <= SP_DELTA_CHUNKED; form++) {
            run_delta(&delta_shapes[s], (sp_delta_form)form, NULL);
            run_delta(&delta_shapes[s], (sp_delta_form)form, pool);
        }
    sp_pool_destroy(pool);
}

static void test_delta_rule(void **s) {
    (void)s;
    every_level(delta_all_forms);
}

/* Prefill in pieces (chunked runs, single tokens, snapshots) leaves the
 * state the reference leaves after the whole run. */
static void delta_split_runs(void) {
    const delta_shape sh = {.T = 100, .n_k_heads = 1, .n_v_heads = 2,
                            .k_dim = 32, .v_dim = 32, .min_log_g = -1};
    delta_case c;
    delta_case_init(&c, &sh);
    const size_t state_n = (size_t)2 * 32 * 32;
    float *state = malloc(sizeof(float) * state_n);
    memcpy(state, c.state0, sizeof(float) * state_n);
    const int cuts[] = {0, 1, 67, 68, 90, 100};
    for (int i = 0; i + 1 < 6; i++) {
        sp_gated_delta_args part = c.a;
        const int t0 = cuts[i];
        part.n_tokens = cuts[i + 1] - t0;
        part.q += t0 * part.qk_stride;
        part.k += t0 * part.qk_stride;
        part.v += t0 * part.v_stride;
        part.log_g += t0 * 2;
        part.beta += t0 * 2;
        part.out += t0 * part.out_stride;
        part.state = state;
        assert_int_equal(sp_gated_delta(NULL, &part, NULL), SPINDLE_OK);
    }
    check_state(state, c.ref_state, state_n);
    for (int t = 0; t < sh.T; t++)
        for (int j = 0; j < 64; j++)
            assert_close(c.out[t * c.a.out_stride + j], c.ref_y[t * 64 + j],
                         DELTA_ATOL, DELTA_RTOL, t * 1000 + j);
    free(state);
    delta_case_free(&c);
}

static void test_delta_split_runs(void **s) {
    (void)s;
    every_level(delta_split_runs);
}

/* ---------------------------------------------------------- convolution */

/* silu: sp_conv1d_silu's; else sp_conv1d's (a->bias, no activation). */
static void ref_conv(const sp_conv1d_args *a, const float *window0, bool silu,
                     double *out, double *window_after_all) {
    const int K = a->kernel, C = a->channels, T = a->n_tokens;
    /* rows of window0 ++ x */
    const int rows = K - 1 + T;
    double *in = malloc(sizeof(double) * (size_t)rows * C);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < C; c++)
            in[r * C + c] = r < K - 1 ? window0[r * C + c]
                                      : a->x[(r - (K - 1)) * a->x_stride + c];
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < K; j++)
                s += (double)a->w_t[j * C + c] * in[(t + j) * C + c];
            if (!silu && a->bias) s += a->bias[c];
            out[t * C + c] = silu ? s / (1 + exp(-s)) : s;
        }
    /* window after token t: rows t + 1 .. t + K - 1 of the concatenation */
    for (int t = 0; t < T; t++)
        for (int r = 0; r < K - 1; r++)
            for (int c = 0; c < C; c++)
                window_after_all[((int64_t)t * (K - 1) + r) * C + c] =
                    in[(t + 1 + r) * C + c];
    free(in);
}

static void run_conv_kind(int T, int C, int K, int n_snapshots, bool silu,
                          sp_pool *pool) {
    const int64_t stride = C + 3;
    float *x = nan_buffer((size_t)T * stride), *out = nan_buffer((size_t)T * stride);
    float *w = nan_buffer((size_t)K * C);
    float *window = nan_buffer((size_t)(K - 1) * C + 1);
    float *window0 = nan_buffer((size_t)(K - 1) * C + 1);
    for (int t = 0; t < T; t++) fill_uniform(x + t * stride, C, -2, 2);
    fill_uniform(w, K * C, -1, 1);
    fill_uniform(window, (K - 1) * C, -2, 2);
    memcpy(window0, window, sizeof(float) * (size_t)(K - 1) * C);
    float *bias = nan_buffer((size_t)C);
    fill_uniform(bias, C, -1, 1);
    float *snaps[8];
    for (int i = 0; i < n_snapshots; i++) snaps[i] = nan_buffer((size_t)(K - 1) * C);
    double *ref = malloc(sizeof(double) * (size_t)T * C);
    double *ref_windows = malloc(sizeof(double) * (size_t)T * (K - 1) * C + 1);
    const sp_conv1d_args a = {
        .n_tokens = T, .channels = C, .kernel = K, .x = x, .x_stride = stride,
        .w_t = w, .window = window, .out = out, .out_stride = stride,
        .window_snapshots = snaps, .n_snapshots = n_snapshots,
        .bias = silu ? NULL : bias};
    ref_conv(&a, window0, silu, ref, ref_windows);
    spindle_error err = {0};
    if ((silu ? sp_conv1d_silu : sp_conv1d)(pool, &a, &err) != SPINDLE_OK)
        fail_msg("sp_conv1d: %s", err.message);
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < C; c++)
            assert_close(out[t * stride + c], ref[t * C + c], 1e-6, 1e-5,
                         t * 10000 + c);
        assert_true(isnan(out[t * stride + C]));
    }
    const double *last = ref_windows + (int64_t)(T - 1) * (K - 1) * C;
    for (int i = 0; i < (K - 1) * C; i++) assert_true(window[i] == last[i]);
    assert_true(isnan(window[(K - 1) * C]));
    for (int s = 0; s < n_snapshots; s++) {
        const double *want =
            ref_windows + (int64_t)(T - n_snapshots + s) * (K - 1) * C;
        for (int i = 0; i < (K - 1) * C; i++) assert_true(snaps[s][i] == want[i]);
        free(snaps[s]);
    }
    free(x);
    free(out);
    free(w);
    free(window);
    free(window0);
    free(bias);
    free(ref);
    free(ref_windows);
}

static void run_conv(int T, int C, int K, int n_snapshots, sp_pool *pool) {
    run_conv_kind(T, C, K, n_snapshots, true, pool);
}

static void test_conv1d(void **s) {
    (void)s;
    sp_pool *pool = sp_pool_create(2);
    run_conv(1, 40, 4, 1, NULL);     /* decode: the window shifts by one */
    run_conv(2, 40, 4, 2, pool);     /* T < kernel - 1 */
    run_conv(3, 33, 4, 3, pool);     /* T = kernel - 1 */
    run_conv(50, 1000, 4, 4, pool);  /* parallel channel blocks */
    run_conv(9, 17, 2, 0, NULL);
    run_conv(5, 8, 1, 0, pool);      /* kernel 1: no window at all */
    sp_pool_destroy(pool);
}

/* sp_conv1d: LFM2's short convolution, with a bias and no SiLU. */
static void test_conv1d_plain(void **s) {
    (void)s;
    sp_pool *pool = sp_pool_create(2);
    run_conv_kind(1, 40, 3, 1, false, NULL);
    run_conv_kind(2, 40, 3, 2, false, pool);
    run_conv_kind(50, 1000, 3, 4, false, pool);
    run_conv_kind(7, 17, 4, 0, false, NULL);
    sp_pool_destroy(pool);
}

/* ------------------------------------------------ prepare and gated norm */

static void test_prepare(void **s) {
    (void)s;
    enum { T = 3, HK = 2, DK = 24, HV = 4, stride = 2 * HK * DK + 5 };
    float qk[T * stride], a[T * HV], b[T * HV], A_log[HV], a_scale[HV];
    float dt_bias[HV];
    float qk0[T * stride], a0[T * HV], b0[T * HV];
    fill_uniform(qk, T * (int)stride, -3, 3);
    fill_uniform(a, T * HV, -100, 100); /* both branches; e^x overflows f32 */
    fill_uniform(b, T * HV, -30, 30);
    fill_uniform(A_log, HV, -2, 2);
    for (int h = 0; h < HV; h++) a_scale[h] = -expf(A_log[h]);
    fill_uniform(dt_bias, HV, -1, 1);
    memcpy(qk0, qk, sizeof qk);
    memcpy(a0, a, sizeof a);
    memcpy(b0, b, sizeof b);
    const sp_delta_prepare_args args = {
        .n_tokens = T, .n_k_heads = HK, .k_dim = DK, .q = qk,
        .k = qk + HK * DK, .qk_stride = stride, .n_v_heads = HV, .a = a,
        .b = b, .a_scale = a_scale, .dt_bias = dt_bias};
    sp_gated_delta_prepare(&args);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < 2 * HK; h++) {
            const float *x0 = qk0 + t * stride + h * DK;
            double ss = 0;
            for (int i = 0; i < DK; i++) ss += (double)x0[i] * x0[i];
            /* x / sqrt(sum x^2 + 1e-6), times Dk^-1/2 for queries */
            const double f = 1 / sqrt(ss + 1e-6) / (h < HK ? sqrt(DK) : 1);
            for (int i = 0; i < DK; i++)
                assert_close(qk[t * stride + h * DK + i], x0[i] * f, 1e-7,
                             1e-6, i);
        }
        for (int i = 2 * HK * DK; i < stride; i++) /* past the heads */
            assert_true(qk[t * stride + i] == qk0[t * stride + i]);
        for (int h = 0; h < HV; h++) {
            const double x = (double)a0[t * HV + h] + dt_bias[h];
            const double sp = x > 30 ? x : log1p(exp(x));
            assert_close(a[t * HV + h], -exp((double)A_log[h]) * sp, 1e-30,
                         1e-5, h);
            assert_close(b[t * HV + h], 1 / (1 + exp(-(double)b0[t * HV + h])),
                         1e-30, 1e-6, h);
        }
    }
}

static void test_rmsnorm_gated(void **s) {
    (void)s;
    enum { H = 3, D = 20 };
    float x[H * D], z[H * D], w[D], out[H * D];
    fill_uniform(x, H * D, -2, 2);
    fill_uniform(z, H * D, -12, 12);
    fill_uniform(w, D, 0.5f, 1.5f);
    sp_rmsnorm_gated(out, x, z, w, H, D, 1e-6f);
    for (int h = 0; h < H; h++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[h * D + i] * x[h * D + i];
        const double inv = 1 / sqrt(ss / D + 1e-6);
        for (int i = 0; i < D; i++) {
            const double zz = z[h * D + i];
            const double want = x[h * D + i] * inv * w[i] * zz / (1 + exp(-zz));
            assert_close(out[h * D + i], want, 1e-6, 1e-5, h * D + i);
        }
    }
    sp_rmsnorm_gated(x, x, z, w, H, D, 1e-6f); /* in place */
    for (int i = 0; i < H * D; i++) assert_true(x[i] == out[i]);
}

/* --------------------------------------------------------- bad arguments */

static void test_invalid_arguments(void **s) {
    (void)s;
    const delta_shape sh = {.T = 2, .n_k_heads = 1, .n_v_heads = 2,
                            .k_dim = 8, .v_dim = 8, .n_snapshots = 1,
                            .min_log_g = -1};
    delta_case c;
    delta_case_init(&c, &sh);
    float state[2 * 8 * 8];
    c.a.state = state;
    struct { const char *message; sp_gated_delta_args a; } cases[8];
    for (int i = 0; i < 8; i++) cases[i].a = c.a;
    cases[0].message = "NULL buffer", cases[0].a.beta = NULL;
    cases[1].message = "value heads", cases[1].a.n_v_heads = 3;
    cases[1].a.n_k_heads = 2;
    cases[2].message = "tokens", cases[2].a.n_tokens = 0;
    cases[3].message = "row stride", cases[3].a.qk_stride = 7;
    cases[4].message = "snapshots", cases[4].a.n_snapshots = 3;
    cases[5].message = "snapshot 0 is NULL", cases[5].a.snapshots = (float *[]){NULL};
    cases[6].message = "unknown form", cases[6].a.form = (sp_delta_form)9;
    cases[7].message = "row stride", cases[7].a.out_stride = 15;
    for (int i = 0; i < 8; i++) {
        for (size_t j = 0; j < 2 * 8 * 8; j++) state[j] = 42.0f;
        spindle_error err = {0};
        assert_int_equal(sp_gated_delta(NULL, &cases[i].a, &err),
                         SPINDLE_ERR_ARGUMENT);
        if (!strstr(err.message, cases[i].message))
            fail_msg("case %d: message '%s'", i, err.message);
        for (size_t j = 0; j < 2 * 8 * 8; j++) assert_true(state[j] == 42.0f);
    }
    delta_case_free(&c);

    float x[8], w[8], window[8], out[8];
    const sp_conv1d_args good = {.n_tokens = 1, .channels = 4, .kernel = 2,
                                 .x = x, .x_stride = 4, .w_t = w,
                                 .window = window, .out = out, .out_stride = 4};
    struct { const char *message; sp_conv1d_args a; } conv[4] = {
        {"NULL buffer", good}, {"kernel", good}, {"row stride", good},
        {"snapshots", good}};
    conv[0].a.window = NULL;
    conv[1].a.kernel = 0;
    conv[2].a.x_stride = 3;
    conv[3].a.n_snapshots = 1;
    for (int i = 0; i < 4; i++) {
        spindle_error err = {0};
        assert_int_equal(sp_conv1d_silu(NULL, &conv[i].a, &err),
                         SPINDLE_ERR_ARGUMENT);
        if (!strstr(err.message, conv[i].message))
            fail_msg("conv case %d: message '%s'", i, err.message);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta_rule),
        cmocka_unit_test(test_delta_split_runs),
        cmocka_unit_test(test_conv1d),
        cmocka_unit_test(test_conv1d_plain),
        cmocka_unit_test(test_prepare),
        cmocka_unit_test(test_rmsnorm_gated),
        cmocka_unit_test(test_invalid_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
