/* Compile the functions of a region for an instruction set beyond the build
 * flags, with gcc and clang alike:
 *
 *   #include <immintrin.h>            (system and plain project headers)
 *   SP_TARGET_BEGIN("avx2,fma,f16c")
 *   ... kernels, and headers whose inline functions use the intrinsics ...
 *   SP_TARGET_END
 *
 * gcc reads `#pragma GCC target`; clang ignores it and instead attaches the
 * target attribute to every function of the region (`#pragma clang
 * attribute`). Include system headers before the region, so that their
 * declarations stay untouched. Such code may only run after
 * cpu_features.h has reported the features. */
#ifndef SP_COMPUTE_SIMD_TARGET_H
#define SP_COMPUTE_SIMD_TARGET_H

#define SP_PRAGMA(...) _Pragma(#__VA_ARGS__)

#if defined(__clang__)
#define SP_TARGET_BEGIN(features)                                          \
    SP_PRAGMA(clang attribute push(__attribute__((target(features))),      \
                                   apply_to = function))
#define SP_TARGET_END SP_PRAGMA(clang attribute pop)
#elif defined(__GNUC__)
#define SP_TARGET_BEGIN(features)                                          \
    SP_PRAGMA(GCC push_options) SP_PRAGMA(GCC target(features))
#define SP_TARGET_END SP_PRAGMA(GCC pop_options)
#else
#error "the SIMD kernels need gcc or clang (target attributes)"
#endif

/* The feature sets of the kernel files. */
#define SP_TARGET_AVX2 "avx2,fma,f16c"
#if defined(SP_EMULATE_AVXVNNI) && SP_EMULATE_AVXVNNI
/* emulated (simd_dpbusd.h): the compiler may not emit real AVX-VNNI */
#define SP_TARGET_AVXVNNI "avx2,fma,f16c"
#else
#define SP_TARGET_AVXVNNI "avx2,fma,f16c,avxvnni"
#endif
#define SP_TARGET_AVX512 "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
/* (whole literals: a pragma does not concatenate adjacent strings) */
#define SP_TARGET_AVX512_VNNI \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define SP_TARGET_AVX512_BF16 \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c"

/* AArch64. gcc's arm_neon.h compiles SDOT and SMMLA for ARMv8.2-A plus
 * the extension, and inlines them only into functions whose target has
 * at least that (a CPU with either extension implements ARMv8.2-A). */
#define SP_TARGET_DOTPROD "arch=armv8.2-a+dotprod"
#define SP_TARGET_I8MM "arch=armv8.2-a+dotprod+i8mm"

#endif
