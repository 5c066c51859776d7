/* Element-type facts and exact half-precision conversions. */
#include "compute/tensor.h"
#include "compute/ggml/ggml_quants.h"

#include <math.h>

size_t sp_dtype_size(sp_dtype t) {
    switch (t) {
    case SP_DTYPE_F64: case SP_DTYPE_I64: case SP_DTYPE_U64: return 8;
    case SP_DTYPE_F32: case SP_DTYPE_I32: case SP_DTYPE_U32: return 4;
    case SP_DTYPE_F16: case SP_DTYPE_BF16:
    case SP_DTYPE_I16: case SP_DTYPE_U16: return 2;
    case SP_DTYPE_I8: case SP_DTYPE_U8: case SP_DTYPE_BOOL: return 1;
    case SP_DTYPE_COUNT: break;
    }
    return 0;
}

const char *sp_dtype_name(sp_dtype t) {
    static const char *names[SP_DTYPE_COUNT] = {
        "F32", "F16", "BF16", "F64", "I8", "U8", "I16",
        "U16", "I32", "U32", "I64", "U64", "BOOL"};
    return (unsigned)t < SP_DTYPE_COUNT ? names[t] : "?";
}

const int8_t sp_mxfp4_kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                     0, -1, -2, -3, -4, -6, -8, -12};

size_t sp_weight_nbytes(const sp_weight *w) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    switch (w->type) {
    case SP_W_F32: return n * 4;
    case SP_W_F16: case SP_W_BF16: return n * 2;
    case SP_W_AFFINE: {
        size_t groups = (size_t)w->rows * (size_t)(w->cols / w->group_size);
        return (size_t)w->rows * sp_affine_row_bytes(w) +
               2 * groups * sp_dtype_size(w->qparam_dtype);
    }
    case SP_W_GGML:
        return (size_t)w->rows * sp_ggml_row_size(w->ggml_type, w->cols);
    case SP_W_MXFP4:
        return n / 2 + n / 32;
    }
    return 0;
}

sp_weight sp_weight_row_block(const sp_weight *w, int64_t first, int64_t n) {
    sp_weight v = *w;
    v.rows = n;
    const unsigned char *data = w->data;
    size_t r = (size_t)first;
    switch (w->type) {
    case SP_W_F32: v.data = data + r * (size_t)w->cols * 4; break;
    case SP_W_F16: case SP_W_BF16:
        v.data = data + r * (size_t)w->cols * 2;
        break;
    case SP_W_AFFINE: {
        size_t qrow = (size_t)(w->cols / w->group_size) *
                      sp_dtype_size(w->qparam_dtype);
        v.data = data + r * sp_affine_row_bytes(w);
        v.scales = (const unsigned char *)w->scales + r * qrow;
        v.biases = (const unsigned char *)w->biases + r * qrow;
        break;
    }
    case SP_W_GGML:
        v.data = data + r * sp_ggml_row_size(w->ggml_type, w->cols);
        break;
    case SP_W_MXFP4:
        v.data = data + r * (size_t)(w->cols / 2);
        v.scales = (const unsigned char *)w->scales + r * (size_t)(w->cols / 32);
        break;
    }
    return v;
}

float sp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);          /* inf / NaN */
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (mant << 13); /* normal */
    } else if (mant == 0) {
        u = sign;                                       /* zero */
    } else {
        /* Subnormal half: value = mant * 2^-24, exact in f32. */
        float f = (float)mant * 5.9604644775390625e-8f;
        memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t sp_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;       /* NaN */
    if (abs >= 0x477ff000u) return sign | 0x7c00u;      /* overflow -> inf */
    if (abs < 0x38800000u) {
        /* Result is subnormal or zero: scale so that rounding happens at the
         * f16 subnormal step (2^-24), letting the FPU round to nearest even. */
        float a;
        memcpy(&a, &abs, 4);
        float scaled = a * 16777216.0f; /* 2^24 */
        uint32_t m = (uint32_t)nearbyintf(scaled);
        return sign | (uint16_t)m;
    }
    /* Normal: round mantissa from 23 to 10 bits, nearest even. */
    uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}
