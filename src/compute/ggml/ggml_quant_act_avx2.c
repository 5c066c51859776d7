/* The activation quantizers of ggml_dot.c (q8_0 / q8_1 as llama.cpp's x86
 * build runs them, q8_K as quantize_row_q8_K_ref) and their group sums on
 * AVX2, giving the same bits: the same f32 products, rounded to nearest
 * even by vcvtps2dq in the default rounding mode (what round_act and
 * nearest_int compute for |v| < 2^22), the same maxima (q8_K: the first
 * value of largest magnitude) and the same integer sums. At precision fast
 * the scalar loops were a tenth of a prefill: every product quantizes each
 * of its tokens once. */
#include "compute/ggml/ggml_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)

static inline float qa_hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline int32_t qa_hsum128(__m128i v) {
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1));
    return _mm_cvtsi128_si32(v);
}

/* 32 int32 in [-127, 127] (four vectors in column order) as 32 int8. */
static inline __m256i qa_pack(const __m256i v[4]) {
    const __m256i ab = _mm256_packs_epi32(v[0], v[1]);
    const __m256i cd = _mm256_packs_epi32(v[2], v[3]);
    /* dwords: v0[0..3] v1[0..3] v2[0..3] v3[0..3] | v0[4..7] v1[4..7] ... */
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline float qa_f16_round(float f) { return sp_f16_to_f32(sp_f32_to_f16(f)); }

/* quantize_q8_01: per 32, d = amax / 127, q = x * (127 / amax) rounded. */
static void qa_q8_01(const float *x, int64_t cols, bool with_s, sp_ggml_act *a) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t b = 0; b < cols / 32; b++) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            m = _mm256_max_ps(m, _mm256_and_ps(v[i], abs_mask));
        }
        const float amax = qa_hmax(m);
        const float d = amax / ((1 << 7) - 1);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
        _mm256_storeu_si256((__m256i *)(a->q + 32 * b), qa_pack(q));
        a->d[b] = qa_f16_round(d);
        if (with_s) {
            const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                               _mm256_add_epi32(q[2], q[3]));
            const int32_t sum = qa_hsum128(_mm_add_epi32(
                _mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
            a->s[b] = qa_f16_round((float)sum * d);
        } else {
            a->s[b] = 0.0f;
        }
    }
}

/* quantize_row_q8_K_ref: per 256, the first value of largest magnitude
 * `max`, iscale = -127 / max, q = min(127, x * iscale rounded), d = 1 /
 * iscale; an all-zero block gets d = 0 and zeros. */
static void qa_q8_K(const float *x, int64_t cols, sp_ggml_act *a) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t b = 0; b < cols / SP_QK_K; b++) {
        const float *xb = x + b * SP_QK_K;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < SP_QK_K / 8; i++)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xb + 8 * i), abs_mask));
        const float amax = qa_hmax(m);
        int8_t *q = a->q + b * SP_QK_K;
        if (!amax) {
            a->d[b] = 0;
            memset(q, 0, SP_QK_K);
            continue;
        }
        float max = 0;
        const __m256 am = _mm256_set1_ps(amax);
        for (int i = 0; i < SP_QK_K / 8; i++) {
            const __m256 v = _mm256_loadu_ps(xb + 8 * i);
            const int hit = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), am, _CMP_EQ_OQ));
            if (hit) {
                max = xb[8 * i + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i hi = _mm256_set1_epi32(127);
        for (int c = 0; c < SP_QK_K; c += 32) {
            __m256i v[4];
            for (int i = 0; i < 4; i++)
                v[i] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + c + 8 * i), is)), hi);
            _mm256_storeu_si256((__m256i *)(q + c), qa_pack(v));
        }
        a->d[b] = 1 / iscale;
    }
}

/* sum4, sum32 (and for q8_K bsums) of a->q's first `cols` values. */
static void qa_group_sums(sp_ggml_act *a, int64_t cols, bool bsums) {
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < cols / 32; g++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(a->q + 32 * g));
        const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
        _mm256_storeu_si256((__m256i *)(a->sum4 + 8 * g), s4);
        const int32_t lo = qa_hsum128(_mm256_castsi256_si128(s4));
        const int32_t hi = qa_hsum128(_mm256_extracti128_si256(s4, 1));
        a->sum32[g] = lo + hi;
        if (bsums) {
            a->bsums[2 * g] = (int16_t)lo;
            a->bsums[2 * g + 1] = (int16_t)hi;
        }
    }
}

bool sp_ggml_quantize_act_avx2(uint32_t act_type, const float *x, int64_t cols,
                               sp_ggml_act *out) {
    if (!x || !out || cols <= 0 || cols > SP_GGML_DOT_MAX_COLS) return false;
    switch (act_type) {
    case SP_GGML_Q8_0:
    case SP_GGML_Q8_1:
        if (cols % 32) return false;
        qa_q8_01(x, cols, act_type == SP_GGML_Q8_1, out);
        break;
    case SP_GGML_Q8_K:
        if (cols % SP_QK_K) return false;
        qa_q8_K(x, cols, out);
        break;
    default: return false;
    }
    qa_group_sums(out, cols, act_type == SP_GGML_Q8_K);
    return true;
}
SP_TARGET_END

#else
bool sp_ggml_quantize_act_avx2(uint32_t act_type, const float *x, int64_t cols,
                               sp_ggml_act *out) {
    (void)act_type, (void)x, (void)cols, (void)out;
    return false;
}
#endif
