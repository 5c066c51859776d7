/* What the CPU has, and which kernel level and numerics mode the compute
 * kernels use: the one place that reads CPUID (x86-64) or assumes the
 * baseline (AArch64), and that reads SPINDLE_SIMD and SPINDLE_PRECISION.
 *
 * One binary serves every x86-64 CPU: the AVX2 and AVX-512 kernels are
 * compiled with target attributes in their own files (simd_target.h) and
 * chosen once, at first use, from what the CPU reports.
 * SPINDLE_SIMD=scalar|avx2|avxvnni|avx512 may lower the choice, never raise
 * it above the CPU (avxvnni only where the CPU has AVX-VNNI). AArch64 has
 * NEON (baseline there, no check needed) and, where the auxiliary vector
 * reports them (getauxval AT_HWCAP / AT_HWCAP2), the dot-product and int8
 * matrix-multiply extensions: SPINDLE_SIMD=scalar|neon|dotprod|i8mm lowers
 * the choice there as on x86 (the f32 kernels are the NEON ones at all
 * three; dotprod and i8mm add integer kernels, compiled with target
 * attributes so that the base build stays plain ARMv8-A). Other architectures
 * run only the portable code. Every query is thread-safe; the first one
 * detects. */
#ifndef SP_COMPUTE_CPU_FEATURES_H
#define SP_COMPUTE_CPU_FEATURES_H

#include <stdbool.h>

/* Instruction-set features, each true only where the OS also saves the
 * registers it needs (XCR0), so a kernel may use it whenever it is set. */
typedef struct sp_cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512dq, avx512vl;
    bool avx512vnni;  /* vpdpbusd (EVEX, zmm) */
    bool avxvnni;     /* vpdpbusd (VEX, ymm): AVX-VNNI, with AVX2 */
    bool avx512bf16;  /* vdpbf16ps */
    bool neon;        /* AArch64 Advanced SIMD */
    bool dotprod;     /* AArch64 SDOT / UDOT (FEAT_DotProd) */
    bool i8mm;        /* AArch64 SMMLA (FEAT_I8MM), with dotprod */
} sp_cpu_features;

const sp_cpu_features *sp_cpu_features_get(void);

typedef enum sp_simd_level {
    SP_SIMD_SCALAR = 0, /* portable C (the compiler's baseline vectorization) */
    SP_SIMD_AVX2,       /* AVX2 + FMA + F16C */
    SP_SIMD_AVXVNNI,    /* AVX2's + AVX-VNNI: the int8 products on ymm */
    SP_SIMD_AVX512,     /* AVX-512 F/BW/DQ/VL (+ FMA, F16C) */
    SP_SIMD_NEON,       /* AArch64 Advanced SIMD (ARMv8.0) */
    SP_SIMD_DOTPROD,    /* NEON + SDOT/UDOT */
    SP_SIMD_I8MM,       /* NEON + SDOT + SMMLA */
    SP_SIMD_COUNT
} sp_simd_level;

/* Highest level this CPU supports, and the level in use. */
sp_simd_level sp_simd_supported(void);
sp_simd_level sp_simd_current(void);

/* Whether `level` can run here: scalar always; on x86-64 the levels up to
 * sp_simd_supported(), avxvnni only with AVX-VNNI (a CPU may have AVX-512
 * without it, or it without AVX-512); on AArch64 those from NEON up to it. (Levels are ordered within one
 * ISA only, so "at most the supported level" is not enough.) */
bool sp_simd_available(sp_simd_level level);

/* Switch the level in use (tests, benchmarks). Returns false and changes
 * nothing unless sp_simd_available(level). Not to be called during a
 * kernel. */
bool sp_simd_force(sp_simd_level level);

const char *sp_simd_name(sp_simd_level level);

/* Whether the AVX-512 kernels (and so any of the VNNI / BF16 ones) run:
 * the AVX-512 level is in use. */
bool sp_simd_avx512_active(void);

/* Whether one of the x86 levels (avx2, avxvnni, avx512) is in use: each
 * includes AVX2, so the AVX2 kernels of any op may run. */
bool sp_simd_avx2_active(void);

/* Whether one of the AArch64 levels (neon, dotprod, i8mm) is in use: the
 * NEON f32 kernels run at each. */
bool sp_simd_neon_active(void);

/* Numerics of the kernels, SPINDLE_PRECISION=exact|high|fast. Unset, the
 * mode is fast: on every weight format (GGUF blocks, bf16, MLX affine) the
 * fastest mode whose KL divergence from exact math is no larger than
 * llama.cpp's own default run on that format (docs/performance.md has the
 * table):
 *   exact  activations stay f32 in every product (results differ from a
 *          plain loop only by summation order);
 *   high   activations are split into `levels` = 3 int8 parts per block
 *          (or bf16 parts) where integer / bf16 dot products are faster,
 *          keeping about 22 significant bits: well inside f32 parity;
 *   fast   one int8 (or bf16) part, llama.cpp's own activation rounding.
 * sp_mm_act_levels() is 0, 3 or 1 accordingly. */
typedef enum sp_precision {
    SP_PRECISION_EXACT = 0,
    SP_PRECISION_HIGH,
    SP_PRECISION_FAST
} sp_precision;
sp_precision sp_mm_precision(void);
int sp_mm_act_levels(void);
/* Tests and benchmarks: switch the mode (not during a kernel). */
void sp_mm_precision_force(sp_precision p);
const char *sp_mm_precision_name(sp_precision p);

/* Whether the int8-activation kernels of MLX affine rows run: in the high
 * and fast modes, at a level that has them (avx2: vpmaddubsw + vpmaddwd,
 * avxvnni: VEX vpdpbusd, matmul_int8_avx2.c; avx512: AVX-512 VNNI,
 * matmul_vnni.c, else the avx2 ones; AArch64 dotprod / i8mm: SDOT,
 * matmul_int8_neon.c). sp_mm_int8_force switches them (tests, benchmarks);
 * it returns false, changing nothing, if the CPU has none (no AVX2 or
 * dotprod). The prefill GEMMs (matmul_vnni_gemm.c, ggml_gemm_vnni.c) run
 * only at the avx512 level on a CPU with AVX-512 VNNI. */
bool sp_mm_int8_active(void);
bool sp_mm_int8_force(bool on);
/* Whether the int8 prefill GEMM of MLX affine weights runs: int8 active,
 * the avx512 level, AVX-512 VNNI. */
bool sp_mm_int8_gemm_active(void);

/* Whether the bf16-activation prefill tile (AVX-512 BF16,
 * matmul_bf16dot.c) runs for bf16 weights: in the fast mode, on a CPU with
 * AVX-512 BF16, while the AVX-512 level is in use. sp_mm_bf16_force
 * switches it; false, changing nothing, if the CPU lacks AVX-512 BF16. */
bool sp_mm_bf16_active(void);
bool sp_mm_bf16_force(bool on);

/* Whether the ggml integer kernels may use AVX-512 VNNI: the AVX-512 level
 * is in use and the CPU has VNNI (independent of the precision mode, which
 * decides whether activations are quantized at all). */
bool sp_ggml_vnni_active(void);

#endif
