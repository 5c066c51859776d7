/* sp_dpbusd256(acc, u, s): VEX vpdpbusd on ymm (AVX-VNNI): each int32 lane
 * of acc plus the 4 products of its unsigned bytes of u and signed bytes
 * of s. Built with SP_EMULATE_AVXVNNI (CMake SPINDLE_EMULATE_AVXVNNI=ON),
 * the same exact sums from AVX2 (bytes widened to i16, then vpmaddwd: no
 * vpmaddubsw, which saturates), and cpu_features.c reports AVX-VNNI on
 * every AVX2 CPU, so ctest runs the avxvnni level's kernels anywhere.
 * Include after <immintrin.h>, x86-64 only. */
#ifndef SP_COMPUTE_SIMD_DPBUSD_H
#define SP_COMPUTE_SIMD_DPBUSD_H

#if defined(SP_EMULATE_AVXVNNI) && SP_EMULATE_AVXVNNI
static inline __attribute__((always_inline, target("avx2"))) __m256i
sp_dpbusd256_emulated(__m256i acc, __m256i u, __m256i s) {
    const __m256i lo8 = _mm256_set1_epi16(0x00FF);
    const __m256i u_even = _mm256_and_si256(u, lo8), u_odd = _mm256_srli_epi16(u, 8);
    const __m256i s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8);
    const __m256i s_odd = _mm256_srai_epi16(s, 8);
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(u_even, s_even));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(u_odd, s_odd));
}
#define sp_dpbusd256(acc, u, s) sp_dpbusd256_emulated((acc), (u), (s))
#else
#define sp_dpbusd256(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#endif

#endif
