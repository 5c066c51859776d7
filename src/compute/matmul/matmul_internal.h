/* Shared pieces of the matmul kernels: decoding spans of weight rows to f32.
 *
 * Every storage type is reduced to "decode a span of a row into an f32 buffer,
 * then dot it with activations", so that a SIMD pass can replace a decoder or
 * the dot loops independently. Weight data points into mmapped files and may
 * be unaligned: every load goes through memcpy. */
#ifndef SP_COMPUTE_MATMUL_INTERNAL_H
#define SP_COMPUTE_MATMUL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "compute/tensor.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the weight decoders assume a little-endian host"
#endif

/* Branch-free, exact f16 -> f32 (normals, subnormals, inf, NaN) that gcc can
 * vectorize, unlike the table-free scalar sp_f16_to_f32 with its branches.
 * Normals/inf/NaN: shift exponent+mantissa into place and rescale by 2^-112
 * (exponent 31 lands on f32 exponent 255). Subnormals: build 0.5 + m*2^-24
 * with the mantissa as low bits of a float in [0.5, 1) and subtract 0.5. */
static inline float sp_half_to_float(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    uint32_t nu = (two_w >> 4) + (0xE0u << 23);
    float normalized, denormalized;
    memcpy(&normalized, &nu, 4);
    normalized *= 0x1.0p-112f;
    uint32_t du = (two_w >> 17) | (126u << 23);
    memcpy(&denormalized, &du, 4);
    denormalized -= 0.5f;
    uint32_t nbits, dbits;
    memcpy(&nbits, &normalized, 4);
    memcpy(&dbits, &denormalized, 4);
    /* A mask rather than ?: keeps the loop free of control flow. */
    const uint32_t is_sub = 0u - (uint32_t)((two_w >> 27) == 0); /* two_w < 2^27 */
    const uint32_t r = sign | (dbits & is_sub) | (nbits & ~is_sub);
    float f;
    memcpy(&f, &r, 4);
    return f;
}

/* Element i of an F32/F16/BF16 array at a possibly unaligned address. */
static inline float sp_load_float_unaligned(const void *p, sp_dtype t,
                                            size_t i) {
    if (t == SP_DTYPE_F16 || t == SP_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)p + 2 * i, 2);
        return t == SP_DTYPE_F16 ? sp_half_to_float(h) : sp_bf16_to_f32(h);
    }
    float f;
    memcpy(&f, (const uint8_t *)p + 4 * i, 4);
    return f;
}

/* Whether the kernels can handle w (the loader validates weights; this only
 * keeps a bad descriptor from causing out-of-bounds reads or a division by
 * zero). Entry points given an unusable weight write NaNs. */
bool sp_weight_usable(const sp_weight *w);

/* Decode columns [c0, c0 + n) of row r of w to f32 in out. For SP_W_AFFINE,
 * c0 and n must be multiples of 8 (a packed block of 8 codes). */
void sp_decode_span(const sp_weight *w, int64_t r, int64_t c0, int64_t n,
                    float *restrict out);

/* Span decoders of the individual storage types (matmul_decode.c). */
void sp_decode_f16(const void *src, int64_t n, float *restrict out);
void sp_decode_bf16(const void *src, int64_t n, float *restrict out);
void sp_decode_affine(const sp_weight *w, int64_t r, int64_t c0, int64_t n,
                      float *restrict out);
void sp_decode_mxfp4(const sp_weight *w, int64_t r, int64_t c0, int64_t n,
                     float *restrict out);

#endif
