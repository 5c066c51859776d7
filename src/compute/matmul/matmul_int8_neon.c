/* Decode kernel for MLX affine 4/8-bit and mxfp4 rows with int8
 * activations on AArch64 dotprod (SDOT: 16 s8 x s8 products into 4 int32
 * lanes): the arithmetic of matmul_vnni.c (its header derives it), with
 * the same activation blocks (128 columns for 4-bit codes, 64 for 8-bit),
 * block scales S and 1..3 levels dotted by Horner's rule, so the same
 * bounds hold and tests/unit/test_matmul_vnni.c checks both:
 *
 *   sum_j (s q_j + b) x_j = s sum_j q_j x_j + b X_g, X_g = sum_j x_j in f32.
 *
 * What differs is the signed operand: SDOT multiplies two signed bytes, so
 * 4-bit codes (0..15) and mxfp4's doubled E2M1 values (-12..12, looked up
 * by TBL) go in as they are, and 8-bit codes go in as q - 128 (in -128..
 * 127) with the group's 128 s X_g added to the bias term. Lane bound, per
 * 16-byte load of codes: 8-bit: 4 products, 4 * 128 * (127 * 16384 + 64 *
 * 128 + 64) = 1 069 580 288 < 2^31; 4-bit: 8 products of q <= 15, far less.
 * Each load's lanes are converted to f32 once and scaled by s_g S 2^-7(l-1)
 * (one group per load: groups are at least 32 columns, a 4-bit load covers
 * 32, an 8-bit one 16). */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <float.h>
#include <string.h>

#include "compute/matmul/matmul_int8_rows.h"
#include "compute/matmul/matmul_internal.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/scratch.h"
#include "compute/simd_target.h"

/* Token-columns (n_tokens * cols) the scratch holds, as matmul_vnni.c. */
#define SP_DP_TOKEN_COLS 65536
/* 16-byte loads of codes per activation block (128 or 64 columns). */
#define SP_DP_LOADS 4

typedef struct sp_dp_scratch {
    /* Load k (16 bytes of codes), token t: record (k * n_tokens + t) holds,
     * per level, the load's int8 activations (4-bit: its 16 even columns,
     * then its 16 odd ones, the low and high nibbles' columns). */
    _Alignas(64) int8_t act[3 * SP_DP_TOKEN_COLS];
    /* S 2^-7(levels-1) of block (b * n_tokens + t) */
    float factor[SP_DP_TOKEN_COLS / 64];
    /* X_g per token */
    float xsum[SP_DP_TOKEN_COLS / 32];
} sp_dp_scratch;


/* 16 values y = x / S as `levels` int8 vectors (a1, then 128 times each
 * remainder, rounded to nearest even: exact steps for 2 and 3 levels). */
static inline __attribute__((always_inline)) void
sp_dp_quant16(const float *x, float32x4_t inv, int levels, int8x16_t out[3]) {
    float32x4_t y[4], a[4];
    for (int i = 0; i < 4; i++) y[i] = vmulq_f32(vld1q_f32(x + 4 * i), inv);
    for (int l = 0; l < levels; l++) {
        if (l)
            for (int i = 0; i < 4; i++)
                y[i] = vmulq_n_f32(vsubq_f32(y[i], a[i]), 128.0f);
        for (int i = 0; i < 4; i++) a[i] = vrndnq_f32(y[i]);
        const int16x8_t h0 = vcombine_s16(vmovn_s32(vcvtq_s32_f32(a[0])),
                                          vmovn_s32(vcvtq_s32_f32(a[1])));
        const int16x8_t h1 = vcombine_s16(vmovn_s32(vcvtq_s32_f32(a[2])),
                                          vmovn_s32(vcvtq_s32_f32(a[3])));
        out[l] = vcombine_s8(vmovn_s16(h0), vmovn_s16(h1));
    }
}

/* Fill the scratch for token t of nt. */
static void sp_dp_quantize_token(const sp_weight *w, const float *x, int t,
                                 int nt, int levels, sp_dp_scratch *sc) {
    const int lc = w->bits == 4 ? 32 : 16; /* columns per load */
    const int bc = lc * SP_DP_LOADS;       /* columns per block */
    const float unit = levels == 1 ? 1.0f : levels == 2 ? 0x1p-7f : 0x1p-14f;
    for (int64_t b = 0; b < w->cols / bc; b++) {
        const float *xb = x + b * bc;
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int j = 0; j < bc; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(xb + j)));
        float s, inv;
        sp_block_scale(vmaxvq_f32(m), levels, &s, &inv);
        sc->factor[b * nt + t] = s * unit;
        const float32x4_t vinv = vdupq_n_f32(inv);
        for (int k = 0; k < SP_DP_LOADS; k++) {
            const size_t rec = (size_t)((b * SP_DP_LOADS + k) * nt + t);
            int8_t *act = sc->act + rec * (size_t)(levels * lc);
            int8x16_t q0[3], q1[3];
            sp_dp_quant16(xb + k * lc, vinv, levels, q0);
            if (lc == 16) {
                for (int l = 0; l < levels; l++) vst1q_s8(act + 16 * l, q0[l]);
                continue;
            }
            sp_dp_quant16(xb + k * lc + 16, vinv, levels, q1);
            for (int l = 0; l < levels; l++) {
                vst1q_s8(act + 32 * l, vuzp1q_s8(q0[l], q1[l]));
                vst1q_s8(act + 32 * l + 16, vuzp2q_s8(q0[l], q1[l]));
            }
        }
    }
    const int64_t gs = w->group_size;
    float *xs = sc->xsum + (int64_t)t * (w->cols / gs);
    for (int64_t g = 0; g < w->cols / gs; g++) {
        float32x4_t a = vdupq_n_f32(0.0f);
        for (int64_t j = 0; j < gs; j += 4) a = vaddq_f32(a, vld1q_f32(x + g * gs + j));
        xs[g] = vaddvq_f32(a);
    }
    if (levels == 1) sp_int8_quantized_group_sums(x, w->cols, gs, bc, xs);
}

