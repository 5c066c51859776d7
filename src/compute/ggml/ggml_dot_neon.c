/* AArch64 integer block products of the ggml decode kernels (ggml_dot.h)
 * for the 32-column block types (q4_0, q8_0, q4_1, q5_0, q5_1, mxfp4), at
 * the dotprod and i8mm levels (cpu_features.h):
 *   - dotprod: each weight block is decoded to 32 signed bytes holding
 *     ggml's integer values (q4_0: q - 8, q5_0: q - 16, q4_1 / q5_1: the
 *     unsigned codes, q8_0 as stored, mxfp4: the doubled E2M1 values looked
 *     up by TBL), and SDOT multiplies them with the int8 activations, 4
 *     columns per lane; the lanes are exact, so each block's integer sum
 *     is ggml's, scaled by d_w * d_x in f32 (plus m_w * s_x for q4_1 /
 *     q5_1, as ggml_vec_dot_q4_1_q8_1 adds it);
 *   - i8mm: two weight rows against two tokens per SMMLA (a 2x8 by 8x2
 *     int8 product into the 2x2 int32 lanes), 4 of them per block where
 *     SDOT needs 8: used when a call has 2..4 tokens, which includes every
 *     decode step of precision high (3 activation parts per token,
 *     matmul_ggml.c). One token stays on SDOT.
 * The k-quants are in ggml_dot_kquants_neon.c. Both files are compiled for
 * plain ARMv8-A with the extensions enabled per region (simd_target.h), so
 * nothing here runs before cpu_features.c has seen them. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/ggml/ggml_dot_neon.h"
#include "compute/simd_target.h"

/* The 32-column block types, as kinds: 0 q4_0, 1 q8_0, 2 q4_1, 3 q5_0,
 * 4 q5_1, 5 mxfp4; -1 not such a type. */
static int neon_kind(uint32_t type) {
    switch (type) {
    case SP_GGML_Q4_0: return 0;
    case SP_GGML_Q8_0: return 1;
    case SP_GGML_Q4_1: return 2;
    case SP_GGML_Q5_0: return 3;
    case SP_GGML_Q5_1: return 4;
    case SP_GGML_MXFP4: return 5;
    default: return -1;
    }
}
#define KIND_BYTES(k) ((k) == 0 ? 18 : (k) == 1 ? 34 : (k) == 2 ? 20 \
                       : (k) == 3 ? 22 : (k) == 4 ? 24 : 17)
#define KIND_QS(k) ((k) == 2 ? 4 : (k) == 3 ? 6 : (k) == 4 ? 8 : (k) == 5 ? 1 : 2)
#define KIND_QH(k) ((k) == 3 ? 2 : 4) /* offset of qh (kinds 3, 4) */
#define KIND_FIVE(k) ((k) == 3 || (k) == 4)
#define KIND_MIN(k) ((k) == 2 || (k) == 4) /* m_w * s_x term, no offset */

/* Bytes 16 where bit j of `bits` (16 of them) is set, byte j for bit j: the
 * fifth bits of 16 q5 codes. */
SP_NEON_INLINE uint8x16_t fifth16(uint32_t bits) {
    const uint8x16_t rep = vcombine_u8(vdup_n_u8((uint8_t)bits),
                                       vdup_n_u8((uint8_t)(bits >> 8)));
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128,
                                    1, 2, 4, 8, 16, 32, 64, 128};
    return vandq_u8(vtstq_u8(rep, vld1q_u8(bit)), vdupq_n_u8(16));
}

/* The weight block at p as ggml's signed integer values: v[0] columns
 * 0..15, v[1] columns 16..31. *dw: its scale (f16 d; mxfp4: half the E8M0
 * scale, ggml's d), *mw its f16 min (kinds 2, 4). */
