/* ggml tensor types as stored in GGUF files: type numbers, block layouts,
 * per-type traits and reference dequantization to float32.
 *
 * The block structs mirror ggml-common.h byte for byte (static_asserts below)
 * so that later dot-product kernels can walk a row as an array of blocks and
 * read the fields directly instead of going through float32. A row of `ne0`
 * elements is ne0 / block_size consecutive blocks; rows follow each other
 * without padding. f16 fields are kept as raw uint16_t bits (convert with
 * sp_f16_to_f32) because C17 has no portable half type.
 *
 * Alignment: every struct needs only 2-byte alignment, except sp_block_q8_K
 * (4). The GGUF reader rejects tensors whose data is not aligned for their
 * block type, so a tensor's data pointer can be cast to the block pointer.
 *
 * Dequantization matches ggml's reference dequantize_row_* bit for bit: the
 * same float32 operations in the same order. That relies on the compiler not
 * contracting a*b+c into an FMA, which holds in ISO C mode (-std=c17 implies
 * -ffp-contract=off on GCC); ggml_quants.c also asks for it explicitly. */
#ifndef SP_COMPUTE_GGML_QUANTS_H
#define SP_COMPUTE_GGML_QUANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ggml_type numbers (ggml.h). Gaps are types ggml removed. Only the types
 * with a dequantizer below are supported for loading; the others are named
 * so that errors can say what a file holds. */
typedef enum sp_ggml_type {
    SP_GGML_F32 = 0,
    SP_GGML_F16 = 1,
    SP_GGML_Q4_0 = 2,
    SP_GGML_Q4_1 = 3,
    SP_GGML_Q5_0 = 6,
    SP_GGML_Q5_1 = 7,
    SP_GGML_Q8_0 = 8,
    SP_GGML_Q8_1 = 9,
    SP_GGML_Q2_K = 10,
    SP_GGML_Q3_K = 11,
    SP_GGML_Q4_K = 12,
    SP_GGML_Q5_K = 13,
    SP_GGML_Q6_K = 14,
    SP_GGML_Q8_K = 15,
    SP_GGML_IQ2_XXS = 16,
    SP_GGML_IQ2_XS = 17,
    SP_GGML_IQ3_XXS = 18,
    SP_GGML_IQ1_S = 19,
    SP_GGML_IQ4_NL = 20,
    SP_GGML_IQ3_S = 21,
    SP_GGML_IQ2_S = 22,
    SP_GGML_IQ4_XS = 23,
    SP_GGML_I8 = 24,
    SP_GGML_I16 = 25,
    SP_GGML_I32 = 26,
    SP_GGML_I64 = 27,
    SP_GGML_F64 = 28,
    SP_GGML_IQ1_M = 29,
    SP_GGML_BF16 = 30,
    SP_GGML_TQ1_0 = 34,
    SP_GGML_TQ2_0 = 35,
    SP_GGML_MXFP4 = 39,
    SP_GGML_NVFP4 = 40,
    SP_GGML_Q1_0 = 41,
    SP_GGML_TYPE_LIMIT = 64 /* type numbers at or above are unknown */
} sp_ggml_type;

#define SP_QK4_0 32
#define SP_QK4_1 32
#define SP_QK5_0 32
#define SP_QK5_1 32
#define SP_QK8_0 32
#define SP_QK8_1 32
#define SP_QK_K 256
#define SP_K_SCALE_SIZE 12

/* x = d * (q - 8), q in 0..15; qs[j] holds element j (low nibble) and
 * element j + 16 (high nibble). */
typedef struct sp_block_q4_0 {
    uint16_t d;
    uint8_t qs[SP_QK4_0 / 2];
} sp_block_q4_0;

/* x = d * q + m, q in 0..15; nibble layout as q4_0. */
typedef struct sp_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[SP_QK4_1 / 2];
} sp_block_q4_1;

/* x = d * (q - 16), q 5 bits: low nibble as q4_0, bit j of the little-endian
 * u32 qh is the fifth bit of element j. */
typedef struct sp_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[SP_QK5_0 / 2];
} sp_block_q5_0;

/* x = d * q + m, q 5 bits laid out as q5_0. */
typedef struct sp_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[SP_QK5_1 / 2];
} sp_block_q5_1;

/* x = d * q. */
typedef struct sp_block_q8_0 {
    uint16_t d;
    int8_t qs[SP_QK8_0];
} sp_block_q8_0;

/* x = (kvalues[q] / 2) * 2^(e - 127): E2M1 codes q (sp_mxfp4_kvalues,
 * tensor.h) under one E8M0 exponent e; qs as q4_0 (element j low nibble,
 * j + 16 high). */
#define SP_QK_MXFP4 32
typedef struct sp_block_mxfp4 {
    uint8_t e;
    uint8_t qs[SP_QK_MXFP4 / 2];
} sp_block_mxfp4;

/* Activation-side partner of q4_1/q5_1 in dot products: s = d * sum(qs).
 * ggml defines no dequantizer for it and files do not store it. (The `gguf`
 * Python package still lists an older 40-byte layout with f32 d and s.) */
typedef struct sp_block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[SP_QK8_1];
} sp_block_q8_1;

/* 16 sub-blocks of 16: x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4),
 * q 2 bits. */
