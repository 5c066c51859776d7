/* AArch64 dotprod block products of the k-quants (Q2_K .. Q6_K) for the
 * decode kernels (ggml_dot.h): each 256-column super-block is decoded once
 * into 16 vectors of 16 signed bytes holding ggml's integer values (q2_K:
 * 0..3; q3_K: q - 4 unless the high bit is set; q4_K / q5_K: the 4- or
 * 5-bit codes; q6_K: q - 32) and 16 integer scales, one per 16 columns;
 * then per token each group of 16 is one SDOT against the q8_K activations,
 * times its scale, summed exactly in int32. The f32 expression per
 * super-block is ggml_vec_dot_<type>_q8_K_generic's: d_w * d_x * isum,
 * minus dmin_w * d_x * sum(bsums * mins) for the types with mins. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/ggml/ggml_dot_neon.h"
#include "compute/simd_target.h"

/* The k-quant types, as kinds 0..4. */
static int kq_kind(uint32_t type) {
    switch (type) {
    case SP_GGML_Q2_K: return 0;
    case SP_GGML_Q3_K: return 1;
    case SP_GGML_Q4_K: return 2;
    case SP_GGML_Q5_K: return 3;
    case SP_GGML_Q6_K: return 4;
    default: return -1;
    }
}
#define KQ_BYTES(k) ((k) == 0 ? 84 : (k) == 1 ? 110 : (k) == 2 ? 144 \
                     : (k) == 3 ? 176 : 210)
#define KQ_HAS_MIN(k) ((k) == 0 || (k) == 2 || (k) == 3)

#define KQ_CONST_KIND5(v, F, ...)                                              \
    ((v) == 0   ? F(0, __VA_ARGS__)                                            \
     : (v) == 1 ? F(1, __VA_ARGS__)                                            \
     : (v) == 2 ? F(2, __VA_ARGS__)                                            \
     : (v) == 3 ? F(3, __VA_ARGS__)                                            \
                : F(4, __VA_ARGS__))

/* One decoded super-block: value vectors per 16 columns, their scales and
 * (types with mins) the min of each group, d and dmin. */
typedef struct kq_block {
    int8x16_t v[16];
    int32_t sc[16], mn[16];
    float d, dmin;
} kq_block;

/* Bytes `add` where bit `bit` of the byte of `h` is set. */
SP_NEON_INLINE uint8x16_t bit_to(uint8x16_t h, int bit, uint8_t add) {
    return vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1u << bit))),
                    vdupq_n_u8(add));
}

SP_NEON_INLINE int8x16_t s8(uint8x16_t u) { return vreinterpretq_s8_u8(u); }

/* q2_K: element 128 k + 32 j + l is (qs[32 k + l] >> 2 j) & 3, group e / 16
 * scaled by scales[g] & 15 with min scales[g] >> 4. */
SP_NEON_INLINE void dec_q2_K(const sp_block_q2_K *x, kq_block *o) {
    for (int k = 0; k < 2; k++) {
        const uint8x16_t b[2] = {vld1q_u8(x->qs + 32 * k),
                                 vld1q_u8(x->qs + 32 * k + 16)};
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++)
                o->v[8 * k + 2 * j + h] = s8(vandq_u8(
                    vshlq_u8(b[h], vdupq_n_s8((int8_t)(-2 * j))), vdupq_n_u8(3)));
    }
    for (int g = 0; g < 16; g++)
        o->sc[g] = x->scales[g] & 15, o->mn[g] = x->scales[g] >> 4;
    o->d = sp_neon_f16_at((const uint8_t *)&x->d);
    o->dmin = sp_neon_f16_at((const uint8_t *)&x->dmin);
}

/* q3_K: element 128 n + 32 s + l has low bits (qs[32 n + l] >> 2 s) & 3
 * and high bit (hmask[l] >> (4 n + s)) & 1; value low - 4 without it. */
SP_NEON_INLINE void dec_q3_K(const sp_block_q3_K *x, kq_block *o) {
    const uint8x16_t hm[2] = {vld1q_u8(x->hmask), vld1q_u8(x->hmask + 16)};
    for (int n = 0; n < 2; n++) {
        const uint8x16_t b[2] = {vld1q_u8(x->qs + 32 * n),
                                 vld1q_u8(x->qs + 32 * n + 16)};
        for (int s = 0; s < 4; s++)
            for (int h = 0; h < 2; h++) {
                const uint8x16_t lo = vandq_u8(
                    vshlq_u8(b[h], vdupq_n_s8((int8_t)(-2 * s))), vdupq_n_u8(3));
                o->v[8 * n + 2 * s + h] = s8(vsubq_u8(
                    vorrq_u8(lo, bit_to(hm[h], 4 * n + s, 4)), vdupq_n_u8(4)));
            }
    }
    const uint8_t *sc = x->scales;
    for (int g = 0; g < 16; g++) {
        const int lo = g < 8 ? sc[g] & 0xF : sc[g - 8] >> 4;
        const int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
        o->sc[g] = (lo | hi << 4) - 32;
    }
    o->d = sp_neon_f16_at((const uint8_t *)&x->d);
}

/* q4_K / q5_K: sub-block j (32 columns) is the low (j even) or high nibble
 * of qs[32 (j / 2) ..], plus 16 where bit j of qh[l] is set (q5_K). */
