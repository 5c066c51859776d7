/* The encoder (BERT) element-wise math: LayerNorm and the erf GELU. The
 * sums run in double: a row is only a few hundred values, and the mean
 * subtracted in f32 would lose the low bits of rows with a large offset. */
#include "compute/ops.h"

#include <math.h>

void sp_layernorm(float *out, const float *x, const float *w, const float *b,
                  int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += x[i];
    const double mean = sum / n;
    double var = 0.0;
    for (int i = 0; i < n; i++) {
        const double d = x[i] - mean;
        var += d * d;
    }
    const double inv = 1.0 / sqrt(var / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = (float)((x[i] - mean) * inv) * w[i] + b[i];
}

void sp_gelu_erf(float *x, int n) {
    for (int i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}
