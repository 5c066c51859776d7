/* AArch64 Advanced SIMD (NEON) instance of the SIMD matmul kernels: 4 f32
 * lanes. NEON is part of the ARMv8-A baseline, so no run-time check is
 * needed: sp_mm_active (matmul.c) selects this table on every aarch64 CPU unless
 * SPINDLE_SIMD=scalar forces the portable path.
 *
 * Everything used here is ARMv8.0 (FMLA, FCVTL for f16, UXTL/UCVTF for
 * codes), so weights are widened exactly and every product is an f32 FMA,
 * like the x86 instances: results differ from the portable path only by
 * summation order. The shared body (matmul_simd.inc) needs from an instance
 * without x86 intrinsics its 4-bit step decoders K(ld_q4), K(ld_mxfp4) and, for VW 4, the
 * in-register transpose K_TRANSPOSE of the GEMM panel packing. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "compute/tensor.h"

#define VW 4
#define VF float32x4_t
#define K(name) name##_neon
#define K_NAME "neon"
#define VZERO() vdupq_n_f32(0.0f)
#define VSET1(v) vdupq_n_f32(v)
#define VLOADU(p) vld1q_f32(p)
#define VSTOREU(p, v) vst1q_f32((p), (v))
#define VADD(a, b) vaddq_f32((a), (b))
#define VFMA(a, b, c) vfmaq_f32((c), (a), (b)) /* a * b + c, one rounding */
#define VHSUM(v) vaddvq_f32(v)
/* 4 bf16 (8 bytes, any alignment: LD1 of bytes) shifted into the high half
 * of each f32 lane. */
#define VBF16(p) vreinterpretq_f32_u32(                                     \
    vshll_n_u16(vreinterpret_u16_u8(vld1_u8((const uint8_t *)(p))), 16))
/* 4 f16 widened by FCVTL: exact, subnormals included. */
#define VF16(p) vcvt_f32_f16(                                                \
    vreinterpret_f16_u8(vld1_u8((const uint8_t *)(p))))
#define VU8(p) sp_neon_u8x4(p)

/* 4 codes (bytes) as f32. A 32-bit load, so that the last step of a row
 * never reads past it. */
static inline __attribute__((always_inline)) float32x4_t
sp_neon_u8x4(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    const uint16x8_t h = vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(v)));
    return vcvtq_f32_u32(vmovl_u16(vget_low_u16(h)));
}

/* 16 codes (bytes) as four vectors of f32. */
static inline __attribute__((always_inline)) void
sp_neon_u8x16(uint8x16_t c, float32x4_t q[4]) {
    const uint16x8_t lo = vmovl_u8(vget_low_u8(c));
    const uint16x8_t hi = vmovl_high_u8(c);
    q[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
    q[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
    q[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
    q[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}

/* 16 bytes hold codes 0..31, code 2i in the low nibble of byte i: split the
 * nibbles and interleave them back into code order (ZIP1/ZIP2). */
static inline __attribute__((always_inline)) void
K(ld_q4)(const uint8_t *p, float32x4_t q[8]) {
    const uint8x16_t b = vld1q_u8(p);
    const uint8x16_t lo = vandq_u8(b, vdupq_n_u8(15));
    const uint8x16_t hi = vshrq_n_u8(b, 4);
    sp_neon_u8x16(vzip1q_u8(lo, hi), q);
    sp_neon_u8x16(vzip2q_u8(lo, hi), q + 4);
}

/* 16 signed bytes as four vectors of f32. */
static inline __attribute__((always_inline)) void
sp_neon_s8x16(int8x16_t c, float32x4_t q[4]) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(c));
    const int16x8_t hi = vmovl_high_s8(c);
    q[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    q[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    q[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    q[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

/* MXFP4: the codes of K(ld_q4), each looked up (TBL) as its doubled E2M1
 * value. */
static inline __attribute__((always_inline)) void
K(ld_mxfp4)(const uint8_t *p, float32x4_t q[8]) {
    const int8x16_t lut = vld1q_s8(sp_mxfp4_kvalues);
    const uint8x16_t b = vld1q_u8(p);
    const int8x16_t lo = vqtbl1q_s8(lut, vandq_u8(b, vdupq_n_u8(15)));
    const int8x16_t hi = vqtbl1q_s8(lut, vshrq_n_u8(b, 4));
    sp_neon_s8x16(vzip1q_s8(lo, hi), q);
    sp_neon_s8x16(vzip2q_s8(lo, hi), q + 4);
}

/* 4 x 4 transpose: r[i] holds row i; afterwards r[j] holds column j. */
static inline __attribute__((always_inline)) void
K(transpose)(float32x4_t r[4]) {
    const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
    const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
    r[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0),
                                            vreinterpretq_f64_f32(t2)));
    r[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1),
                                            vreinterpretq_f64_f32(t3)));
    r[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0),
                                            vreinterpretq_f64_f32(t2)));
    r[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1),
                                            vreinterpretq_f64_f32(t3)));
}
#define K_TRANSPOSE K(transpose)

#include "compute/matmul/matmul_simd.inc"
#else
typedef int sp_no_neon_kernels; /* ISO C wants a non-empty file */
#endif
