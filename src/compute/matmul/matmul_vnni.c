/* Decode kernel for MLX affine 4/8-bit and mxfp4 rows with integer
 * activations and AVX-512 VNNI (vpdpbusd: 64 u8 x s8 products per
 * instruction). mxfp4 is read as affine 4-bit (sp_vnni_rows' MX).
 *
 * Per group g of a row:  sum_j (s q_j + b) x_j = s sum_j q_j x_j + b X_g.
 * X_g = sum_j x_j is summed in f32 once per call; only sum_j q_j x_j goes
 * through integers. Each token's activations are cut into blocks of the
 * columns of one 64-byte load of codes (128 for 4 bits, 64 for 8 bits), and
 * every block gets one scale S (one scalar per load and token: a broadcast
 * operand of the per-lane factor, not a 64-byte load; blocks of 64 columns
 * for 4 bits measured a few % slower: the load ports are busy):
 *
 *   levels 1: S = max|x| / 127, a1 = round(x / S): llama.cpp's Q8
 *             activations, |x - S a1| <= S / 2 (plus the rounding of
 *             127 / max|x|, 2^-17 S).
 *   levels 2, 3: S = the smallest power of two with 127 S >= max|x|, so
 *             that every step below is exact in f32 (scaling by a power of
 *             two, then differences of nearby numbers):
 *                 a1 = round(x / S)           in [-127, 127]
 *                 a2 = round(128 (x / S - a1)) in [-64, 64]
 *                 a3 = round(128 (128 (x / S - a1) - a2)) in [-64, 64]
 *             x = S (a1 + a2 / 128) + e, |e| <= S / 256       (2 levels)
 *             x = S (a1 + a2 / 128 + a3 / 16384) + e,
 *                                         |e| <= S / 32768     (3 levels),
 *             i.e. 2^-21 of the block's largest |x|: well inside f32 parity.
 *
 * The integer a1 16384 + a2 128 + a3 is dotted with the codes exactly in
 * int32 by Horner's rule: s = dpbusd(0, q, a1); s <<= 7; s = dpbusd(s, q,
 * a2); s <<= 7; s = dpbusd(s, q, a3). Overflow bound per int32 lane (every
 * partial value is bounded by the final one):
 *   8-bit: 4 products of q <= 255:  4 * 255 * (127 * 16384 + 64 * 128 + 64)
 *          = 2 130 804 480 < 2^31 - 1 = 2 147 483 647;
 *   4-bit: 8 products (low and high nibbles) of q <= 15:
 *          8 * 15 * 2 089 024 = 250 682 880.
 * So one 64-byte load of codes is converted to f32 after its dpbusd chain
 * and multiplied by a per-lane factor (the scale of the lane's weight group,
 * permuted from 16 scales loaded per 16 groups, times S 2^-7(levels-1) of
 * the block). Only that f32 step and the f32 sums round: an error of a few
 * ulps of sum |terms|.
 *
 * Rows are streamed one after the other (one sequential stream: much faster
 * from DRAM than interleaving rows); the quantized activations are built
 * once per call, in the order the kernel reads them, in thread-local
 * scratch. Non-finite activations make X_g, hence the output, non-finite;
 * blocks with max|x| < 2^-96 are taken as zero (so that 1 / S stays
 * finite), an absolute error below 2^-96 sum |s q|. */
#if defined(__x86_64__)
#include <float.h>
#include <immintrin.h>
#include <string.h>

#include "compute/matmul/matmul_int8_rows.h"
#include "compute/matmul/matmul_internal.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/scratch.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512_VNNI)

typedef struct sp_vnni_plan {
    const sp_weight *w;
    const sp_vnni_scratch *sc;
    int64_t xsum_stride; /* floats per token in sc->xsum */
} sp_vnni_plan;

/* ------------------------------------------------ activation quantization */

/* Levels of 16 activations y = x / S (exactly, for 2 and 3 levels) as int8,
 * each level's 16 bytes stored `level_stride` apart. */
static inline __attribute__((always_inline)) void
sp_quant16(__m512 y, int levels, int8_t *out, int level_stride) {
    /* (a literal: clang wants an integer constant expression) */
#define SP_ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
    __m512 a = _mm512_roundscale_ps(y, SP_ROUND_NEAREST);
    _mm_store_si128((__m128i *)out,
                    _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(a)));
    for (int l = 1; l < levels; l++) {
        y = _mm512_mul_ps(_mm512_sub_ps(y, a), _mm512_set1_ps(128.0f));
        a = _mm512_roundscale_ps(y, SP_ROUND_NEAREST);
        _mm_store_si128((__m128i *)(out + l * level_stride),
                        _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(a)));
    }
}

