/* AArch64 NEON instance of the gated delta rule kernels: 4 f32 lanes (NEON
 * is baseline there; SPINDLE_SIMD=scalar still selects the portable one). */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define VW 4
#define VF float32x4_t
#define K(name) name##_neon
#define K_NAME "neon"
#define VZERO() vdupq_n_f32(0.0f)
#define VSET1(v) vdupq_n_f32(v)
#define VLOADU(p) vld1q_f32(p)
#define VSTOREU(p, v) vst1q_f32((p), (v))
#define VADD(a, b) vaddq_f32((a), (b))
#define VMUL(a, b) vmulq_f32((a), (b))
#define VFMA(a, b, c) vfmaq_f32((c), (a), (b)) /* a * b + c, one rounding */
#define VHSUM(v) vaddvq_f32(v)

#include "compute/linear_attention/delta_net_simd.inc"
#else
typedef int sp_no_neon_delta_kernels; /* ISO C wants a non-empty file */
#endif
