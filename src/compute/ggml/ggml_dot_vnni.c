/* AVX-512 VNNI integer block products of the ggml decode kernels
 * (ggml_dot.h; the AVX2 fallback is ggml_dot_avx2.c), one weight row
 * streamed at a time: vpdpbusd does 64 u8 x s8 products per instruction.
 *
 * vpdpbusd multiplies an unsigned byte by a signed one. The weights are made
 * unsigned by an offset (q4_0 stores q + 8 in 0..15, which is read as is; a
 * q8_0 weight w becomes w + 128 = w ^ 0x80) and the offset's share, offset *
 * sum(activations), is subtracted per 4-column lane from the precomputed
 * activation sums (sp_ggml_act.sum4). Each lane's integer is then exact, so
 * every block's integer sum equals ggml's; the lanes are scaled by the
 * block's d_w * d_x and summed in f32, which only reorders llama.cpp's float
 * sum of sumi * d_w * d_x over blocks. q4_1 (kind 2) stores q in 0..15 with
 * a min m: no offset, and ggml's m_w * s_x term is added per block. q5_0
 * (kind 3) and q5_1 (kind 4) add a fifth bit from qh to the nibbles (a
 * masked byte add of 16); q5_0 is read as q + 16, q5_1 has a min as q4_1.
 * MXFP4 codes are looked up (vpshufb) as their doubled E2M1 value plus 12,
 * and 12 * sum(activations) comes off per lane. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
#include <stdint.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512_VNNI)
#include "compute/ggml/ggml_dot_x86.h"

/* The f16 scales at p0 and p1 as f32 lanes 0 and 1. */
SP_INLINE __m128 f16_pair(const uint8_t *p0, const uint8_t *p1) {
    uint16_t h0, h1;
    memcpy(&h0, p0, 2);
    memcpy(&h1, p1, 2);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | (uint32_t)h1 << 16)));
}

/* ---------------- AVX-512 VNNI: two 32-blocks per vector ---------------- */

/* Lanes 0..7 take s[0], lanes 8..15 take s[1]. */
SP_INLINE __m512 pair_scales(__m128 s) {
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
}

/* 64 nibbles of blocks p0, p1 (16 bytes each) as bytes in column order:
 * [lo(p0), hi(p0), lo(p1), hi(p1)]. */
SP_INLINE __m512i nibbles_pair(const uint8_t *p0, const uint8_t *p1) {
    const __m256i raw = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
        _mm_loadu_si128((const __m128i *)p1), 1);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(raw, m);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m);
    const __m512i idx = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    return _mm512_permutex2var_epi64(_mm512_castsi256_si512(lo), idx,
                                     _mm512_castsi256_si512(hi));
}

/* sum over 64 columns of u * q per 4-column lane, minus the offset share
 * (sum4 << KIND_SHIFT): the exact lane sums of (u - offset) * q. */
SP_INLINE __m512i dot64(__m512i u, const sp_ggml_act *a, int64_t c, int kind) {
    const __m512i d = _mm512_dpbusd_epi32(
        _mm512_setzero_si512(), u, _mm512_loadu_si512(a->q + c));
    if (KIND_MIN(kind)) return d;
    return _mm512_sub_epi32(
        d, _mm512_slli_epi32(_mm512_loadu_si512(a->sum4 + c / 4), KIND_SHIFT(kind)));
}

/* Same for 32 columns (a lone last block). */
SP_INLINE __m256i dot32(__m256i u, const sp_ggml_act *a, int64_t c, int kind) {
    const __m256i d = _mm256_dpbusd_epi32(
        _mm256_setzero_si256(), u, _mm256_loadu_si256((const __m256i *)(a->q + c)));
    if (KIND_MIN(kind)) return d;
    return _mm256_sub_epi32(
        d, _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(a->sum4 + c / 4)),
                             KIND_SHIFT(kind)));
}

/* Per-block integer sums of 16 blocks from the 8 vpdpbusd results of block
 * pairs (v[k]: 128-bit lanes 0-1 block 2k, lanes 2-3 block 2k + 1), by a
 * transpose-and-add tree. Lane j of the result is block k_perm[j]. */
static const int32_t k_perm[16] = {0, 2, 4, 6, 1, 3, 5, 7,
                                   8, 10, 12, 14, 9, 11, 13, 15};

