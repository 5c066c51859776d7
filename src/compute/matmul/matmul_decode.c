/* Weight decoders: spans of F16/BF16/F32 rows and of MLX affine- and
 * mxfp4-quantized rows to f32.
 *
 * MLX affine packing (verified against mx.quantize, see
 * tests/unit_py/test_affine_packing.py): a row is one little-endian bit
 * stream, code j occupying bits [j*bits, (j+1)*bits) of the row's uint32
 * words read in order. Hence every block of 8 codes fills exactly `bits`
 * bytes, for 3/5/6 bits as well as for the powers of two, and a block can be
 * decoded from one little-endian 64-bit load of those bytes. */
#include "compute/matmul/matmul_internal.h"

void sp_decode_f16(const void *src, int64_t n, float *restrict out) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        out[i] = sp_half_to_float(h);
    }
}

void sp_decode_bf16(const void *src, int64_t n, float *restrict out) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&out[i], &u, 4);
    }
}

/* Codes of n8 blocks of 8 as floats. Always inlined into a switch on literal
 * bit widths so that shifts and masks are constants. */
static inline __attribute__((always_inline)) void
sp_unpack_codes(const uint8_t *restrict src, int64_t n8, const int bits,
                float *restrict q) {
    const uint64_t mask = (1u << bits) - 1u;
    for (int64_t b = 0; b < n8; b++) {
        uint64_t v = 0;
        memcpy(&v, src + b * bits, (size_t)bits);
        for (int j = 0; j < 8; j++)
            q[b * 8 + j] = (float)(uint32_t)((v >> (j * bits)) & mask);
    }
}

/* Byte-wise variant for widths that divide 8: lets gcc vectorize the
 * extraction (one input byte yields 8 / bits codes). */
static inline __attribute__((always_inline)) void
sp_unpack_codes_pow2(const uint8_t *restrict src, int64_t n8, const int bits,
                     float *restrict q) {
    const int per_byte = 8 / bits;
    const uint32_t mask = (1u << bits) - 1u;
    const int64_t nbytes = n8 * bits;
    for (int64_t i = 0; i < nbytes; i++) {
        const uint32_t byte = src[i];
        for (int j = 0; j < per_byte; j++)
            q[i * per_byte + j] = (float)((byte >> (j * bits)) & mask);
    }
}

static void sp_unpack_any(const uint8_t *src, int64_t n8, int bits,
                          float *restrict q) {
    switch (bits) {
    case 2: sp_unpack_codes_pow2(src, n8, 2, q); break;
    case 3: sp_unpack_codes(src, n8, 3, q); break;
    case 4: sp_unpack_codes_pow2(src, n8, 4, q); break;
    case 5: sp_unpack_codes(src, n8, 5, q); break;
    case 6: sp_unpack_codes(src, n8, 6, q); break;
    case 8: sp_unpack_codes_pow2(src, n8, 8, q); break;
    default: /* excluded by sp_weight_usable */
        break;
    }
}

void sp_decode_affine(const sp_weight *w, int64_t r, int64_t c0, int64_t n,
                      float *restrict out) {
    const int bits = w->bits;
    const int64_t gs = w->group_size;
    const int64_t groups_per_row = w->cols / gs;
    const uint8_t *row =
        (const uint8_t *)w->data + (size_t)r * sp_affine_row_bytes(w);

    sp_unpack_any(row + (size_t)(c0 / 8) * (size_t)bits, n / 8, bits, out);

    /* Apply w = s * q + b group by group over the span. */
    int64_t c = c0;
    while (c < c0 + n) {
        const int64_t g = c / gs;
        int64_t end = (g + 1) * gs;
        if (end > c0 + n) end = c0 + n;
        const size_t qi = (size_t)(r * groups_per_row + g);
        const float s = sp_load_float_unaligned(w->scales, w->qparam_dtype, qi);
        const float b = sp_load_float_unaligned(w->biases, w->qparam_dtype, qi);
        float *restrict o = out + (c - c0);
        const int64_t len = end - c;
        for (int64_t i = 0; i < len; i++) o[i] = s * o[i] + b;
        c = end;
    }
}

/* MXFP4: each code's doubled E2M1 value times half its block's scale (an
 * exact product: at most 2 significant bits times a power of two). */
void sp_decode_mxfp4(const sp_weight *w, int64_t r, int64_t c0, int64_t n,
                     float *restrict out) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * (size_t)(w->cols / 2);
    const uint8_t *e = (const uint8_t *)w->scales + (size_t)r * (size_t)(w->cols / 32);
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = c0 + i;
        const int q = (row[c / 2] >> (4 * (c % 2))) & 15;
        out[i] = (float)sp_mxfp4_kvalues[q] * sp_e8m0_half_mlx(e[c / 32]);
    }
}

bool sp_weight_usable(const sp_weight *w) {
    if (!w || !w->data || w->rows <= 0 || w->cols <= 0) return false;
    switch (w->type) {
    case SP_W_F32:
    case SP_W_F16:
    case SP_W_BF16:
        return true;
    case SP_W_AFFINE: {
        const int b = w->bits, gs = w->group_size;
        const sp_dtype q = w->qparam_dtype;
        return (b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8) &&
               (gs == 32 || gs == 64 || gs == 128) && w->cols % gs == 0 &&
               (q == SP_DTYPE_F32 || q == SP_DTYPE_F16 ||
                q == SP_DTYPE_BF16) &&
               w->scales && w->biases;
    }
    case SP_W_MXFP4:
        return w->bits == 4 && w->group_size == 32 && w->cols % 32 == 0 &&
               w->scales;
    case SP_W_GGML: /* matmul_ggml.c has its own path */
        return false;
    }
    return false;
}

void sp_decode_span(const sp_weight *w, int64_t r, int64_t c0, int64_t n,
                    float *restrict out) {
    const size_t first = (size_t)r * (size_t)w->cols + (size_t)c0;
    switch (w->type) {
    case SP_W_F32:
        memcpy(out, (const uint8_t *)w->data + 4 * first, (size_t)n * 4);
        break;
    case SP_W_F16:
        sp_decode_f16((const uint8_t *)w->data + 2 * first, n, out);
        break;
    case SP_W_BF16:
        sp_decode_bf16((const uint8_t *)w->data + 2 * first, n, out);
        break;
    case SP_W_AFFINE:
        sp_decode_affine(w, r, c0, n, out);
        break;
    case SP_W_MXFP4:
        sp_decode_mxfp4(w, r, c0, n, out);
        break;
    case SP_W_GGML: /* excluded by sp_weight_usable */
        break;
    }
}