/* Fill the scratch for one token. */
static void sp_quantize_token(const sp_weight *w, const float *x, int t,
                              int nt, int levels, sp_vnni_scratch *sc,
                              int64_t xsum_stride) {
    const int bits = w->bits, gs = w->group_size;
    const int cpc = bits == 4 ? 128 : 64; /* columns per chunk and block */
    const int64_t cols = w->cols;
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14,
                                          12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const float level_unit = sp_level_unit(levels);
    for (int64_t k = 0; k < cols / cpc; k++) {
        const size_t rec = (size_t)(k * nt + t);
        int8_t *act = sc->act + rec * (size_t)(levels * cpc);
        const float *xb = x + k * cpc;
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < cpc; j += 16)
            m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + j)));
        float s, inv;
        sp_block_scale(_mm512_reduce_max_ps(m), levels, &s, &inv);
        sc->factor[rec] = s * level_unit;
        const __m512 vinv = _mm512_set1_ps(inv);
        for (int j = 0; j < cpc; j += 32) {
            const __m512 v0 = _mm512_mul_ps(_mm512_loadu_ps(xb + j), vinv);
            const __m512 v1 = _mm512_mul_ps(_mm512_loadu_ps(xb + j + 16), vinv);
            if (bits == 4) {
                sp_quant16(_mm512_permutex2var_ps(v0, even, v1), levels,
                           act + j / 2, cpc);
                sp_quant16(_mm512_permutex2var_ps(v0, odd, v1), levels,
                           act + 64 + j / 2, cpc);
            } else {
                sp_quant16(v0, levels, act + j, cpc);
                sp_quant16(v1, levels, act + j + 16, cpc);
            }
        }
    }
    float *xs = sc->xsum + t * xsum_stride;
    const int64_t gpr = cols / gs;
    for (int64_t g = 0; g < gpr; g++) {
        __m512 a = _mm512_loadu_ps(x + g * gs);
        for (int j = 16; j < gs; j += 16)
            a = _mm512_add_ps(a, _mm512_loadu_ps(x + g * gs + j));
        xs[g] = _mm512_reduce_add_ps(a);
    }
    if (levels == 1) sp_int8_quantized_group_sums(x, cols, gs, cpc, xs);
    for (int64_t g = gpr; g < xsum_stride; g++) xs[g] = 0.0f;
}

/* ------------------------------------------------------------ row kernel */

/* Up to 16 consecutive scales or biases (lanes past `m` are zero). */
static inline __attribute__((always_inline)) __m512
sp_load_qparams(const void *p, sp_dtype t, size_t i, __mmask16 m) {
    const uint8_t *b = p;
    if (t == SP_DTYPE_F32) return _mm512_maskz_loadu_ps(m, b + 4 * i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, b + 2 * i);
    if (t == SP_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Half the scales of up to 16 consecutive MXFP4 groups (E8M0 bytes e:
 * 2^(e - 128), subnormal for e < 2, infinite for e = 255, as
 * sp_e8m0_half_mlx), lanes past `m` zero. */
static inline __attribute__((always_inline)) __m512
sp_load_e8m0_half(const void *p, size_t i, __mmask16 m) {
    const __m512i e = _mm512_cvtepu8_epi32(
        _mm_maskz_loadu_epi8(m, (const uint8_t *)p + i));
    const __m512i one = _mm512_set1_epi32(1);
    __m512i bits = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);
    bits = _mm512_mask_sllv_epi32(bits, _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)),
                                  _mm512_set1_epi32(0x00200000), e);
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epu32_mask(e, _mm512_set1_epi32(255)),
                                 _mm512_set1_epi32(0x7f800000));
    return _mm512_maskz_mov_ps(m, _mm512_castsi512_ps(bits));
}

/* Rows [r0, r1) for literal BITS, LEVELS and NT (n_tokens); MX: MXFP4 rows
 * (BITS 4): each code is looked up as the magnitude of its doubled E2M1
 * value (0..12, the unsigned operand) and its sign moves onto the
 * activation bytes (negated where the value is negative; |a| <= 127), so
 * the integers are exactly sum_j v_j a_j and the scale s is half the
 * group's E8M0 scale, with no bias term (an offset form u = v + 12 with
 * -12 s X_g would add 12 s times the activations' representation error;
 * measured 10x the error on gpt-oss). The lane bound holds with 12 for 15. */
