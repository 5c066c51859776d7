/* Prefill GEMM of ggml Q4_K weights with q8_K activations
 * (sp_ggml_quantize_acts, precision fast), on AVX-512 VNNI and on AVX2 (the
 * AVX2 kernel also serves the AVX-VNNI level).
 *
 * Every super-block's value is llama.cpp's integer arithmetic, as the
 * decode kernels compute it (ggml_dot.c dot_q45_K): per 256-column
 * super-block, the exact int32 sums
 *   isum  = sum_j sc_j * sum_{l < 32} u_{32j+l} q_x,{32j+l}   (u = the nibble)
 *   summs = sum_j m_j * sum32_x,j
 * over its 8 sub-blocks j (6-bit scale sc_j and min m_j), then in f32
 *   fma(float(isum), d_w * d_x, acc), -fma(float(summs), dmin_w * d_x, acc)
 * so prefill and decode add the same terms and differ only in the order
 * they are summed (and fma's single rounding).
 *
 * Layout (ggml_gemm_vnni.c's): a panel of MP rows (two vectors of int32
 * lanes) by up to KC_K columns is unpacked once per call to u8 nibbles,
 * rows in the lanes and 4 consecutive columns in each lane's bytes, plus
 * per row and super-block the scales, the min pairs and d, dmin as f32; its
 * cost is shared by every token of the call.
 *
 * AVX-512 VNNI: vpdpbusd per 4 columns into a per-sub-block int32 sum (at
 * most 32 * 15 * 127), times the sub-block's scale (vpmulld) into the
 * super-block's isum: one multiply per 8 vpdpbusd. AVX2: vpmaddubsw pairs
 * (at most 2 * 15 * 127) added over a sub-block's 8 steps in i16 (at most
 * 30480, no saturation), then one vpmaddwd with the (sc, sc) pair widens
 * and scales them at once. The mins: vpdpwssd / vpmaddwd of the rows'
 * (m_2p, m_2p+1) pairs with the token's (sum32_2p, sum32_2p+1) pairs. */
#include "compute/ggml/ggml_dot.h"

#include <string.h>

#include "compute/cpu_features.h"

#define KC_K 512 /* columns per panel: two super-blocks */
#define SB_PER_PANEL (KC_K / SP_QK_K)

/* Scales and mins of a panel of `mp` rows, per super-block s of the panel:
 * sc[(s * 8 + j) * mp + i] the scale of sub-block j of row i (as an int32,
 * or with `pairs` as the int16 pair (sc, sc)), mpair[(s * 4 + p) * mp + i]
 * the int16 pair (m_2p, m_2p+1), dw / dmw[s * mp + i] d and dmin as f32.
 * Rows past nr: zeros, so they add nothing. */
static void kq_pack_scales(const uint8_t *data, size_t row_bytes, int64_t r,
                           int nr, int mp, int64_t sb0, int nsb, bool pairs,
                           int32_t *restrict sc, int32_t *restrict mpair,
                           float *restrict dw, float *restrict dmw) {
    for (int s = 0; s < nsb; s++)
        for (int i = 0; i < mp; i++) {
            const sp_block_q4_K *b =
                i < nr ? (const sp_block_q4_K *)(data + (size_t)(r + i) * row_bytes) + sb0 + s
                       : NULL;
            uint8_t scv[8] = {0}, mv[8] = {0};
            for (int j = 0; b && j < 8; j++) sp_get_scale_min_k4(j, b->scales, &scv[j], &mv[j]);
            for (int j = 0; j < 8; j++)
                sc[(s * 8 + j) * mp + i] = pairs ? (int32_t)(scv[j] | (uint32_t)scv[j] << 16) : scv[j];
            for (int p = 0; p < 4; p++)
                mpair[(s * 4 + p) * mp + i] = (int32_t)(mv[2 * p] | (uint32_t)mv[2 * p + 1] << 16);
            dw[s * mp + i] = b ? sp_f16_to_f32(b->d) : 0.0f;
            dmw[s * mp + i] = b ? sp_f16_to_f32(b->dmin) : 0.0f;
        }
}

/* The token's activation sums of sub-blocks 2p and 2p + 1 as an int16 pair
 * (each at most 32 * 127 in magnitude). */
static inline int32_t kq_sum_pair(const int32_t *sum32, int p) {
    return (int32_t)(((uint32_t)sum32[2 * p] & 0xFFFFu) | (uint32_t)sum32[2 * p + 1] << 16);
}