SP_INLINE __m512i block_sums16(const __m512i v[8]) {
    __m512i t[4];
    for (int k = 0; k < 4; k++) /* per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] */
        t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                                _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    /* per 128-bit lane m: the totals of lane m of four v's */
    const __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[0], t[1]),
                                        _mm512_unpackhi_epi64(t[0], t[1]));
    const __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2], t[3]),
                                        _mm512_unpackhi_epi64(t[2], t[3]));
    /* a block is two 128-bit lanes: add lanes 0+1 and 2+3 */
    return _mm512_add_epi32(
        _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
        _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* The unsigned weight bytes of block pair (p0, p1), in column order. */
SP_INLINE __m512i weights_pair(const uint8_t *p0, const uint8_t *p1, int kind) {
    if (kind != 1) {
        const __m512i nib = nibbles_pair(p0 + KIND_QS(kind), p1 + KIND_QS(kind));
        if (!KIND_FIVE(kind)) return nib;
        /* bit j of qh is the fifth bit of column j: add 16 there */
        const __mmask64 qh = (__mmask64)qh_at(p0, kind) | (__mmask64)qh_at(p1, kind) << 32;
        return _mm512_mask_add_epi8(nib, qh, nib, _mm512_set1_epi8(16));
    }
    const __m512i w = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p0 + 2))),
        _mm256_loadu_si256((const __m256i *)(p1 + 2)), 1);
    return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
}

/* sumi minus the weights' offset share (none for q4_1, q5_1). */
SP_INLINE __m512i unoffset(__m512i v, __m512i sums, int kind) {
    return KIND_MIN(kind) ? v : _mm512_sub_epi32(v, _mm512_slli_epi32(sums, KIND_SHIFT(kind)));
}

/* One row of kind 0..4 blocks against nt tokens. */
SP_INLINE void vnni_row_q4q8(int kind, const uint8_t *row, int64_t nb,
                             const sp_ggml_act *act, const int nt, float *y,
                             int64_t ystride) {
    const size_t bs = KIND_BYTES(kind);
    __m512 acc[SP_MM_DECODE_TOKENS];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    int64_t b = 0;
    const __m512i perm = _mm512_loadu_si512(k_perm);
    const __m512i goff = _mm512_mullo_epi32(perm, _mm512_set1_epi32((int)bs));
    /* 16 blocks at a time: exact integer sums per block, then one
     * sumi * (d_w * d_x) per block, ggml's per-block expression */
    for (; b + 16 <= nb; b += 16) {
        const uint8_t *p = row + (size_t)b * bs;
        __m512i u[8];
        for (int k = 0; k < 8; k++)
            u[k] = weights_pair(p + 2 * k * bs, p + (2 * k + 1) * bs, kind);
        /* the 16 f16 scales (low halves of the gathered dwords) */
        const __m512i dm = _mm512_i32gather_epi32(goff, (const void *)p, 1);
        const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
        const __m512 mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
        for (int t = 0; t < nt; t++) {
            const sp_ggml_act *a = act + t;
            __m512i v[8];
            for (int k = 0; k < 8; k++)
                v[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[k],
                                           _mm512_loadu_si512(a->q + 32 * b + 64 * k));
            const __m512i sumi = unoffset(
                block_sums16(v),
                _mm512_permutexvar_epi32(perm, _mm512_loadu_si512(a->sum32 + b)), kind);
            const __m512 dd = _mm512_mul_ps(
                dw, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(a->d + b)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), dd, acc[t]);
            if (KIND_MIN(kind)) /* ggml's m_w * s_x per block */
                acc[t] = _mm512_fmadd_ps(
                    mw, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(a->s + b)), acc[t]);
        }
    }
    float tail_m[SP_MM_DECODE_TOKENS] = {0}; /* q4_1 min terms off the vectors */
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *p0 = row + (size_t)b * bs, *p1 = p0 + bs;
        const __m512i u = weights_pair(p0, p1, kind);
        const __m128 dw = f16_pair(p0, p1);
        for (int t = 0; t < nt; t++) {
            const __m512i i = dot64(u, act + t, 32 * b, kind);
            const __m128 s = _mm_mul_ps(
                dw, _mm_castpd_ps(_mm_load_sd((const double *)(act[t].d + b))));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), pair_scales(s), acc[t]);
            if (KIND_MIN(kind))
                tail_m[t] += f16_at(p0 + 2) * act[t].s[b] +
                             f16_at(p1 + 2) * act[t].s[b + 1];
        }
    }
    float tail[SP_MM_DECODE_TOKENS] = {0};
    if (b < nb) {
        const uint8_t *p = row + (size_t)b * bs;
        __m256i u;
        if (kind != 1) {
            u = nibbles_one(p + KIND_QS(kind));
            if (KIND_FIVE(kind))
                u = _mm256_mask_add_epi8(u, qh_at(p, kind), u, _mm256_set1_epi8(16));
        } else
            u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 2)),
                                 _mm256_set1_epi8((char)0x80));
        const float dw = f16_at(p);
        for (int t = 0; t < nt; t++) {
            const __m256i i = dot32(u, act + t, 32 * b, kind);
            const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(i),
                                           _mm256_set1_ps(dw * act[t].d[b]));
            tail[t] = sp_hsum8(f);
            if (KIND_MIN(kind)) tail[t] += f16_at(p + 2) * act[t].s[b];
        }
    }
    for (int t = 0; t < nt; t++)
        y[t * ystride] = _mm512_reduce_add_ps(acc[t]) + tail[t] + tail_m[t];
}