static inline __attribute__((always_inline)) void
sp_vnni_rows(const sp_vnni_plan *p, float *y, int64_t r0, int64_t r1,
             const int BITS, const int LEVELS, const int NT, const int MX) {
    const sp_weight *w = p->w;
    const sp_vnni_scratch *sc = p->sc;
    const int CPC = BITS == 4 ? 128 : 64;
    const int REC = LEVELS * CPC; /* activation bytes per record */
    const int64_t gs = w->group_size, gpr = w->cols / gs;
    const size_t row_bytes = sp_affine_row_bytes(w);
    const sp_dtype qt = w->qparam_dtype;
    const __m512i nib = _mm512_set1_epi8(15);
    const __m128i kv = _mm_loadu_si128((const __m128i *)sp_mxfp4_kvalues);
    const __m512i lut = _mm512_broadcast_i32x4(kv);
    const __m512i lut_abs = _mm512_broadcast_i32x4(_mm_abs_epi8(kv));
    /* lane L of chunk j of 16 groups: group (j CPC + L CPC / 16) / gs */
    const __m512i lane_col = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(CPC / 16));
    const __m128i log2_gs = _mm_cvtsi32_si128(__builtin_ctzll((uint64_t)gs));
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *codes = (const uint8_t *)w->data + (size_t)r * row_bytes;
        const int8_t *act = sc->act;
        const float *factor = sc->factor;
        const size_t q0 = (size_t)(r * gpr);
        __m512 acc[SP_MM_DECODE_TOKENS];
        for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
        for (int64_t g0 = 0; g0 < gpr; g0 += 16) {
            const int64_t ng = gpr - g0 < 16 ? gpr - g0 : 16;
            const __mmask16 m = (__mmask16)((1u << ng) - 1u);
            const __m512 sv = MX ? sp_load_e8m0_half(w->scales, q0 + g0, m)
                                 : sp_load_qparams(w->scales, qt, q0 + g0, m);
            if (!MX) {
                const __m512 bv = sp_load_qparams(w->biases, qt, q0 + g0, m);
                for (int t = 0; t < NT; t++)
                    acc[t] = _mm512_fmadd_ps(
                        bv, _mm512_load_ps(sc->xsum + t * p->xsum_stride + g0),
                        acc[t]);
            }
            const int64_t nch = ng * gs / CPC;
            __m512i col = lane_col;
            for (int64_t j = 0; j < nch; j++, codes += 64, act += NT * REC,
                         factor += NT) {
                const __m512i b = _mm512_loadu_si512(codes);
                /* With 2-3 levels the kernel is slow enough that the
                 * hardware prefetcher falls behind; asking 16 loads ahead
                 * measured ~10% faster from DRAM (1 level: no gain). */
                if (LEVELS > 1)
                    _mm_prefetch((const char *)codes + 1024, _MM_HINT_T0);
                const __m512 ws =
                    _mm512_permutexvar_ps(_mm512_srl_epi32(col, log2_gs), sv);
                col = _mm512_add_epi32(col, _mm512_set1_epi32(CPC));
                __m512i lo = b, hi = b;
                if (BITS == 4) {
                    lo = _mm512_and_si512(b, nib);
                    hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib);
                }
                __mmask64 neg_lo = 0, neg_hi = 0;
                if (MX) {
                    neg_lo = _mm512_movepi8_mask(_mm512_shuffle_epi8(lut, lo));
                    neg_hi = _mm512_movepi8_mask(_mm512_shuffle_epi8(lut, hi));
                    lo = _mm512_shuffle_epi8(lut_abs, lo);
                    hi = _mm512_shuffle_epi8(lut_abs, hi);
                }
                const __m512i zero = _mm512_setzero_si512();
#define SP_SIGNED(v, neg) (MX ? _mm512_mask_sub_epi8((v), (neg), zero, (v)) : (v))
                for (int t = 0; t < NT; t++) {
                    const __m512i *a = (const __m512i *)(act + t * REC);
                    __m512i s;
                    if (BITS == 4) {
                        s = _mm512_dpbusd_epi32(zero, lo, SP_SIGNED(a[0], neg_lo));
                        s = _mm512_dpbusd_epi32(s, hi, SP_SIGNED(a[1], neg_hi));
                        for (int l = 1; l < LEVELS; l++) {
                            s = _mm512_slli_epi32(s, 7);
                            s = _mm512_dpbusd_epi32(s, lo, SP_SIGNED(a[2 * l], neg_lo));
                            s = _mm512_dpbusd_epi32(s, hi, SP_SIGNED(a[2 * l + 1], neg_hi));
                        }
                    } else {
                        s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), b, a[0]);
                        for (int l = 1; l < LEVELS; l++) {
                            s = _mm512_slli_epi32(s, 7);
                            s = _mm512_dpbusd_epi32(s, b, a[l]);
                        }
                    }
                    const __m512 f = _mm512_mul_ps(ws, _mm512_set1_ps(factor[t]));
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, acc[t]);
                }