typedef struct sp_block_q2_K {
    uint8_t scales[SP_QK_K / 16];
    uint8_t qs[SP_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} sp_block_q2_K;

/* 16 sub-blocks of 16: x = d * (s - 32) * (q - (hbit ? 0 : 4)), q 2 low bits
 * from qs plus a high bit in hmask, s 6 bits packed into scales[12]. */
typedef struct sp_block_q3_K {
    uint8_t hmask[SP_QK_K / 8];
    uint8_t qs[SP_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} sp_block_q3_K;

/* 8 sub-blocks of 32: x = d * sc * q - dmin * m, q 4 bits, sc and m 6 bits
 * packed into scales[12] (see sp_get_scale_min_k4). */
typedef struct sp_block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[SP_K_SCALE_SIZE];
    uint8_t qs[SP_QK_K / 2];
} sp_block_q4_K;

/* As q4_K with a fifth bit per element in qh. */
typedef struct sp_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[SP_K_SCALE_SIZE];
    uint8_t qh[SP_QK_K / 8];
    uint8_t qs[SP_QK_K / 2];
} sp_block_q5_K;

/* 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q 6 bits (4 in ql, 2
 * in qh). */
typedef struct sp_block_q6_K {
    uint8_t ql[SP_QK_K / 2];
    uint8_t qh[SP_QK_K / 4];
    int8_t scales[SP_QK_K / 16];
    uint16_t d;
} sp_block_q6_K;

/* Activation-side partner of the k-quants: x = d * q; bsums[i] is the sum of
 * qs over the i-th group of 16. */
typedef struct sp_block_q8_K {
    float d;
    int8_t qs[SP_QK_K];
    int16_t bsums[SP_QK_K / 16];
} sp_block_q8_K;

_Static_assert(sizeof(sp_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(sp_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(sp_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(sp_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(sp_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(sp_block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(sp_block_mxfp4) == 17, "mxfp4 layout");
_Static_assert(sizeof(sp_block_q2_K) == 84, "q2_K layout");
_Static_assert(sizeof(sp_block_q3_K) == 110, "q3_K layout");
_Static_assert(sizeof(sp_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(sp_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(sp_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(sp_block_q8_K) == 292, "q8_K layout");

/* Dequantize `k` elements (a multiple of the block size) from `x` to `y`.
 * `x` must be aligned as the type's block struct. */
typedef void (*sp_ggml_dequant_fn)(const void *x, float *y, int64_t k);

typedef struct sp_ggml_type_traits {
    const char *name;        /* ggml's spelling: "Q4_K", "F16", ... */
    int64_t block_size;      /* elements per block (1 for plain types) */
    size_t type_size;        /* bytes per block */
    size_t align;            /* alignment the block struct needs */
    sp_ggml_dequant_fn to_f32; /* NULL: Spindle cannot load this type */
} sp_ggml_type_traits;

/* Traits of a ggml type number, or NULL when the number is not a ggml type
 * Spindle knows of. A known type may still lack to_f32. */
const sp_ggml_type_traits *sp_ggml_traits(uint32_t type);

/* Name of `type`, or NULL when unknown. */
const char *sp_ggml_type_name(uint32_t type);

/* True when tensors of `type` can be loaded (dequantized). */
bool sp_ggml_type_supported(uint32_t type);

/* Bytes of a row of `ne0` elements; 0 when the type is unknown or ne0 is
 * not a multiple of the block size. */
size_t sp_ggml_row_size(uint32_t type, int64_t ne0);

/* 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block. */
static inline void sp_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d,
                                       uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* 6-bit scale j (0..15) of a q3_K block, as a signed value (s - 32): low
 * 4 bits in bytes 0..7 (low nibbles first), high 2 bits in bytes 8..11. */
static inline int sp_get_scale_k3(const uint8_t *s, int j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

/* AVX2 versions of seven of the reference dequantizers below, bit for bit
 * (ggml_dequant_avx2.c; x86 only). The type table calls them when an x86
 * SIMD level is in use; callers never need to. */
void sp_dequantize_row_q4_0_avx2(const void *x, float *y, int64_t k);
void sp_dequantize_row_q4_1_avx2(const void *x, float *y, int64_t k);
void sp_dequantize_row_q5_0_avx2(const void *x, float *y, int64_t k);
void sp_dequantize_row_q5_1_avx2(const void *x, float *y, int64_t k);
void sp_dequantize_row_q8_0_avx2(const void *x, float *y, int64_t k);
void sp_dequantize_row_q4_K_avx2(const void *x, float *y, int64_t k);
void sp_dequantize_row_q6_K_avx2(const void *x, float *y, int64_t k);

void sp_dequantize_row_f32(const void *x, float *y, int64_t k);
void sp_dequantize_row_f16(const void *x, float *y, int64_t k);
void sp_dequantize_row_bf16(const void *x, float *y, int64_t k);
void sp_dequantize_row_q4_0(const void *x, float *y, int64_t k);
void sp_dequantize_row_q4_1(const void *x, float *y, int64_t k);
void sp_dequantize_row_q5_0(const void *x, float *y, int64_t k);
void sp_dequantize_row_q5_1(const void *x, float *y, int64_t k);
void sp_dequantize_row_q8_0(const void *x, float *y, int64_t k);
void sp_dequantize_row_mxfp4(const void *x, float *y, int64_t k);
void sp_dequantize_row_q2_K(const void *x, float *y, int64_t k);
void sp_dequantize_row_q3_K(const void *x, float *y, int64_t k);
void sp_dequantize_row_q4_K(const void *x, float *y, int64_t k);
void sp_dequantize_row_q5_K(const void *x, float *y, int64_t k);
void sp_dequantize_row_q6_K(const void *x, float *y, int64_t k);
void sp_dequantize_row_q8_K(const void *x, float *y, int64_t k);

#endif
