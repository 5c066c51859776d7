/* In-register transpose of an 8 x 8 block of 32-bit lanes (r[i] holds row
 * i; afterwards r[j] holds column j), shared by the AVX2 GEMM panels and
 * attention tiles. Include inside an SP_TARGET_AVX2 (or wider) region
 * (simd_target.h), after <immintrin.h>. */
#ifndef SP_COMPUTE_SIMD_TRANSPOSE_AVX2_H
#define SP_COMPUTE_SIMD_TRANSPOSE_AVX2_H

static inline __attribute__((always_inline)) void sp_transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
}

#endif