#undef SP_SIGNED
            }
        }
        for (int t = 0; t < NT; t++)
            y[(int64_t)t * w->rows + r] = _mm512_reduce_add_ps(acc[t]);
    }
}

typedef void sp_vnni_rows_fn(const sp_vnni_plan *p, float *y, int64_t r0,
                             int64_t r1);

#define SP_VNNI_VARIANT(B, L, T)                                               \
    static void sp_vnni_rows_b##B##_l##L##_t##T(                               \
        const sp_vnni_plan *p, float *y, int64_t r0, int64_t r1) {             \
        sp_vnni_rows(p, y, r0, r1, B == 8 ? 8 : 4, L, T, B == 40);             \
    }
#define SP_VNNI_TOKENS(B, L)                                                   \
    SP_VNNI_VARIANT(B, L, 1)                                                   \
    SP_VNNI_VARIANT(B, L, 2) SP_VNNI_VARIANT(B, L, 3) SP_VNNI_VARIANT(B, L, 4)\
    SP_VNNI_VARIANT(B, L, 5) SP_VNNI_VARIANT(B, L, 6) SP_VNNI_VARIANT(B, L, 7)\
    SP_VNNI_VARIANT(B, L, 8)
SP_VNNI_TOKENS(4, 1)
SP_VNNI_TOKENS(4, 2)
SP_VNNI_TOKENS(4, 3)
SP_VNNI_TOKENS(8, 1)
SP_VNNI_TOKENS(8, 2)
SP_VNNI_TOKENS(8, 3)
SP_VNNI_TOKENS(40, 1) /* "bits" 40: MXFP4 */
SP_VNNI_TOKENS(40, 2)
SP_VNNI_TOKENS(40, 3)

#define SP_VNNI_ROW(B, L)                                                      \
    {sp_vnni_rows_b##B##_l##L##_t1, sp_vnni_rows_b##B##_l##L##_t2,             \
     sp_vnni_rows_b##B##_l##L##_t3, sp_vnni_rows_b##B##_l##L##_t4,             \
     sp_vnni_rows_b##B##_l##L##_t5, sp_vnni_rows_b##B##_l##L##_t6,             \
     sp_vnni_rows_b##B##_l##L##_t7, sp_vnni_rows_b##B##_l##L##_t8}
/* [affine 4 bits, affine 8 bits, MXFP4][levels - 1][n_tokens - 1] */
static sp_vnni_rows_fn *const sp_vnni_variants[3][3][SP_MM_DECODE_TOKENS] = {
    {SP_VNNI_ROW(4, 1), SP_VNNI_ROW(4, 2), SP_VNNI_ROW(4, 3)},
    {SP_VNNI_ROW(8, 1), SP_VNNI_ROW(8, 2), SP_VNNI_ROW(8, 3)},
    {SP_VNNI_ROW(40, 1), SP_VNNI_ROW(40, 2), SP_VNNI_ROW(40, 3)},
};

/* ------------------------------------------------------------ entry point */

bool sp_mm_rows_vnni_covers(const sp_weight *w, int n_tokens, int levels) {
    return sp_int8_rows_cover(w, n_tokens, levels);
}

bool sp_mm_rows_vnni(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels) {
    if (!sp_mm_rows_vnni_covers(w, n_tokens, levels)) return false;
    if (r0 >= r1) return true;
    if (!x || !y || r0 < 0 || r1 > w->rows) return false;
    /* 200 KiB: too much for worker stacks; built once per call */
    sp_vnni_scratch *sc = sp_scratch_get(SP_SCRATCH_AFFINE_ROWS, sizeof *sc);
    if (!sc) return false;
    const int64_t gs = w->group_size, cols = w->cols;
    const int64_t xsum_stride = (cols / gs + 15) / 16 * 16;
    for (int t = 0; t < n_tokens; t++)
        sp_quantize_token(w, x + (int64_t)t * cols, t, n_tokens, levels, sc,
                          xsum_stride);
    const sp_vnni_plan plan = {.w = w, .sc = sc, .xsum_stride = xsum_stride};
    const int kind = w->type == SP_W_MXFP4 ? 2 : w->bits == 8;
    sp_vnni_variants[kind][levels - 1][n_tokens - 1](&plan, y, r0, r1);
    return true;
}
SP_TARGET_END
#else
#include "compute/matmul/matmul_simd.h"

bool sp_mm_rows_vnni_covers(const sp_weight *w, int n_tokens, int levels) {
    (void)w; (void)n_tokens; (void)levels;
    return false; /* no VNNI off x86 */
}
bool sp_mm_rows_vnni(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels) {
    (void)x; (void)y; (void)r0; (void)r1;
    return sp_mm_rows_vnni_covers(w, n_tokens, levels);
}
#endif