/* The scale (and bias) of group i, as f32. */
static inline float sp_dp_qparam(const void *p, sp_dtype t, size_t i) {
    const uint8_t *b = p;
    if (t == SP_DTYPE_F32) {
        float f;
        memcpy(&f, b + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, b + 2 * i, 2);
    if (t == SP_DTYPE_F16) return sp_f16_to_f32(h);
    return sp_f32_from_bits((uint32_t)h << 16);
}

SP_TARGET_BEGIN(SP_TARGET_DOTPROD)

/* Rows [r0, r1) for literal BITS (4, 8), LEVELS and NT; MX: mxfp4 rows
 * (BITS 4, values by TBL, s half the E8M0 scale, no bias). */
static inline __attribute__((always_inline)) void
sp_dp_rows(const sp_weight *w, const sp_dp_scratch *sc, float *y, int64_t r0,
           int64_t r1, const int BITS, const int LEVELS, const int NT,
           const int MX) {
    const int LC = BITS == 4 ? 32 : 16, REC = LEVELS * LC;
    const int64_t gs = w->group_size, gpr = w->cols / gs;
    const int64_t loads_per_group = gs / LC;
    const size_t row_bytes = sp_affine_row_bytes(w);
    const int8x16_t lut = vld1q_s8(sp_mxfp4_kvalues);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *codes = (const uint8_t *)w->data + (size_t)r * row_bytes;
        const int8_t *act = sc->act;
        float32x4_t acc[SP_MM_DECODE_TOKENS];
        float bias[SP_MM_DECODE_TOKENS] = {0};
        for (int t = 0; t < NT; t++) acc[t] = vdupq_n_f32(0.0f);
        int64_t load = 0;
        for (int64_t g = 0; g < gpr; g++) {
            const size_t gi = (size_t)(r * gpr + g);
            const float s = MX ? sp_e8m0_half_mlx(((const uint8_t *)w->scales)[gi])
                               : sp_dp_qparam(w->scales, w->qparam_dtype, gi);
            if (!MX) {
                /* 8-bit codes enter as q - 128: their 128 s X_g here */
                const float bg = sp_dp_qparam(w->biases, w->qparam_dtype, gi);
                for (int t = 0; t < NT; t++) {
                    const float xg = sc->xsum[t * gpr + g];
                    bias[t] += bg * xg;
                    if (BITS == 8) bias[t] += (128.0f * s) * xg;
                }
            }
            for (int64_t k = 0; k < loads_per_group; k++, load++, codes += 16,
                         act += NT * REC) {
                const uint8x16_t b = vld1q_u8(codes);
                int8x16_t lo, hi = vdupq_n_s8(0);
                if (BITS == 8) {
                    lo = vreinterpretq_s8_u8(veorq_u8(b, vdupq_n_u8(0x80)));
                } else {
                    const uint8x16_t l4 = vandq_u8(b, vdupq_n_u8(15));
                    const uint8x16_t h4 = vshrq_n_u8(b, 4);
                    lo = MX ? vqtbl1q_s8(lut, l4) : vreinterpretq_s8_u8(l4);
                    hi = MX ? vqtbl1q_s8(lut, h4) : vreinterpretq_s8_u8(h4);
                }
                const float *factor = sc->factor + (load / SP_DP_LOADS) * NT;
                for (int t = 0; t < NT; t++) {
                    const int8_t *a = act + t * REC;
                    int32x4_t i = vdupq_n_s32(0);
                    for (int l = 0; l < LEVELS; l++) {
                        if (l) i = vshlq_n_s32(i, 7);
                        i = vdotq_s32(i, lo, vld1q_s8(a + l * LC));
                        if (BITS == 4) i = vdotq_s32(i, hi, vld1q_s8(a + l * LC + 16));
                    }
                    acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(i), s * factor[t]);
                }
            }
        }
        for (int t = 0; t < NT; t++)
            y[(int64_t)t * w->rows + r] = vaddvq_f32(acc[t]) + bias[t];
    }
}

typedef void sp_dp_rows_fn(const sp_weight *w, const sp_dp_scratch *sc,
                           float *y, int64_t r0, int64_t r1);