SP_NEON_INLINE void decode32(int kind, const uint8_t *p, int8x16_t v[2],
                             float *dw, float *mw) {
    if (kind == 5) {
        *dw = sp_e8m0_half_ggml(p[0]);
        const uint8x16_t b = vld1q_u8(p + 1);
        const int8x16_t lut = vld1q_s8(sp_mxfp4_kvalues);
        v[0] = vqtbl1q_s8(lut, vandq_u8(b, vdupq_n_u8(15)));
        v[1] = vqtbl1q_s8(lut, vshrq_n_u8(b, 4));
        return;
    }
    *dw = sp_neon_f16_at(p);
    if (KIND_MIN(kind)) *mw = sp_neon_f16_at(p + 2);
    if (kind == 1) {
        v[0] = vld1q_s8((const int8_t *)p + 2);
        v[1] = vld1q_s8((const int8_t *)p + 18);
        return;
    }
    const uint8x16_t b = vld1q_u8(p + KIND_QS(kind));
    uint8x16_t lo = vandq_u8(b, vdupq_n_u8(15)), hi = vshrq_n_u8(b, 4);
    if (KIND_FIVE(kind)) {
        uint32_t qh;
        memcpy(&qh, p + KIND_QH(kind), 4);
        lo = vorrq_u8(lo, fifth16(qh & 0xFFFF));
        hi = vorrq_u8(hi, fifth16(qh >> 16));
    }
    const uint8_t offset = kind == 0 ? 8 : kind == 3 ? 16 : 0;
    v[0] = vreinterpretq_s8_u8(vsubq_u8(lo, vdupq_n_u8(offset)));
    v[1] = vreinterpretq_s8_u8(vsubq_u8(hi, vdupq_n_u8(offset)));
}

SP_TARGET_BEGIN(SP_TARGET_DOTPROD)

/* One row of kind `kind` blocks against nt tokens (SDOT). */
SP_NEON_INLINE void dot_row(int kind, const uint8_t *row, int64_t nb,
                            const sp_ggml_act *act, const int nt, float *y,
                            int64_t ystride) {
    const size_t bs = KIND_BYTES(kind);
    float32x4_t acc[SP_MM_DECODE_TOKENS];
    float mins[SP_MM_DECODE_TOKENS] = {0};
    for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t v[2];
        float dw, mw = 0;
        decode32(kind, row + (size_t)b * bs, v, &dw, &mw);
        for (int t = 0; t < nt; t++) {
            const int8_t *q = act[t].q + 32 * b;
            const int32x4_t i = vdotq_s32(
                vdotq_s32(vdupq_n_s32(0), v[0], vld1q_s8(q)), v[1],
                vld1q_s8(q + 16));
            acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(i), dw * act[t].d[b]);
            if (KIND_MIN(kind)) mins[t] += mw * act[t].s[b];
        }
    }
    for (int t = 0; t < nt; t++) y[t * ystride] = vaddvq_f32(acc[t]) + mins[t];
}

bool sp_ggml_rows_q8_dotprod(const sp_weight *w, const sp_ggml_act *act,
                             int n_tokens, float *y, int64_t r0, int64_t r1) {
    const int kind = neon_kind(w->ggml_type);
    if (kind < 0 || !sp_ggml_rows_q8_takes(w, n_tokens)) return false;
    const int64_t nb = w->cols / 32;
#define ROW(n) SP_NEON_CONST_KIND6(kind, dot_row, row, nb, act, n, y + r, w->rows)
    SP_NEON_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW);
#undef ROW
    return true;
}
SP_TARGET_END

SP_TARGET_BEGIN(SP_TARGET_I8MM)

/* Two rows (a, b: possibly the same row) against nt (2..SP_MM_DECODE_TOKENS) tokens: per
 * token pair (the last one paired with itself when nt is odd) and 8-column
 * step, SMMLA of the rows' 8 bytes (a 2x8 matrix) with the tokens' 8 bytes
 * (8x2) into lanes {a t0, a t1, b t0, b t1}. */
