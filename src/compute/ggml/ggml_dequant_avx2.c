/* AVX2 versions of ggml_quants.c's reference dequantizers for the block
 * types real files use most (q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q6_K),
 * bit for bit: the same integer codes, converted exactly, and the same
 * f32 operations in the same order (a multiply, then an add or subtract:
 * never fused). On an AVX2 CPU the scalar loops were 55 % of a GGUF decode
 * at precision exact and 5-6 % of a Gemma 3 prefill at high (the f32
 * tiles). ggml_quants.c's tables call these when an x86 SIMD level is in
 * use (every one includes AVX2). */
#include "compute/ggml/ggml_quants.h"
#include "compute/tensor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "compute/simd_target.h"

/* gcc's intrinsics are plain vector arithmetic that it would fuse into an
 * FMA (one rounding where the reference rounds twice). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/ggml/ggml_dot_x86.h"

/* The f16 scale as f32: exact. (The hardware quiets a signaling NaN that
 * sp_f16_to_f32 keeps, but every output is a product with the scale, which
 * quiets it in the reference too.) */
SP_INLINE float f16_exact(uint16_t h) { return _cvtsh_ss(h); }

/* 32 int8 codes (byte c = column c) times d, plus m when `add`: y = q d
 * (+ m), rounded after each operation. */
SP_INLINE void store32(float *y, __m256i q, float d, float m, bool add) {
    const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; i++) {
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i])), dv);
        if (add) v = _mm256_add_ps(v, mv);
        _mm256_storeu_ps(y + 8 * i, v);
    }
}

void sp_dequantize_row_q4_0_avx2(const void *vx, float *y, int64_t k) {
    const sp_block_q4_0 *x = vx;
    for (int64_t i = 0; i < k / SP_QK4_0; i++)
        store32(y + i * 32, _mm256_sub_epi8(nibbles_one(x[i].qs), _mm256_set1_epi8(8)),
                f16_exact(x[i].d), 0.0f, false);
}

void sp_dequantize_row_q4_1_avx2(const void *vx, float *y, int64_t k) {
    const sp_block_q4_1 *x = vx;
    for (int64_t i = 0; i < k / SP_QK4_1; i++)
        store32(y + i * 32, nibbles_one(x[i].qs), f16_exact(x[i].d),
                f16_exact(x[i].m), true);
}

SP_INLINE uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

void sp_dequantize_row_q5_0_avx2(const void *vx, float *y, int64_t k) {
    const sp_block_q5_0 *x = vx;
    for (int64_t i = 0; i < k / SP_QK5_0; i++) {
        const __m256i q = _mm256_or_si256(nibbles_one(x[i].qs), fifth_bits(u32_at(x[i].qh)));
        store32(y + i * 32, _mm256_sub_epi8(q, _mm256_set1_epi8(16)),
                f16_exact(x[i].d), 0.0f, false);
    }
}

void sp_dequantize_row_q5_1_avx2(const void *vx, float *y, int64_t k) {
    const sp_block_q5_1 *x = vx;
    for (int64_t i = 0; i < k / SP_QK5_1; i++)
        store32(y + i * 32, _mm256_or_si256(nibbles_one(x[i].qs), fifth_bits(u32_at(x[i].qh))),
                f16_exact(x[i].d), f16_exact(x[i].m), true);
}

void sp_dequantize_row_q8_0_avx2(const void *vx, float *y, int64_t k) {
    const sp_block_q8_0 *x = vx;
    for (int64_t i = 0; i < k / SP_QK8_0; i++)
        store32(y + i * 32, _mm256_loadu_si256((const __m256i *)x[i].qs),
                f16_exact(x[i].d), 0.0f, false);
}

/* 32 codes 0..63 (bytes) as d_sub * q - m_sub (the reference's order). */
SP_INLINE void store32_sub(float *y, __m256i q, float dsub, float msub) {
    const __m256 dv = _mm256_set1_ps(dsub), mv = _mm256_set1_ps(msub);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; i++)
        _mm256_storeu_ps(y + 8 * i, _mm256_sub_ps(
            _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]))), mv));
}

void sp_dequantize_row_q4_K_avx2(const void *vx, float *y, int64_t k) {
    const sp_block_q4_K *x = vx;
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < k / SP_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = f16_exact(x[i].d), min = f16_exact(x[i].dmin);
        for (int j = 0, is = 0; j < SP_QK_K; j += 64, is += 2, q += 32) {
            uint8_t sc, m;
            const __m256i v = _mm256_loadu_si256((const __m256i *)q);
            sp_get_scale_min_k4(is, x[i].scales, &sc, &m);
            store32_sub(y, _mm256_and_si256(v, low), d * sc, min * m);
            sp_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            store32_sub(y + 32, _mm256_and_si256(_mm256_srli_epi16(v, 4), low),
                        d * sc, min * m);
            y += 64;
        }
    }
}

/* 16 codes (int8, -32..31) times (d * sc): the reference's (d * sc) * q. */
SP_INLINE void store16_q6(float *y, __m128i q, float d, int8_t sc) {
    const __m256 s = _mm256_set1_ps(d * sc);
    _mm256_storeu_ps(y, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(
        s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))));
}

void sp_dequantize_row_q6_K_avx2(const void *vx, float *y, int64_t k) {
    const sp_block_q6_K *x = vx;
    const __m256i low = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < k / SP_QK_K; i++) {
        const float d = f16_exact(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < SP_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
            /* the four groups of 32 (y + 0, 32, 64, 96): low / high nibbles
             * of ql[0..32) and ql[32..64), bits 0-1 / 2-3 / 4-5 / 6-7 of qh */
            const __m256i nib[4] = {_mm256_and_si256(l0, low), _mm256_and_si256(l1, low),
                                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), low),
                                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), low)};
            for (int g = 0; g < 4; g++) {
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(h, 2 * g), three);
                const __m256i q = _mm256_sub_epi8(
                    _mm256_or_si256(nib[g], _mm256_slli_epi16(hb, 4)), _mm256_set1_epi8(32));
                store16_q6(y + 32 * g, _mm256_castsi256_si128(q), d, sc[2 * g]);
                store16_q6(y + 32 * g + 16, _mm256_extracti128_si256(q, 1), d, sc[2 * g + 1]);
            }
        }
    }
}
SP_TARGET_END
#endif /* (off x86 the tables keep the reference loops) */
