/* The encoder (BERT) LayerNorm; its erf GELU is in ops.c, beside the other
 * activations and their vector dispatch. The sums run in double: a row is
 * only a few hundred values, and the mean subtracted in f32 would lose the
 * low bits of rows with a large offset. */
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