/* Arguments of a micro-kernel call: one packed panel, every token. */
typedef struct kq_args {
    const uint8_t *panel;
    const int32_t *sc, *mpair;
    const float *dw, *dmw;
    int nsb;               /* super-blocks in the panel */
    const int8_t *q;       /* token 0, the panel's first column */
    const float *d;        /* token 0, the panel's first super-block */
    const int32_t *sum32;  /* token 0, the panel's first sub-block */
    int64_t ldq, ldb;      /* token strides of q and of d / sum32 */
    float *y;              /* token 0, the panel's first row */
    int64_t ldy;
    int nr;
    bool accumulate;
} kq_args;

#if defined(__x86_64__)
#include <immintrin.h>

#include "compute/simd_target.h"

/* ------------------------------------------------------ AVX-512 VNNI */

SP_TARGET_BEGIN(SP_TARGET_AVX512_VNNI)
#include "compute/ggml/ggml_dot_x86.h"
#include "compute/matmul/matmul_transpose.h"
#include "compute/matmul/matmul_vnni_step.h"

#define KV_MP 32 /* rows per panel */
#define KV_MT 4  /* tokens per micro-kernel call: 3 x 2 x 4 live vectors */

/* panel[((s * 64 + k4) * KV_MP + i) * 4 + j] = the nibble of row r + i,
 * column 256 s + 4 k4 + j of super-blocks sb0.. (rows >= nr: zero). Per
 * row, 64 columns (sub-blocks 2n, 2n + 1: the low and high nibbles of
 * qs[32n..32n+32)) make one vector; 16 rows are transposed at a time. */
SP_INLINE void kv_pack(const uint8_t *data, size_t row_bytes, int64_t r,
                       int nr, int64_t sb0, int nsb, uint8_t *restrict panel) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    for (int s = 0; s < nsb; s++)
        for (int n = 0; n < 4; n++)
            for (int v = 0; v < KV_MP / 16; v++) {
                __m512 q[16];
                for (int i = 0; i < 16; i++) {
                    const int row = 16 * v + i;
                    if (row >= nr) {
                        q[i] = _mm512_setzero_ps();
                        continue;
                    }
                    const sp_block_q4_K *b =
                        (const sp_block_q4_K *)(data + (size_t)(r + row) * row_bytes) + sb0 + s;
                    const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * n));
                    const __m256i lo = _mm256_and_si256(raw, m);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m);
                    q[i] = _mm512_castsi512_ps(
                        _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
                }
                sp_transpose16(q); /* q[j]: columns 4j..4j+3 of the 16 rows */
                for (int j = 0; j < 16; j++)
                    _mm512_store_ps(panel + ((s * 64 + n * 16 + j) * KV_MP + 16 * v) * 4, q[j]);
            }
}