SP_NEON_INLINE void dec_q45_K(const uint8_t *blk, bool five, kq_block *o) {
    const sp_block_q4_K *x4 = (const sp_block_q4_K *)blk;
    const sp_block_q5_K *x5 = (const sp_block_q5_K *)blk;
    const uint8_t *qs = five ? x5->qs : x4->qs;
    uint8x16_t qh[2] = {vdupq_n_u8(0), vdupq_n_u8(0)};
    if (five) qh[0] = vld1q_u8(x5->qh), qh[1] = vld1q_u8(x5->qh + 16);
    for (int p = 0; p < 4; p++)
        for (int h = 0; h < 2; h++) {
            const uint8x16_t b = vld1q_u8(qs + 32 * p + 16 * h);
            uint8x16_t lo = vandq_u8(b, vdupq_n_u8(15)), hi = vshrq_n_u8(b, 4);
            if (five) {
                lo = vorrq_u8(lo, bit_to(qh[h], 2 * p, 16));
                hi = vorrq_u8(hi, bit_to(qh[h], 2 * p + 1, 16));
            }
            o->v[4 * p + h] = s8(lo);
            o->v[4 * p + 2 + h] = s8(hi);
        }
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        sp_get_scale_min_k4(j, x4->scales, &sc, &m);
        o->sc[2 * j] = o->sc[2 * j + 1] = sc;
        o->mn[2 * j] = o->mn[2 * j + 1] = m;
    }
    o->d = sp_neon_f16_at(blk);
    o->dmin = sp_neon_f16_at(blk + 2);
}

/* q6_K: element 128 n + 32 s + l is the low (s < 2) or high nibble of
 * ql[64 n + l + 32 (s & 1)] with bits 2 s, 2 s + 1 of qh[32 n + l] above
 * it, minus 32. */
SP_NEON_INLINE void dec_q6_K(const sp_block_q6_K *x, kq_block *o) {
    for (int n = 0; n < 2; n++)
        for (int h = 0; h < 2; h++) {
            const uint8x16_t qh = vld1q_u8(x->qh + 32 * n + 16 * h);
            const uint8x16_t ql[2] = {vld1q_u8(x->ql + 64 * n + 16 * h),
                                      vld1q_u8(x->ql + 64 * n + 32 + 16 * h)};
            for (int s = 0; s < 4; s++) {
                const uint8x16_t lo = s < 2 ? vandq_u8(ql[s & 1], vdupq_n_u8(15))
                                            : vshrq_n_u8(ql[s & 1], 4);
                const uint8x16_t hi = vandq_u8(
                    vshlq_u8(qh, vdupq_n_s8((int8_t)(4 - 2 * s))), vdupq_n_u8(0x30));
                o->v[8 * n + 2 * s + h] =
                    s8(vsubq_u8(vorrq_u8(lo, hi), vdupq_n_u8(32)));
            }
        }
    for (int g = 0; g < 16; g++) o->sc[g] = x->scales[g];
    o->d = sp_neon_f16_at((const uint8_t *)&x->d);
}

SP_NEON_INLINE void kq_decode(int kind, const uint8_t *blk, kq_block *o) {
    switch (kind) {
    case 0: dec_q2_K((const sp_block_q2_K *)blk, o); break;
    case 1: dec_q3_K((const sp_block_q3_K *)blk, o); break;
    case 2: dec_q45_K(blk, false, o); break;
    case 3: dec_q45_K(blk, true, o); break;
    default: dec_q6_K((const sp_block_q6_K *)blk, o); break;
    }
}

SP_TARGET_BEGIN(SP_TARGET_DOTPROD)

/* One row of k-quant super-blocks against nt tokens. */
SP_NEON_INLINE void kq_row(int kind, const uint8_t *row, int64_t nb,
                           const sp_ggml_act *act, const int nt, float *y,
                           int64_t ystride) {
    float sumf[SP_MM_DECODE_TOKENS] = {0};
    for (int64_t i = 0; i < nb; i++) {
        kq_block o;
        kq_decode(kind, row + (size_t)i * KQ_BYTES(kind), &o);
        for (int t = 0; t < nt; t++) {
            const int8_t *q8 = act[t].q + i * SP_QK_K;
            int32x4_t isum = vdupq_n_s32(0);
            for (int g = 0; g < 16; g++)
                isum = vmlaq_n_s32(
                    isum, vdotq_s32(vdupq_n_s32(0), o.v[g], vld1q_s8(q8 + 16 * g)),
                    o.sc[g]);
            const float dx = act[t].d[i];
            sumf[t] += o.d * dx * (float)vaddvq_s32(isum);
            if (KQ_HAS_MIN(kind)) {
                const int16_t *bs = act[t].bsums + i * 16;
                int summs = 0;
                for (int g = 0; g < 16; g++) summs += bs[g] * o.mn[g];
                sumf[t] -= o.dmin * dx * (float)summs;
            }
        }
    }
    for (int t = 0; t < nt; t++) y[t * ystride] = sumf[t];
}

bool sp_ggml_rows_q8_kquants_dotprod(const sp_weight *w, const sp_ggml_act *act,
                                     int n_tokens, float *y, int64_t r0,
                                     int64_t r1) {
    const int kind = kq_kind(w->ggml_type);
    if (kind < 0 || !sp_ggml_rows_q8_takes(w, n_tokens)) return false;
    const int64_t nb = w->cols / SP_QK_K;
#define ROW(n) KQ_CONST_KIND5(kind, kq_row, row, nb, act, n, y + r, w->rows)
    SP_NEON_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW);
#undef ROW
    return true;
}
SP_TARGET_END

#else
#include "compute/ggml/ggml_dot.h"
bool sp_ggml_rows_q8_kquants_dotprod(const sp_weight *w, const sp_ggml_act *act,
                                     int n_tokens, float *y, int64_t r0,
                                     int64_t r1) {
    (void)w, (void)act, (void)n_tokens, (void)y, (void)r0, (void)r1;
    return false;
}
#endif
