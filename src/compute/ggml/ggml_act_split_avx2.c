/* ggml_act_split.c's split_block on AVX2, for blocks of 32 (q8_0 / q8_1
 * partners) and 256 values (q8_K), bit for bit: the same max (NaNs skipped
 * as fmaxf skips them), the same scale and reciprocal, the same
 * round-to-nearest-even through the 1.5 * 2^23 trick, the same fused
 * residual. The scalar loop's libm fmaxf / fmaf calls were 13 % of a
 * precision-high decode of SmolLM2 at the AVX2 level. */
#include "compute/ggml/ggml_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/simd_reduce_avx2.h"

/* nearest(v) of ggml_act_split.c, per lane. */
static inline __m256i split_nearest(__m256 v) {
    const __m256 t = _mm256_add_ps(v, _mm256_set1_ps(12582912.f));
    return _mm256_sub_epi32(
        _mm256_and_si256(_mm256_castps_si256(t), _mm256_set1_epi32(0x007fffff)),
        _mm256_set1_epi32(0x00400000));
}

void sp_ggml_split_block_avx2(const float *x, int bs, int levels,
                              int8_t *const q[], float d[], int32_t sum[]) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    /* the packs below interleave 128-bit lanes: this puts them back */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 r[SP_QK_K / 8];
    const int nv = bs / 8;
    for (int v = 0; v < nv; v++) r[v] = _mm256_loadu_ps(x + 8 * v);
    for (int l = 0; l < levels; l++) {
        /* max_ps returns its second operand when the first is NaN */
        __m256 m = _mm256_setzero_ps();
        for (int v = 0; v < nv; v++) m = _mm256_max_ps(_mm256_andnot_ps(sign, r[v]), m);
        const float amax = sp_hmax8(m);
        const float dl = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        __m256i total = _mm256_setzero_si256();
        for (int v0 = 0; v0 < nv; v0 += 4) {
            __m256i c[4];
            for (int v = 0; v < 4; v++) {
                c[v] = split_nearest(_mm256_mul_ps(r[v0 + v], _mm256_set1_ps(id)));
                c[v] = _mm256_max_epi32(_mm256_min_epi32(c[v], hi), lo);
                total = _mm256_add_epi32(total, c[v]);
                r[v0 + v] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(c[v]),
                                             _mm256_set1_ps(dl), r[v0 + v]);
            }
            const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]),
                                                 _mm256_packs_epi32(c[2], c[3]));
            _mm256_storeu_si256((__m256i *)(q[l] + 8 * v0),
                                _mm256_permutevar8x32_epi32(b, order));
        }
        d[l] = dl;
        sum[l] = sp_hsum8_epi32(total);
    }
}
SP_TARGET_END

#endif /* (off x86 split_block never calls it) */