/* mt tokens from t0 (a literal after inlining) against the panel. */
SP_INLINE void kv_micro(const kq_args *a, const int mt, int t0) {
    __m512 out[KV_MT][2];
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++) out[t][0] = out[t][1] = _mm512_setzero_ps();
    const int8_t *qt = a->q + t0 * a->ldq;
    for (int s = 0; s < a->nsb; s++) {
        __m512i isum[KV_MT][2], acc[KV_MT][2];
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) isum[t][0] = isum[t][1] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            const uint8_t *pj = a->panel + (s * 64 + j * 8) * KV_MP * 4;
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) acc[t][0] = acc[t][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                sp_vnni_step(acc, mt, _mm512_load_si512(pj + k * KV_MP * 4),
                             _mm512_load_si512(pj + k * KV_MP * 4 + 64),
                             qt + 256 * s + 32 * j + 4 * k, a->ldq);
            const int32_t *sc = a->sc + (s * 8 + j) * KV_MP;
            const __m512i sc0 = _mm512_loadu_si512(sc), sc1 = _mm512_loadu_si512(sc + 16);
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) {
                isum[t][0] = _mm512_add_epi32(isum[t][0], _mm512_mullo_epi32(acc[t][0], sc0));
                isum[t][1] = _mm512_add_epi32(isum[t][1], _mm512_mullo_epi32(acc[t][1], sc1));
            }
        }
        const __m512 dw0 = _mm512_loadu_ps(a->dw + s * KV_MP);
        const __m512 dw1 = _mm512_loadu_ps(a->dw + s * KV_MP + 16);
        const __m512 dm0 = _mm512_loadu_ps(a->dmw + s * KV_MP);
        const __m512 dm1 = _mm512_loadu_ps(a->dmw + s * KV_MP + 16);
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) {
            const int64_t bt = (t0 + t) * a->ldb;
            const int32_t *sum32 = a->sum32 + bt + 8 * s;
            __m512i mins0 = _mm512_setzero_si512(), mins1 = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) {
                const __m512i xs = _mm512_set1_epi32(kq_sum_pair(sum32, p));
                const int32_t *mp = a->mpair + (s * 4 + p) * KV_MP;
                mins0 = _mm512_dpwssd_epi32(mins0, _mm512_loadu_si512(mp), xs);
                mins1 = _mm512_dpwssd_epi32(mins1, _mm512_loadu_si512(mp + 16), xs);
            }
            const __m512 dx = _mm512_set1_ps(a->d[bt + s]);
            out[t][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t][0]), _mm512_mul_ps(dw0, dx), out[t][0]);
            out[t][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t][1]), _mm512_mul_ps(dw1, dx), out[t][1]);
            out[t][0] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins0), _mm512_mul_ps(dm0, dx), out[t][0]);
            out[t][1] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins1), _mm512_mul_ps(dm1, dx), out[t][1]);
        }
    }
    const int lo = a->nr < 16 ? a->nr : 16, hi = a->nr - lo;
    const __mmask16 m0 = (__mmask16)((1u << lo) - 1u);
    const __mmask16 m1 = (__mmask16)((1u << hi) - 1u);
    for (int t = 0; t < mt; t++) {
        float *o = a->y + (int64_t)(t0 + t) * a->ldy;
        if (a->accumulate) {
            out[t][0] = _mm512_add_ps(out[t][0], _mm512_maskz_loadu_ps(m0, o));
            out[t][1] = _mm512_add_ps(out[t][1], _mm512_maskz_loadu_ps(m1, o + 16));
        }
        _mm512_mask_storeu_ps(o, m0, out[t][0]);
        _mm512_mask_storeu_ps(o + 16, m1, out[t][1]);
    }
}

static void kv_rows(const sp_weight *w, const sp_ggml_acts *x, float *y,
                    int64_t r0, int64_t r1) {
    const int64_t nsb_row = w->cols / SP_QK_K;
    const size_t row_bytes = sp_ggml_row_size(w->ggml_type, w->cols);
    _Alignas(64) uint8_t panel[KC_K * KV_MP];
    _Alignas(64) int32_t sc[SB_PER_PANEL * 8 * KV_MP], mpair[SB_PER_PANEL * 4 * KV_MP];
    _Alignas(64) float dw[SB_PER_PANEL * KV_MP], dmw[SB_PER_PANEL * KV_MP];
    kq_args a = {.panel = panel, .sc = sc, .mpair = mpair, .dw = dw, .dmw = dmw,
                 .ldq = x->cols, .ldb = x->cols / 32, .ldy = w->rows};
    const int nt = x->n_tokens;
    for (int64_t r = r0; r < r1; r += KV_MP) {
        const int nr = r1 - r < KV_MP ? (int)(r1 - r) : KV_MP;
        for (int64_t sb0 = 0; sb0 < nsb_row; sb0 += SB_PER_PANEL) {
            const int nsb = nsb_row - sb0 < SB_PER_PANEL ? (int)(nsb_row - sb0) : SB_PER_PANEL;
            kv_pack(w->data, row_bytes, r, nr, sb0, nsb, panel);
            kq_pack_scales(w->data, row_bytes, r, nr, KV_MP, sb0, nsb, false,
                           sc, mpair, dw, dmw);
            a.nsb = nsb;
            a.q = x->q + SP_QK_K * sb0;
            a.d = x->d + sb0;
            a.sum32 = x->sum32 + 8 * sb0;
            a.y = y + r;
            a.nr = nr;
            a.accumulate = sb0 > 0;
            int t = 0;
            for (; t + KV_MT <= nt; t += KV_MT) kv_micro(&a, KV_MT, t);
            switch (nt - t) {
            case 3: kv_micro(&a, 3, t); break;
            case 2: kv_micro(&a, 2, t); break;
            case 1: kv_micro(&a, 1, t); break;
            default: break;
            }
        }
    }
}
SP_TARGET_END

/* ------------------------------------------------------------- AVX2 */

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/simd_transpose_avx2.h"

#define KA_MP 16 /* rows per panel */
#define KA_MT 2  /* tokens per call: 3 x 2 x 2 live vectors of 16 */