#define SP_DP_VARIANT(B, L, T)                                                 \
    static void sp_dp_rows_b##B##_l##L##_t##T(const sp_weight *w,              \
                                              const sp_dp_scratch *sc,         \
                                              float *y, int64_t r0, int64_t r1) { \
        sp_dp_rows(w, sc, y, r0, r1, B == 8 ? 8 : 4, L, T, B == 40);           \
    }
#define SP_DP_TOKENS(B, L)                                                     \
    SP_DP_VARIANT(B, L, 1)                                                     \
    SP_DP_VARIANT(B, L, 2) SP_DP_VARIANT(B, L, 3) SP_DP_VARIANT(B, L, 4)      \
    SP_DP_VARIANT(B, L, 5) SP_DP_VARIANT(B, L, 6) SP_DP_VARIANT(B, L, 7)      \
    SP_DP_VARIANT(B, L, 8)
SP_DP_TOKENS(4, 1)
SP_DP_TOKENS(4, 2)
SP_DP_TOKENS(4, 3)
SP_DP_TOKENS(8, 1)
SP_DP_TOKENS(8, 2)
SP_DP_TOKENS(8, 3)
SP_DP_TOKENS(40, 1) /* "bits" 40: mxfp4 */
SP_DP_TOKENS(40, 2)
SP_DP_TOKENS(40, 3)

#define SP_DP_ROW(B, L)                                                        \
    {sp_dp_rows_b##B##_l##L##_t1, sp_dp_rows_b##B##_l##L##_t2,                 \
     sp_dp_rows_b##B##_l##L##_t3, sp_dp_rows_b##B##_l##L##_t4,                 \
     sp_dp_rows_b##B##_l##L##_t5, sp_dp_rows_b##B##_l##L##_t6,                 \
     sp_dp_rows_b##B##_l##L##_t7, sp_dp_rows_b##B##_l##L##_t8}
/* [affine 4 bits, affine 8 bits, mxfp4][levels - 1][n_tokens - 1] */
static sp_dp_rows_fn *const sp_dp_variants[3][3][SP_MM_DECODE_TOKENS] = {
    {SP_DP_ROW(4, 1), SP_DP_ROW(4, 2), SP_DP_ROW(4, 3)},
    {SP_DP_ROW(8, 1), SP_DP_ROW(8, 2), SP_DP_ROW(8, 3)},
    {SP_DP_ROW(40, 1), SP_DP_ROW(40, 2), SP_DP_ROW(40, 3)},
};
SP_TARGET_END

/* The formats, shapes and token counts of sp_mm_rows_vnni_covers (the
 * same activation blocks). */
bool sp_mm_rows_dotprod_covers(const sp_weight *w, int n_tokens, int levels) {
    if (n_tokens < 1 || n_tokens > SP_MM_DECODE_TOKENS || levels < 1 ||
        levels > 3 || !w || !w->data || !w->scales || w->rows <= 0 ||
        w->cols <= 0 || (int64_t)n_tokens * w->cols > SP_DP_TOKEN_COLS)
        return false;
    if (w->type == SP_W_MXFP4)
        return w->bits == 4 && w->group_size == 32 && w->cols % 128 == 0;
    const int64_t bc = w->bits == 4 ? 128 : 64;
    return w->type == SP_W_AFFINE && w->biases &&
           (w->bits == 4 || w->bits == 8) &&
           (w->group_size == 32 || w->group_size == 64 ||
            w->group_size == 128) &&
           w->cols % bc == 0 && w->cols % w->group_size == 0 &&
           (w->qparam_dtype == SP_DTYPE_F32 ||
            w->qparam_dtype == SP_DTYPE_F16 ||
            w->qparam_dtype == SP_DTYPE_BF16);
}

bool sp_mm_rows_dotprod(const sp_weight *w, const float *x, int n_tokens,
                        float *y, int64_t r0, int64_t r1, int levels) {
    if (!sp_mm_rows_dotprod_covers(w, n_tokens, levels)) return false;
    if (r0 >= r1) return true;
    if (!x || !y || r0 < 0 || r1 > w->rows) return false;
    sp_dp_scratch *sc = sp_scratch_get(SP_SCRATCH_AFFINE_ROWS, sizeof *sc);
    if (!sc) return false;
    for (int t = 0; t < n_tokens; t++)
        sp_dp_quantize_token(w, x + (int64_t)t * w->cols, t, n_tokens, levels, sc);
    const int kind = w->type == SP_W_MXFP4 ? 2 : w->bits == 8;
    sp_dp_variants[kind][levels - 1][n_tokens - 1](w, sc, y, r0, r1);
    return true;
}
#else
#include "compute/matmul/matmul_simd.h"

bool sp_mm_rows_dotprod_covers(const sp_weight *w, int n_tokens, int levels) {
    (void)w, (void)n_tokens, (void)levels;
    return false; /* AArch64 only */
}
bool sp_mm_rows_dotprod(const sp_weight *w, const float *x, int n_tokens,
                        float *y, int64_t r0, int64_t r1, int levels) {
    (void)w, (void)x, (void)n_tokens, (void)y, (void)r0, (void)r1, (void)levels;
    return false;
}
#endif
