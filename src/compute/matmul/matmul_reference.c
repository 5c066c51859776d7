/* Plain scalar reference of sp_matmul, the yardstick of the tests and of
 * future SIMD kernels. It decodes one element at a time with its own bit
 * arithmetic (sharing nothing with the fast decoders) and accumulates in
 * double. */
#include "compute/matmul/matmul.h"

#include <math.h>

#include "compute/matmul/matmul_internal.h"

/* Element (r, c) of w as stored, dequantized. */
static double sp_ref_element(const sp_weight *w, int64_t r, int64_t c) {
    const uint8_t *d = w->data;
    const size_t idx = (size_t)r * (size_t)w->cols + (size_t)c;
    switch (w->type) {
    case SP_W_F32: {
        float f;
        memcpy(&f, d + 4 * idx, 4);
        return f;
    }
    case SP_W_F16:
    case SP_W_BF16: {
        uint16_t h;
        memcpy(&h, d + 2 * idx, 2);
        return w->type == SP_W_F16 ? sp_f16_to_f32(h) : sp_bf16_to_f32(h);
    }
    case SP_W_AFFINE: {
        const uint8_t *row = d + (size_t)r * sp_affine_row_bytes(w);
        uint32_t q = 0;
        for (int b = 0; b < w->bits; b++) {
            const uint64_t bit = (uint64_t)c * (uint64_t)w->bits + (uint64_t)b;
            q |= (uint32_t)((row[bit / 8] >> (bit % 8)) & 1u) << b;
        }
        const size_t g = (size_t)r * (size_t)(w->cols / w->group_size) +
                         (size_t)(c / w->group_size);
        float s, bias;
        if (w->qparam_dtype == SP_DTYPE_F32) {
            memcpy(&s, (const uint8_t *)w->scales + 4 * g, 4);
            memcpy(&bias, (const uint8_t *)w->biases + 4 * g, 4);
        } else {
            uint16_t hs, hb;
            memcpy(&hs, (const uint8_t *)w->scales + 2 * g, 2);
            memcpy(&hb, (const uint8_t *)w->biases + 2 * g, 2);
            const int is_f16 = w->qparam_dtype == SP_DTYPE_F16;
            s = is_f16 ? sp_f16_to_f32(hs) : sp_bf16_to_f32(hs);
            bias = is_f16 ? sp_f16_to_f32(hb) : sp_bf16_to_f32(hb);
        }
        return (double)s * q + bias;
    }
    case SP_W_MXFP4: {
        /* OCP MX: E2M1 is sign, 2 exponent bits (bias 1), 1 mantissa bit */
        const uint8_t byte = d[(size_t)r * (size_t)(w->cols / 2) + (size_t)(c / 2)];
        const int q = (byte >> (4 * (c % 2))) & 15;
        const int ex = (q >> 1) & 3, m = q & 1;
        const double mag = ex ? ldexp(1.0 + 0.5 * m, ex - 1) : 0.5 * m;
        const int e = ((const uint8_t *)w->scales)[(size_t)r * (size_t)(w->cols / 32) +
                                                   (size_t)(c / 32)];
        const double scale = e == 255 ? INFINITY : ldexp(1.0, e - 127);
        return (q & 8 ? -mag : mag) * scale;
    }
    case SP_W_GGML: /* not covered: sp_weight_usable rejects it */
        break;
    }
    return 0.0;
}

void sp_matmul_reference(const sp_weight *w, const float *x, int n_tokens,
                         float *y) {
    if (!w || !x || !y || n_tokens <= 0) return;
    if (!sp_weight_usable(w)) {
        for (int64_t i = 0; i < (int64_t)n_tokens * w->rows; i++) y[i] = NAN;
        return;
    }
    for (int t = 0; t < n_tokens; t++) {
        for (int64_t r = 0; r < w->rows; r++) {
            double acc = 0.0;
            for (int64_t c = 0; c < w->cols; c++)
                acc += sp_ref_element(w, r, c) * x[(int64_t)t * w->cols + c];
            y[(int64_t)t * w->rows + r] = (float)acc;
        }
    }
}
