/* SIMD kernel tables of sp_matmul and their run-time selection.
 *
 * One binary serves every x86-64 CPU: the AVX2 and AVX-512 kernels are
 * compiled with target attributes in their own files and chosen once, at
 * first use, from what the CPU reports (SPINDLE_SIMD=scalar|avx2|avx512 may
 * lower the choice, never raise it above the CPU). AArch64 builds the NEON
 * table (baseline there, no check needed; SPINDLE_SIMD=scalar still forces
 * the portable path). Other architectures build only the portable path,
 * which is the table-less fallback in matmul.c. */
#ifndef SP_COMPUTE_MATMUL_SIMD_H
#define SP_COMPUTE_MATMUL_SIMD_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/tensor.h"

typedef enum sp_simd_level {
    SP_SIMD_SCALAR = 0, /* portable C (gcc's baseline vectorization only) */
    SP_SIMD_AVX2,       /* AVX2 + FMA + F16C */
    SP_SIMD_AVX512,     /* AVX-512 F/BW/DQ/VL */
    SP_SIMD_NEON,       /* AArch64 Advanced SIMD (ARMv8.0) */
    SP_SIMD_COUNT
} sp_simd_level;

/* Up to this many tokens the fused row kernels stream the weights once and
 * never build an f32 tile; above it the tiled GEMM path runs. */
#define SP_MM_SMALL_TOKENS 4

typedef struct sp_mm_kernels {
    const char *name;
    /* y[t * rows + r] for r in [r0, r1), t < n_tokens <= SP_MM_SMALL_TOKENS.
     * Returns false, writing nothing, when w's format is not covered; an
     * empty range (r0 == r1) only reports whether it is. */
    bool (*rows)(const sp_weight *w, const float *x, int n_tokens, float *y,
                 int64_t r0, int64_t r1);
    /* Decode columns [c0, c0 + n) of row r to f32 (same contract as
     * sp_decode_span); false, writing nothing, when the format is not
     * covered. */
    bool (*decode)(const sp_weight *w, int64_t r, int64_t c0, int64_t n,
                   float *out);
    /* y[t * ldy + i] (+)= sum_k tile[i * ldt + k] * x[t * ldx + k] for
     * i < nr, t < nt, k < kn; `accumulate` false stores instead. */
    void (*tile)(const float *tile, int64_t ldt, int nr, const float *x,
                 int64_t ldx, int nt, int64_t kn, float *y, int64_t ldy,
                 bool accumulate);
} sp_mm_kernels;

#if defined(__x86_64__)
extern const sp_mm_kernels sp_mm_kernels_avx2;
extern const sp_mm_kernels sp_mm_kernels_avx512;
#elif defined(__aarch64__)
extern const sp_mm_kernels sp_mm_kernels_neon;
#endif

/* Integer-activation decode kernel for 4/8-bit affine rows (AVX-512 VNNI,
 * matmul_vnni.c); same contract as sp_mm_kernels.rows, plus `levels` = 1,
 * 2 or 3 int8 parts per activation (sp_mm_act_levels(): about 8, 15 or 22
 * significant bits of each block's largest |x|). Returns false, writing
 * nothing, for other formats, levels, or n_tokens * cols > 65536. Not
 * exact: see that file for the error bound. x86-64 only; call it only when
 * the CPU has AVX-512 VNNI. */
bool sp_mm_rows_vnni(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels);

/* Whether sp_matmul uses sp_mm_rows_vnni for few tokens: in the high and
 * fast precision modes, on a CPU with AVX-512 VNNI, while the AVX-512 level
 * is in use. sp_mm_int8_force switches it (tests, benchmarks); it returns
 * false, changing nothing, if the CPU lacks VNNI. */
bool sp_mm_int8_active(void);
bool sp_mm_int8_force(bool on);

/* Opt-in prefill tile for bf16 weights (AVX-512 BF16, matmul_bf16dot.c);
 * same contract as sp_mm_kernels.tile, but the activations are rounded to
 * bf16: |error| <= 2^-8 sum_k |tile x| plus f32 accumulation. */
void sp_mm_tile_bf16(const float *tile, int64_t ldt, int nr, const float *x,
                     int64_t ldx, int nt, int64_t kn, float *y, int64_t ldy,
                     bool accumulate);

/* Whether sp_matmul uses sp_mm_tile_bf16 for bf16 weights above
 * SP_MM_SMALL_TOKENS tokens: in the fast precision mode, on a CPU with
 * AVX-512 BF16, while the AVX-512 level is in use. sp_mm_bf16_force
 * switches it; false, changing nothing, if the CPU lacks AVX-512 BF16. */
bool sp_mm_bf16_active(void);
bool sp_mm_bf16_force(bool on);

/* Numerics of the kernels, SPINDLE_PRECISION=exact|high|fast (default high):
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
/* Tests and benchmarks: switch the mode (not during a matmul). */
void sp_mm_precision_force(sp_precision p);
const char *sp_mm_precision_name(sp_precision p);

/* Portable C version of sp_mm_kernels.tile (matmul.c), used when no SIMD
 * level is active. */
void sp_mm_tile_portable(const float *tile, int64_t ldt, int nr,
                         const float *x, int64_t ldx, int nt, int64_t kn,
                         float *y, int64_t ldy, bool accumulate);

/* Kernels in use (NULL: portable path). Thread-safe; selects on first call. */
const sp_mm_kernels *sp_mm_active(void);

/* Highest level this CPU supports, and the level in use. */
sp_simd_level sp_simd_supported(void);
sp_simd_level sp_simd_current(void);

/* Whether `level` can run here: scalar always; on x86-64 the levels up to
 * sp_simd_supported(); on AArch64 NEON. (Levels are ordered within one
 * ISA only, so "at most the supported level" is not enough.) */
bool sp_simd_available(sp_simd_level level);

/* Switch the kernels in use (tests, benchmarks). Returns false and changes
 * nothing unless sp_simd_available(level). Not to be called during a
 * matmul. */
bool sp_simd_force(sp_simd_level level);

const char *sp_simd_name(sp_simd_level level);

#endif