SP_NEON_INLINE void mm_rows2(int kind, const uint8_t *ra, const uint8_t *rb,
                             int64_t nb, const sp_ggml_act *act, const int nt,
                             float *ya, float *yb, int64_t ystride) {
    const size_t bs = KIND_BYTES(kind);
    enum { PAIRS = (SP_MM_DECODE_TOKENS + 1) / 2 };
    const int np = (nt + 1) / 2;
    float32x4_t acc[PAIRS];
    for (int p = 0; p < np; p++) acc[p] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t va[2], vb[2];
        float dwa, dwb, mwa = 0, mwb = 0;
        decode32(kind, ra + (size_t)b * bs, va, &dwa, &mwa);
        decode32(kind, rb + (size_t)b * bs, vb, &dwb, &mwb);
        /* step k: row a's columns 8k..8k+7, then row b's */
        int8x16_t wk[4];
        for (int h = 0; h < 2; h++) {
            const int64x2_t a64 = vreinterpretq_s64_s8(va[h]);
            const int64x2_t b64 = vreinterpretq_s64_s8(vb[h]);
            wk[2 * h] = vreinterpretq_s8_s64(vzip1q_s64(a64, b64));
            wk[2 * h + 1] = vreinterpretq_s8_s64(vzip2q_s64(a64, b64));
        }
        const float32x4_t dw = vcombine_f32(vdup_n_f32(dwa), vdup_n_f32(dwb));
        const float32x4_t mw = vcombine_f32(vdup_n_f32(mwa), vdup_n_f32(mwb));
        for (int p = 0; p < np; p++) {
            const int t0 = 2 * p, t1 = 2 * p + 1 < nt ? 2 * p + 1 : 2 * p;
            const int8_t *q0 = act[t0].q + 32 * b, *q1 = act[t1].q + 32 * b;
            int32x4_t i = vdupq_n_s32(0);
            for (int h = 0; h < 2; h++) {
                const int64x2_t x0 = vreinterpretq_s64_s8(vld1q_s8(q0 + 16 * h));
                const int64x2_t x1 = vreinterpretq_s64_s8(vld1q_s8(q1 + 16 * h));
                i = vmmlaq_s32(i, wk[2 * h],
                               vreinterpretq_s8_s64(vzip1q_s64(x0, x1)));
                i = vmmlaq_s32(i, wk[2 * h + 1],
                               vreinterpretq_s8_s64(vzip2q_s64(x0, x1)));
            }
            const float32x2_t dx2 = {act[t0].d[b], act[t1].d[b]};
            acc[p] = vfmaq_f32(acc[p], vcvtq_f32_s32(i),
                               vmulq_f32(dw, vcombine_f32(dx2, dx2)));
            if (KIND_MIN(kind)) {
                const float32x2_t s2 = {act[t0].s[b], act[t1].s[b]};
                acc[p] = vfmaq_f32(acc[p], mw, vcombine_f32(s2, s2));
            }
        }
    }
    for (int p = 0; p < np; p++) {
        const int t0 = 2 * p, t1 = 2 * p + 1 < nt ? 2 * p + 1 : 2 * p;
        /* (t1 == t0 writes the same value twice) */
        ya[t0 * ystride] = vgetq_lane_f32(acc[p], 0);
        ya[t1 * ystride] = vgetq_lane_f32(acc[p], 1);
        yb[t0 * ystride] = vgetq_lane_f32(acc[p], 2);
        yb[t1 * ystride] = vgetq_lane_f32(acc[p], 3);
    }
}

bool sp_ggml_rows_q8_i8mm(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1) {
    const int kind = neon_kind(w->ggml_type);
    if (kind < 0 || !sp_ggml_rows_q8_takes(w, n_tokens)) return false;
    if (n_tokens == 1) return sp_ggml_rows_q8_dotprod(w, act, 1, y, r0, r1);
    const int64_t nb = w->cols / 32;
    const size_t row_bytes = sp_ggml_row_size(w->ggml_type, w->cols);
    const uint8_t *data = w->data;
    for (int64_t r = r0; r < r1; r += 2) {
        const int64_t rb = r + 1 < r1 ? r + 1 : r; /* an odd last row: twice */
        const uint8_t *pa = data + (size_t)r * row_bytes;
        const uint8_t *pb = data + (size_t)rb * row_bytes;
#define PAIR(n) SP_NEON_CONST_KIND6(kind, mm_rows2, pa, pb, nb, act, n, y + r, \
                                    y + rb, w->rows)
        SP_NEON_NT_SWITCH(PAIR, n_tokens)
#undef PAIR
    }
    return true;
}
SP_TARGET_END

#else
#include "compute/ggml/ggml_dot.h"
bool sp_ggml_rows_q8_dotprod(const sp_weight *w, const sp_ggml_act *act,
                             int n_tokens, float *y, int64_t r0, int64_t r1) {
    (void)w, (void)act, (void)n_tokens, (void)y, (void)r0, (void)r1;
    return false;
}
bool sp_ggml_rows_q8_i8mm(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1) {
    (void)w, (void)act, (void)n_tokens, (void)y, (void)r0, (void)r1;
    return false;
}
#endif
