/* Element-wise and per-row kernels: RMSNorm, gated activations, softmax.
 *
 * Precise libm functions (expf, tanhf) are used here; the gated
 * activations have AVX2 versions with a vector exponential (within a few
 * ulp; activations_avx2.c), used at every x86 SIMD level except in
 * precision exact. Reductions keep SP_LANES independent partial sums so that the
 * compiler can vectorize them without -ffast-math (a strict left-to-right
 * float sum is a dependency chain it must not reorder). */
#include "compute/ops.h"

#include <math.h>

#include "compute/activations_simd.h"
#include "compute/cpu_features.h"
#include "compute/mlx_exp.h"

#define SP_LANES 8

/* Sum of squares in f32, like mlx's rms_norm which accumulates in float32.
 * The lane split only changes the summation order (closer to mlx's tree
 * reduction than a serial sum would be). */
static float sum_squares_f32(const float *x, int n) {
    float acc[SP_LANES] = {0};
    int i = 0;
    for (; i + SP_LANES <= n; i += SP_LANES)
        for (int l = 0; l < SP_LANES; l++) acc[l] += x[i + l] * x[i + l];
    float s = 0.0f;
    for (int l = 0; l < SP_LANES; l++) s += acc[l];
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}

void sp_rmsnorm(float *out, const float *x, const float *w, int n, float eps,
                float weight_offset) {
    if (n <= 0) return;
    /* All reads of x for the statistic happen before any write, so out may
     * alias x; the second loop reads x[i] before writing out[i]. */
    float inv = 1.0f / sqrtf(sum_squares_f32(x, n) / (float)n + eps);
    if (w) {
        for (int i = 0; i < n; i++)
            out[i] = x[i] * inv * (weight_offset + w[i]);
    } else {
        /* NULL weight means no scale at all, whatever the offset. */
        for (int i = 0; i < n; i++) out[i] = x[i] * inv;
    }
}

#if defined(__x86_64__)
/* Whether the vector activations run: not in precision exact. */
static bool vector_activations(void) {
    return sp_simd_avx2_active() && sp_mm_precision() != SP_PRECISION_EXACT;
}
#endif

void sp_silu_mul(float *gate, const float *up, int n) {
#if defined(__x86_64__)
    if (vector_activations()) {
        sp_silu_mul_avx2(gate, up, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        /* expf(-g) overflows to inf for g < -88: g / inf = -0, the limit. */
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void sp_gelu_tanh_mul(float *gate, const float *up, int n) {
#if defined(__x86_64__)
    if (vector_activations()) {
        sp_gelu_tanh_mul_avx2(gate, up, n);
        return;
    }
#endif
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        float t = tanhf(k * (g + 0.044715f * g * g * g));
        gate[i] = 0.5f * g * (1.0f + t) * up[i];
    }
}

void sp_gelu_erf(float *x, int n) {
#if defined(__x86_64__)
    if (vector_activations()) {
        sp_gelu_erf_avx2(x, n);
        return;
    }
#endif
    /* 1 + erf(x / sqrt 2) written as erfc(-x / sqrt 2): no cancellation in
     * the negative tail, where 1 + erff keeps only a few bits. */
    for (int i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * erfcf(-x[i] * (float)M_SQRT1_2);
}

float sp_mlx_exp_sum(const float *x, int n, float shift, float *out) {
#if defined(__x86_64__)
    if (sp_simd_avx2_active()) return sp_mlx_exp_sum_avx2(x, n, shift, out);
#endif
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        float t = sp_mlx_exp(x[i] - shift);
        if (out) out[i] = t;
        sum += t;
    }
    return sum;
}

static float max_f32(const float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

/* The normalizer sums up to a vocabulary's worth of terms (~1e5): it is
 * accumulated in double so that log-probabilities used for sampling and
 * scoring do not drift with vocabulary size. */
void sp_softmax(float *x, int n) {
    if (n <= 0) return;
    float m = max_f32(x, n);
    /* All entries -inf (or a +inf/NaN present): the result is undefined, and
     * x - m yields NaN everywhere, as in the reference frameworks. */
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        float e = expf(x[i] - m);
        x[i] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void sp_log_softmax(float *x, int n) {
    if (n <= 0) return;
    float m = max_f32(x, n);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += expf(x[i] - m);
    /* Subtract m first: with large logits m + log(sum) would round away
     * the small log(sum). -inf entries stay -inf. */
    float ls = (float)log(sum);
    for (int i = 0; i < n; i++) x[i] = (x[i] - m) - ls;
}