/* panel[((s * 64 + k4) * KA_MP + i) * 4 + j] as kv_pack's, one 32-column
 * sub-block (a nibble half of 32 qs bytes) of 8 rows per transpose. */
static inline __attribute__((always_inline)) void
ka_pack(const uint8_t *data, size_t row_bytes, int64_t r, int nr, int64_t sb0,
        int nsb, uint8_t *restrict panel) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    for (int s = 0; s < nsb; s++)
        for (int j = 0; j < 8; j++)
            for (int i0 = 0; i0 < KA_MP; i0 += 8) {
                __m256 v[8];
                for (int i = 0; i < 8; i++) {
                    if (i0 + i >= nr) {
                        v[i] = _mm256_setzero_ps();
                        continue;
                    }
                    const sp_block_q4_K *b =
                        (const sp_block_q4_K *)(data + (size_t)(r + i0 + i) * row_bytes) + sb0 + s;
                    const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (j / 2)));
                    const __m256i u = j % 2 ? _mm256_srli_epi16(raw, 4) : raw;
                    v[i] = _mm256_castsi256_ps(_mm256_and_si256(u, m));
                }
                sp_transpose8(v);
                for (int k4 = 0; k4 < 8; k4++)
                    _mm256_store_ps((float *)(panel + ((s * 64 + j * 8 + k4) * KA_MP + i0) * 4), v[k4]);
            }
}

static inline __attribute__((always_inline)) __m256i ka_bcast(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline __attribute__((always_inline)) void
ka_micro(const kq_args *a, const int mt, int t0) {
    __m256 out[KA_MT][2];
#pragma GCC unroll 2
    for (int t = 0; t < mt; t++) out[t][0] = out[t][1] = _mm256_setzero_ps();
    const int8_t *qt = a->q + t0 * a->ldq;
    for (int s = 0; s < a->nsb; s++) {
        __m256i isum[KA_MT][2];
#pragma GCC unroll 2
        for (int t = 0; t < mt; t++) isum[t][0] = isum[t][1] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const uint8_t *pj = a->panel + (s * 64 + j * 8) * KA_MP * 4;
            __m256i s16[KA_MT][2];
#pragma GCC unroll 2
            for (int t = 0; t < mt; t++) s16[t][0] = s16[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i w0 = _mm256_load_si256((const __m256i *)(pj + k * KA_MP * 4));
                const __m256i w1 = _mm256_load_si256((const __m256i *)(pj + k * KA_MP * 4 + 32));
#pragma GCC unroll 2
                for (int t = 0; t < mt; t++) {
                    const __m256i xb = ka_bcast(qt + t * a->ldq + 256 * s + 32 * j + 4 * k);
                    /* adds, never saturating (see the top): gcc would
                     * reassociate wrapping adds into a spilled tree */
                    s16[t][0] = _mm256_adds_epi16(s16[t][0], _mm256_maddubs_epi16(w0, xb));
                    s16[t][1] = _mm256_adds_epi16(s16[t][1], _mm256_maddubs_epi16(w1, xb));
                }
            }
            const int32_t *sc = a->sc + (s * 8 + j) * KA_MP;
            const __m256i sc0 = _mm256_loadu_si256((const __m256i *)sc);
            const __m256i sc1 = _mm256_loadu_si256((const __m256i *)(sc + 8));
#pragma GCC unroll 2
            for (int t = 0; t < mt; t++) {
                isum[t][0] = _mm256_add_epi32(isum[t][0], _mm256_madd_epi16(s16[t][0], sc0));
                isum[t][1] = _mm256_add_epi32(isum[t][1], _mm256_madd_epi16(s16[t][1], sc1));
            }
        }
        const __m256 dw0 = _mm256_loadu_ps(a->dw + s * KA_MP);
        const __m256 dw1 = _mm256_loadu_ps(a->dw + s * KA_MP + 8);
        const __m256 dm0 = _mm256_loadu_ps(a->dmw + s * KA_MP);
        const __m256 dm1 = _mm256_loadu_ps(a->dmw + s * KA_MP + 8);
#pragma GCC unroll 2
        for (int t = 0; t < mt; t++) {
            const int64_t bt = (t0 + t) * a->ldb;
            const int32_t *sum32 = a->sum32 + bt + 8 * s;
            __m256i mins0 = _mm256_setzero_si256(), mins1 = _mm256_setzero_si256();
            for (int p = 0; p < 4; p++) {
                const __m256i xs = _mm256_set1_epi32(kq_sum_pair(sum32, p));
                const int32_t *mp = a->mpair + (s * 4 + p) * KA_MP;
                mins0 = _mm256_add_epi32(mins0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)mp), xs));
                mins1 = _mm256_add_epi32(mins1, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(mp + 8)), xs));
            }
            const __m256 dx = _mm256_set1_ps(a->d[bt + s]);
            out[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][0]), _mm256_mul_ps(dw0, dx), out[t][0]);
            out[t][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][1]), _mm256_mul_ps(dw1, dx), out[t][1]);
            out[t][0] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins0), _mm256_mul_ps(dm0, dx), out[t][0]);
            out[t][1] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins1), _mm256_mul_ps(dm1, dx), out[t][1]);
        }
    }
    for (int t = 0; t < mt; t++) {
        float *o = a->y + (int64_t)(t0 + t) * a->ldy;
        float v[KA_MP];
        _mm256_storeu_ps(v, out[t][0]);
        _mm256_storeu_ps(v + 8, out[t][1]);
        for (int i = 0; i < a->nr; i++) o[i] = a->accumulate ? v[i] + o[i] : v[i];
    }
}

