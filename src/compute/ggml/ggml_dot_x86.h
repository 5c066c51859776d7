/* Helpers shared by the x86 decode kernels of ggml weights
 * (ggml_dot_avx2.c, ggml_dot_vnni.c, ggml_dot_kquants_vnni.c). Include it
 * after the file's `#pragma GCC target(...)` (which must enable f16c) and
 * <immintrin.h>, inside the file's x86 guard. */
#ifndef SP_COMPUTE_GGML_DOT_X86_H
#define SP_COMPUTE_GGML_DOT_X86_H

#include <stdint.h>
#include <string.h>

#define SP_INLINE static inline __attribute__((always_inline))

/* The f16 at p (any alignment) as f32. */
SP_INLINE float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The 32-column block types, as kinds: 0 q4_0 {d, qs[16]}, 1 q8_0
 * {d, qs[32]}, 2 q4_1 {d, m, qs[16]}, 3 q5_0 {d, qh[4], qs[16]}, 4 q5_1
 * {d, m, qh[4], qs[16]}; d (and m) are f16. -1: not such a type. */
SP_INLINE int block_kind(uint32_t type) {
    return type == SP_GGML_Q4_0   ? 0
           : type == SP_GGML_Q8_0 ? 1
           : type == SP_GGML_Q4_1 ? 2
           : type == SP_GGML_Q5_0 ? 3
           : type == SP_GGML_Q5_1 ? 4
                                  : -1;
}
#define KIND_BYTES(kind) ((kind) == 0   ? sizeof(sp_block_q4_0)             \
                          : (kind) == 1 ? sizeof(sp_block_q8_0)             \
                          : (kind) == 2 ? sizeof(sp_block_q4_1)             \
                          : (kind) == 3 ? sizeof(sp_block_q5_0)             \
                                        : sizeof(sp_block_q5_1))
#define KIND_QS(kind) ((kind) == 2 ? 4 : (kind) == 3 ? 6 : (kind) == 4 ? 8 : 2)
#define KIND_QH(kind) ((kind) == 3 ? 2 : 4)  /* offset of qh (kinds 3, 4) */
#define KIND_FIVE(kind) ((kind) >= 3)        /* has a fifth bit */
#define KIND_MIN(kind) ((kind) == 2 || (kind) == 4) /* min term, no offset */
#define KIND_SHIFT(kind) ((kind) == 0 ? 3 : (kind) == 3 ? 4 : 7) /* log2 offset */

/* The fifth bits of a q5_0 / q5_1 block (bit j: column j). */
SP_INLINE uint32_t qh_at(const uint8_t *blk, int kind) {
    uint32_t v;
    memcpy(&v, blk + KIND_QH(kind), 4);
    return v;
}

/* The 8 6-bit scales (bytes 0..7) and 8 mins (bytes 8..15) of a q4_K/q5_K
 * scales[12] field (sp_get_scale_min_k4 for all j at once: sub-blocks 0..3
 * keep the low 6 bits of bytes 0..3 / 4..7; sub-blocks 4..7 take a nibble of
 * bytes 8..11 and the top two bits of bytes 0..3 / 4..7). */
SP_INLINE __m128i k4_scales_mins(const uint8_t *s) {
    uint32_t w0, w1, w2;
    memcpy(&w0, s, 4);
    memcpy(&w1, s + 4, 4);
    memcpy(&w2, s + 8, 4);
    const uint32_t low6 = 0x3f3f3f3fu, nib = 0x0f0f0f0fu, two = 0x03030303u;
    const uint32_t sc_lo = w0 & low6, m_lo = w1 & low6;
    const uint32_t sc_hi = (w2 & nib) | ((w0 >> 6) & two) << 4;
    const uint32_t m_hi = ((w2 >> 4) & nib) | ((w1 >> 6) & two) << 4;
    return _mm_set_epi32((int)m_hi, (int)m_lo, (int)sc_hi, (int)sc_lo);
}

/* Bytes 16 (the fifth bit of q5_0 / q5_1 codes) where bit j of qh is set,
 * byte j standing for column j. */
SP_INLINE __m256i fifth_bits(uint32_t qh) {
    /* byte j takes byte j / 8 of qh, then tests bit j % 8 of it */
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)qh),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                         2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                            _mm256_set1_epi8(16));
}

/* The 32 nibbles of the 16 bytes at p as bytes in column order (low
 * nibbles, then high ones: the qs of a 32-column block). */
SP_INLINE __m256i nibbles_one(const uint8_t *p) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)p);
    const __m256i both = _mm256_inserti128_si256(
        _mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

#include "compute/simd_reduce_avx2.h"

/* Calls call(n) with the token count nt (1..SP_MM_DECODE_TOKENS) as a constant, so that the
 * per-token loops of an inlined row kernel unroll. */
#define SP_NT_SWITCH(call, nt)                                                 \
    switch (nt) {                                                              \
    case 1: call(1); break;                                                    \
    case 2: call(2); break;                                                    \
    case 3: call(3); break;                                                    \
    case 4: call(4); break;                                                    \
    case 5: call(5); break;                                                    \
    case 6: call(6); break;                                                    \
    case 7: call(7); break;                                                    \
    default: call(8); break;                                                   \
    }

/* F(k, ...) for k = v in 0..4, k a constant (for the kernels inlined per
 * block kind). */
#define SP_CONST_KIND5(v, F, ...)                                              \
    ((v) == 0   ? F(0, __VA_ARGS__)                                            \
     : (v) == 1 ? F(1, __VA_ARGS__)                                            \
     : (v) == 2 ? F(2, __VA_ARGS__)                                            \
     : (v) == 3 ? F(3, __VA_ARGS__)                                            \
                : F(4, __VA_ARGS__))

/* The body of a decode entry point: for each row r in [r0, r1) of weight w
 * (row bytes at `row`), ROW(n) with the token count n_tokens (1..SP_MM_DECODE_TOKENS) as a
 * constant n; ROW writes y + r, strided by w->rows. */
#define SP_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW)                              \
    do {                                                                       \
        const size_t row_bytes_ = sp_ggml_row_size((w)->ggml_type, (w)->cols); \
        for (int64_t r = (r0); r < (r1); r++) {                                \
            const uint8_t *row = (const uint8_t *)(w)->data + (size_t)r * row_bytes_; \
            SP_NT_SWITCH(ROW, n_tokens)                                        \
        }                                                                      \
    } while (0)

#endif