/* MXFP4 codes looked up as their doubled E2M1 value plus 12 (0..24, the
 * unsigned operand vpdpbusd wants), 16 to a 128-bit lane. */
SP_INLINE __m128i mxfp4_lut_u(void) {
    return _mm_add_epi8(_mm_loadu_si128((const __m128i *)sp_mxfp4_kvalues),
                        _mm_set1_epi8(12));
}

/* Lane sums of (u - 12) * q: 12 * sum4 taken off vpdpbusd's u * q. */
SP_INLINE __m512i unoffset12(__m512i d, __m512i sum4) {
    return _mm512_sub_epi32(d, _mm512_add_epi32(_mm512_slli_epi32(sum4, 3),
                                                _mm512_slli_epi32(sum4, 2)));
}

/* One row of MXFP4 blocks against nt tokens, two blocks per vector. */
SP_INLINE void vnni_row_mxfp4(const uint8_t *row, int64_t nb,
                              const sp_ggml_act *act, const int nt, float *y,
                              int64_t ystride) {
    const size_t bs = sizeof(sp_block_mxfp4);
    const __m512i lut = _mm512_broadcast_i32x4(mxfp4_lut_u());
    __m512 acc[SP_MM_DECODE_TOKENS];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *p0 = row + (size_t)b * bs, *p1 = p0 + bs;
        const __m512i u = _mm512_shuffle_epi8(lut, nibbles_pair(p0 + 1, p1 + 1));
        const __m128 dw = _mm_set_ps(0, 0, sp_e8m0_half_ggml(p1[0]),
                                     sp_e8m0_half_ggml(p0[0]));
        for (int t = 0; t < nt; t++) {
            const sp_ggml_act *a = act + t;
            const __m512i i = unoffset12(
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), u,
                                    _mm512_loadu_si512(a->q + 32 * b)),
                _mm512_loadu_si512(a->sum4 + 8 * b));
            const __m128 s = _mm_mul_ps(
                _mm_castpd_ps(_mm_load_sd((const double *)(a->d + b))), dw);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), pair_scales(s), acc[t]);
        }
    }
    float tail[SP_MM_DECODE_TOKENS] = {0};
    if (b < nb) {
        const uint8_t *p = row + (size_t)b * bs;
        const __m256i u = _mm256_shuffle_epi8(_mm512_castsi512_si256(lut),
                                              nibbles_one(p + 1));
        const float dw = sp_e8m0_half_ggml(p[0]);
        for (int t = 0; t < nt; t++) {
            const __m512i i = unoffset12(
                _mm512_castsi256_si512(_mm256_dpbusd_epi32(
                    _mm256_setzero_si256(), u,
                    _mm256_loadu_si256((const __m256i *)(act[t].q + 32 * b)))),
                _mm512_castsi256_si512(
                    _mm256_loadu_si256((const __m256i *)(act[t].sum4 + 8 * b))));
            tail[t] = sp_hsum8(_mm256_mul_ps(
                _mm256_cvtepi32_ps(_mm512_castsi512_si256(i)),
                _mm256_set1_ps(act[t].d[b] * dw)));
        }
    }
    for (int t = 0; t < nt; t++)
        y[t * ystride] = _mm512_reduce_add_ps(acc[t]) + tail[t];
}

bool sp_ggml_rows_q8_vnni(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1) {
    const uint32_t type = w->ggml_type;
    const int kind = block_kind(type);
    const int64_t nb = w->cols / 32;
    if (type == SP_GGML_MXFP4 && sp_ggml_rows_q8_takes(w, n_tokens)) {
#define ROW(n) vnni_row_mxfp4(row, nb, act, n, y + r, w->rows)
        SP_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW);
#undef ROW
        return true;
    }
    if (kind < 0 || !sp_ggml_rows_q8_takes(w, n_tokens)) return false;
#define ROW(n) SP_CONST_KIND5(kind, vnni_row_q4q8, row, nb, act, n, y + r, w->rows)
    SP_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW);
#undef ROW
    return true;
}

/* f32 span products of precision exact (AVX-512F only, no VNNI needed). */
void sp_ggml_span_dot_avx512(const float *w, const float *x, int64_t ldx,
                             int nt, int64_t n, float *out) {
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (int64_t)t * ldx;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= n; k += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(xt + k), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 16),
                                 _mm512_loadu_ps(xt + k + 16), a1);
        }
        for (; k + 16 <= n; k += 16)
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(xt + k), a0);
        out[t] += _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
}

SP_TARGET_END
#else
#include "compute/ggml/ggml_dot.h"
bool sp_ggml_rows_q8_vnni(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1) {
    (void)w, (void)act, (void)n_tokens, (void)y, (void)r0, (void)r1;
    return false;
}
#endif