static void ka_rows(const sp_weight *w, const sp_ggml_acts *x, float *y,
                    int64_t r0, int64_t r1) {
    const int64_t nsb_row = w->cols / SP_QK_K;
    const size_t row_bytes = sp_ggml_row_size(w->ggml_type, w->cols);
    _Alignas(64) uint8_t panel[KC_K * KA_MP];
    _Alignas(64) int32_t sc[SB_PER_PANEL * 8 * KA_MP], mpair[SB_PER_PANEL * 4 * KA_MP];
    _Alignas(64) float dw[SB_PER_PANEL * KA_MP], dmw[SB_PER_PANEL * KA_MP];
    kq_args a = {.panel = panel, .sc = sc, .mpair = mpair, .dw = dw, .dmw = dmw,
                 .ldq = x->cols, .ldb = x->cols / 32, .ldy = w->rows};
    const int nt = x->n_tokens;
    for (int64_t r = r0; r < r1; r += KA_MP) {
        const int nr = r1 - r < KA_MP ? (int)(r1 - r) : KA_MP;
        for (int64_t sb0 = 0; sb0 < nsb_row; sb0 += SB_PER_PANEL) {
            const int nsb = nsb_row - sb0 < SB_PER_PANEL ? (int)(nsb_row - sb0) : SB_PER_PANEL;
            ka_pack(w->data, row_bytes, r, nr, sb0, nsb, panel);
            kq_pack_scales(w->data, row_bytes, r, nr, KA_MP, sb0, nsb, true,
                           sc, mpair, dw, dmw);
            a.nsb = nsb;
            a.q = x->q + SP_QK_K * sb0;
            a.d = x->d + sb0;
            a.sum32 = x->sum32 + 8 * sb0;
            a.y = y + r;
            a.nr = nr;
            a.accumulate = sb0 > 0;
            int t = 0;
            for (; t + KA_MT <= nt; t += KA_MT) ka_micro(&a, KA_MT, t);
            if (t < nt) ka_micro(&a, 1, t);
        }
    }
}
SP_TARGET_END
#endif /* __x86_64__ */

bool sp_ggml_gemm_kquants_covered(uint32_t type, int64_t cols,
                                  sp_simd_level level) {
#if defined(__x86_64__)
    if (type != SP_GGML_Q4_K || cols <= 0 || cols % SP_QK_K ||
        !sp_ggml_dot_covered(type, cols) || !sp_simd_available(level))
        return false;
    if (level == SP_SIMD_AVX512) return sp_cpu_features_get()->avx512vnni;
    return level == SP_SIMD_AVX2 || level == SP_SIMD_AVXVNNI;
#else
    (void)type, (void)cols, (void)level;
    return false;
#endif
}

bool sp_ggml_gemm_kquants(const sp_weight *w, const sp_ggml_acts *x, float *y,
                          int64_t r0, int64_t r1, sp_simd_level level) {
    if (!w || !x || !y || w->type != SP_W_GGML || !w->data ||
        !sp_ggml_gemm_kquants_covered(w->ggml_type, w->cols, level) ||
        x->cols != w->cols || x->n_tokens < 1 || x->levels != 1 || r0 < 0 ||
        r1 > w->rows || r0 > r1)
        return false;
#if defined(__x86_64__)
    if (level == SP_SIMD_AVX512) kv_rows(w, x, y, r0, r1);
    else ka_rows(w, x, y, r0, r1);
    return true;
#else
    return false;
#endif
}
