/* Activation quantizers (ggml's reference quantize_row_q8_{0,1,K}_ref,
 * transcribed) and the portable integer block products of the decode
 * kernels. Each portable row product follows ggml-cpu/quants.c
 * ggml_vec_dot_<type>_q8_<x>_generic: the same integer sums per block, the
 * same float expression per block, so that it is also the yardstick the SIMD
 * kernels (ggml_dot_avx2.c, ggml_dot_vnni.c, ggml_dot_kquants_vnni.c,
 * ggml_dot_neon.c, ggml_dot_kquants_neon.c) are held to. */
#include "compute/ggml/ggml_dot.h"

#include <math.h>
#include <string.h>

/* ggml evaluates its per-block float expressions without contraction. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

uint32_t sp_ggml_dot_act_type(uint32_t type) {
    switch (type) {
    case SP_GGML_Q4_0:
    case SP_GGML_Q5_0:
    case SP_GGML_Q8_0:
    case SP_GGML_MXFP4: return SP_GGML_Q8_0;
    case SP_GGML_Q4_1:
    case SP_GGML_Q5_1: return SP_GGML_Q8_1;
    case SP_GGML_Q2_K:
    case SP_GGML_Q3_K:
    case SP_GGML_Q4_K:
    case SP_GGML_Q5_K:
    case SP_GGML_Q6_K: return SP_GGML_Q8_K;
    default: return 0;
    }
}

bool sp_ggml_dot_covered(uint32_t type, int64_t cols) {
    const uint32_t at = sp_ggml_dot_act_type(type);
    const sp_ggml_type_traits *tr = sp_ggml_traits(type);
    if (!at || !tr || cols <= 0 || cols > SP_GGML_DOT_MAX_COLS) return false;
    return cols % tr->block_size == 0;
}

static float f16_round(float f) { return sp_f16_to_f32(sp_f32_to_f16(f)); }

/* llama.cpp's CPU backend does not quantize activations with the reference
 * quantize_row_q8_{0,1}_ref but with the SIMD quantize_row_q8_{0,1} of its
 * build (ggml-cpu/arch/.../quants.c), and those round differently:
 *   x86 (AVX/AVX2/AVX-512 builds): q = round-to-nearest-even(x * (127 / amax))
 *   AArch64 NEON:                  q = round-to-nearest-even(x * (1 / d))
 *   otherwise (the reference):     q = round-half-away(x * (1 / d))
 * with d = amax / 127 in every case. Both factors differ from each other by
 * an ulp now and then, and ties happen, so matching llama.cpp value for value
 * takes the variant its CPU build runs. */
#if defined(__x86_64__) || defined(__aarch64__)
/* Round to nearest, ties to even, for |v| < 2^22 (the float-mantissa trick
 * of ggml's nearest_int, as cvtps/vcvtn do in the default rounding mode). */
static inline int round_act(float v) {
    const float t = v + 12582912.f;
    int i;
    memcpy(&i, &t, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}
#else
/* (int)roundf(v) (half away from zero) for |v| < 2^31, inline: roundf is a
 * libm call per value. The fraction v - trunc(v) is exact in f32. */
static inline int round_act(float v) {
    const int i = (int)v;
    const float f = v - (float)i;
    return i + (f >= 0.5f) - (f <= -0.5f);
}
#endif

/* The multiplier x -> x / d of the activation quantizer (see round_act). */
static inline float act_inverse_scale(float amax, float d) {
#if defined(__x86_64__)
    (void)d;
    return amax != 0.0f ? 127.f / amax : 0.0f;
#else
    (void)amax;
    return d ? 1.0f / d : 0.0f;
#endif
}

/* ggml-quants.c nearest_int: round to nearest, ties to even, through the
 * float mantissa (valid for |fval| <= 2^22). */
static int nearest_int(float fval) {
    const float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* quantize_row_q8_0 / quantize_row_q8_1 of llama.cpp's CPU build: per 32,
 * d = amax / 127 (stored as f16), q = x * act_inverse_scale rounded by
 * round_act, s = f16(d * sum(q)). */
static void quantize_q8_01(const float *x, int64_t cols, bool with_s,
                           sp_ggml_act *a) {
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = fabsf(xb[j]);
            amax = amax > v ? amax : v; /* MAX(amax, fabsf(v)) */
        }
        const float d = amax / ((1 << 7) - 1);
        const float id = act_inverse_scale(amax, d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const int8_t q = (int8_t)round_act(xb[j] * id);
            a->q[b * 32 + j] = q;
            sum += q;
        }
        a->d[b] = f16_round(d);
        a->s[b] = with_s ? f16_round((float)sum * d) : 0.0f;
    }
}

/* quantize_row_q8_K_ref: per 256, iscale = -127 / (the value of largest
 * magnitude), q = min(127, nearest_int(iscale * x)), d = 1 / iscale (f32),
 * bsums per 16. An all-zero block gets d = 0 and zero values. */
static void quantize_q8_K(const float *x, int64_t cols, sp_ggml_act *a) {
    for (int64_t b = 0; b < cols / SP_QK_K; b++) {
        const float *xb = x + b * SP_QK_K;
        int8_t *q = a->q + b * SP_QK_K;
        float max = 0, amax = 0;
        for (int j = 0; j < SP_QK_K; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (!amax) {
            a->d[b] = 0;
            memset(q, 0, SP_QK_K);
        } else {
            const float iscale = -127.f / max;
            for (int j = 0; j < SP_QK_K; j++) {
                const int v = nearest_int(iscale * xb[j]);
                q[j] = (int8_t)(v < 127 ? v : 127);
            }
            a->d[b] = 1 / iscale;
        }
        for (int j = 0; j < SP_QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += q[j * 16 + i];
            a->bsums[b * (SP_QK_K / 16) + j] = (int16_t)sum;
        }
    }
}

bool sp_ggml_quantize_act(uint32_t act_type, const float *x, int64_t cols,
                          sp_ggml_act *out) {
    if (!x || !out || cols <= 0 || cols > SP_GGML_DOT_MAX_COLS) return false;
#if defined(__x86_64__)
    const sp_simd_level level = sp_simd_current();
    if ((level == SP_SIMD_AVX2 || level == SP_SIMD_AVXVNNI || level == SP_SIMD_AVX512) &&
        (act_type == SP_GGML_Q8_0 || act_type == SP_GGML_Q8_1 || act_type == SP_GGML_Q8_K))
        return sp_ggml_quantize_act_avx2(act_type, x, cols, out);
#endif
    switch (act_type) {
    case SP_GGML_Q8_0:
    case SP_GGML_Q8_1:
        if (cols % 32) return false;
        quantize_q8_01(x, cols, act_type == SP_GGML_Q8_1, out);
        break;
    case SP_GGML_Q8_K:
        if (cols % SP_QK_K) return false;
        quantize_q8_K(x, cols, out);
        break;
    default: return false;
    }
    sp_ggml_act_group_sums(out, cols);
    return true;
}

void sp_ggml_act_group_sums(sp_ggml_act *a, int64_t cols) {
    for (int64_t g = 0; g < cols / 4; g++)
        a->sum4[g] = a->q[4 * g] + a->q[4 * g + 1] + a->q[4 * g + 2] +
                     a->q[4 * g + 3];
    for (int64_t g = 0; g < cols / 32; g++) {
        int32_t s = 0;
        for (int j = 0; j < 8; j++) s += a->sum4[8 * g + j];
        a->sum32[g] = s;
    }
}

static float f16(uint16_t h) { return sp_f16_to_f32(h); }

/* ---- portable row products, one per weight type (ggml's generic code) ---- */

/* q4_0, q4_1, q5_0, q5_1: 32 codes of 4 bits (q5: a fifth bit from qh)
 * minus an offset (q4_0: 8, q5_0: 16) or with a min (q4_1, q5_1). Blocks are
 * {d, [m,] [qh[4],] qs[16]} with f16 d and m; the float expression per block
 * is ggml's generic one for each type. */
static float dot_q45(const unsigned char *row, const sp_ggml_act *a,
                     int64_t nb, uint32_t type) {
    const bool five = type == SP_GGML_Q5_0 || type == SP_GGML_Q5_1;
    const bool has_min = type == SP_GGML_Q4_1 || type == SP_GGML_Q5_1;
    const int offset = type == SP_GGML_Q4_0 ? 8 : type == SP_GGML_Q5_0 ? 16 : 0;
    const size_t bs = sp_ggml_traits(type)->type_size;
    const size_t qh_at = has_min ? 4 : 2, qs_at = qh_at + (five ? 4 : 0);
    float sumf = 0;
    for (int64_t ib = 0; ib < nb; ib++) {
        const unsigned char *blk = row + (size_t)ib * bs;
        const int8_t *y = a->q + ib * 32;
        uint32_t qh = 0;
        if (five) memcpy(&qh, blk + qh_at, 4);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            sumi0 += (((blk[qs_at + j] & 0x0F) | h0) - offset) * y[j];
            sumi1 += (((blk[qs_at + j] >> 4) | h1) - offset) * y[j + 16];
        }
        uint16_t d, m;
        memcpy(&d, blk, 2);
        memcpy(&m, blk + 2, 2);
        if (type == SP_GGML_Q4_0)
            sumf += (sumi0 + sumi1) * f16(d) * a->d[ib];
        else if (type == SP_GGML_Q5_0)
            sumf += (f16(d) * a->d[ib]) * (sumi0 + sumi1);
        else
            sumf += (f16(d) * a->d[ib]) * (sumi0 + sumi1) + f16(m) * a->s[ib];
    }
    return sumf;
}

static float dot_q8_0(const void *row, const sp_ggml_act *a, int64_t nb) {
    const sp_block_q8_0 *x = row;
    float sumf = 0;
    for (int64_t ib = 0; ib < nb; ib++) {
        const int8_t *y = a->q + ib * 32;
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += x[ib].qs[j] * y[j];
        sumf += sumi * (f16(x[ib].d) * a->d[ib]);
    }
    return sumf;
}

/* ggml_vec_dot_mxfp4_q8_0_generic: the doubled E2M1 values as integers,
 * d = d_x * half the weight scale per block. */
static float dot_mxfp4(const void *row, const sp_ggml_act *a, int64_t nb) {
    const sp_block_mxfp4 *x = row;
    float sumf = 0;
    for (int64_t ib = 0; ib < nb; ib++) {
        const int8_t *y = a->q + ib * 32;
        const float d = a->d[ib] * sp_e8m0_half_ggml(x[ib].e);
        int sumi1 = 0, sumi2 = 0;
        for (int j = 0; j < 16; j++) {
            sumi1 += y[j] * sp_mxfp4_kvalues[x[ib].qs[j] & 0xf];
            sumi2 += y[j + 16] * sp_mxfp4_kvalues[x[ib].qs[j] >> 4];
        }
        sumf += d * (sumi1 + sumi2);
    }
    return sumf;
}

static float dot_q2_K(const void *row, const sp_ggml_act *a, int64_t nb) {
    const sp_block_q2_K *x = row;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q2 = x[i].qs;
        const int8_t *q8 = a->q + i * SP_QK_K;
        const int16_t *bsums = a->bsums + i * 16;
        const uint8_t *sc = x[i].scales;
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += bsums[j] * (sc[j] >> 4);
        const float dall = a->d[i] * f16(x[i].d);
        const float dmin = a->d[i] * f16(x[i].dmin);
        int isum = 0, is = 0;
        for (int k = 0; k < SP_QK_K / 128; k++) {
            int shift = 0;
            for (int j = 0; j < 4; j++) {
                for (int half = 0; half < 2; half++) {
                    const int d = sc[is++] & 0xF;
                    int isuml = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        isuml += q8[l] * ((q2[l] >> shift) & 3);
                    isum += d * isuml;
                }
                shift += 2;
                q8 += 32;
            }
            q2 += 32;
        }
        sumf += dall * isum - dmin * summs;
    }
    return sumf;
}

static float dot_q3_K(const void *row, const sp_ggml_act *a, int64_t nb) {
    const sp_block_q3_K *x = row;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const int8_t *q8 = a->q + i * SP_QK_K;
        int isum = 0;
        for (int sb = 0; sb < 16; sb++) {
            /* element e = 128 n + 32 s + l: qs[32 n + l] >> 2 s, hmask bit
             * 4 n + s of hmask[l] */
            int sub = 0;
            for (int k = 0; k < 16; k++) {
                const int e = sb * 16 + k, n = e / 128, s = (e % 128) / 32,
                          l = e % 32;
                const int lo = (x[i].qs[32 * n + l] >> (2 * s)) & 3;
                const int hb = (x[i].hmask[l] >> (4 * n + s)) & 1;
                sub += q8[e] * (lo - (hb ? 0 : 4));
            }
            isum += sp_get_scale_k3(x[i].scales, sb) * sub;
        }
        sumf += f16(x[i].d) * a->d[i] * isum;
    }
    return sumf;
}

/* q4_K and q5_K: 8 sub-blocks of 32 with 6-bit scales and mins. */
static float dot_q45_K(const void *row, const sp_ggml_act *a, int64_t nb,
                       bool five) {
    const size_t bsz = five ? sizeof(sp_block_q5_K) : sizeof(sp_block_q4_K);
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = (const uint8_t *)row + (size_t)i * bsz;
        const sp_block_q4_K *x4 = (const sp_block_q4_K *)blk;
        const sp_block_q5_K *x5 = (const sp_block_q5_K *)blk;
        const uint8_t *scales = five ? x5->scales : x4->scales;
        const uint8_t *qs = five ? x5->qs : x4->qs;
        const int8_t *q8 = a->q + i * SP_QK_K;
        const int16_t *bsums = a->bsums + i * 16;
        int isum = 0, summs = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            sp_get_scale_min_k4(j, scales, &sc, &m);
            summs += (bsums[2 * j] + bsums[2 * j + 1]) * m;
            const uint8_t *q = qs + 32 * (j / 2);
            int sub = 0;
            for (int l = 0; l < 32; l++) {
                int v = j % 2 ? q[l] >> 4 : q[l] & 0xF;
                if (five) v += (x5->qh[l] >> j) & 1 ? 16 : 0;
                sub += q8[32 * j + l] * v;
            }
            isum += sc * sub;
        }
        const uint16_t dh = five ? x5->d : x4->d, mh = five ? x5->dmin : x4->dmin;
        sumf += f16(dh) * a->d[i] * isum;
        sumf -= f16(mh) * a->d[i] * summs;
    }
    return sumf;
}

static float dot_q6_K(const void *row, const sp_ggml_act *a, int64_t nb) {
    const sp_block_q6_K *x = row;
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++) {
        const int8_t *q8 = a->q + i * SP_QK_K;
        int isum = 0;
        for (int sb = 0; sb < 16; sb++) {
            int sub = 0;
            for (int k = 0; k < 16; k++) {
                /* element e = 128 n + 32 s + l (s = 0..3) */
                const int e = sb * 16 + k, n = e / 128, s = (e % 128) / 32,
                          l = e % 32;
                const uint8_t ql = x[i].ql[64 * n + l + 32 * (s & 1)];
                const int lo = s < 2 ? ql & 0xF : ql >> 4;
                const int hi = (x[i].qh[32 * n + l] >> (2 * s)) & 3;
                sub += q8[e] * ((lo | hi << 4) - 32);
            }
            isum += x[i].scales[sb] * sub;
        }
        sumf += f16(x[i].d) * a->d[i] * isum;
    }
    return sumf;
}

bool sp_ggml_rows_q8_portable(const sp_weight *w, const sp_ggml_act *act,
                              int n_tokens, float *y, int64_t r0, int64_t r1) {
    if (!sp_ggml_rows_q8_takes(w, n_tokens)) return false;
    const sp_ggml_type_traits *tr = sp_ggml_traits(w->ggml_type);
    const int64_t nb = w->cols / tr->block_size;
    const size_t row_bytes = sp_ggml_row_size(w->ggml_type, w->cols);
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const uint8_t *)w->data + (size_t)r * row_bytes;
        for (int t = 0; t < n_tokens; t++) {
            const sp_ggml_act *a = act + t;
            float v = 0;
            switch (w->ggml_type) {
            case SP_GGML_Q4_0:
            case SP_GGML_Q4_1:
            case SP_GGML_Q5_0:
            case SP_GGML_Q5_1: v = dot_q45(row, a, nb, w->ggml_type); break;
            case SP_GGML_Q8_0: v = dot_q8_0(row, a, nb); break;
            case SP_GGML_MXFP4: v = dot_mxfp4(row, a, nb); break;
            case SP_GGML_Q2_K: v = dot_q2_K(row, a, nb); break;
            case SP_GGML_Q3_K: v = dot_q3_K(row, a, nb); break;
            case SP_GGML_Q4_K: v = dot_q45_K(row, a, nb, false); break;
            case SP_GGML_Q5_K: v = dot_q45_K(row, a, nb, true); break;
            case SP_GGML_Q6_K: v = dot_q6_K(row, a, nb); break;
            default: return false;
            }
            y[(int64_t)t * w->rows + r] = v;
        }
    }
    return true;
}

bool sp_ggml_rows_q8(const sp_weight *w, const sp_ggml_act *act, int n_tokens,
                     float *y, int64_t r0, int64_t r1, sp_simd_level level) {
#if defined(__x86_64__)
    if (level == SP_SIMD_AVX512 && sp_cpu_features_get()->avx512vnni &&
        (sp_ggml_rows_q8_vnni(w, act, n_tokens, y, r0, r1) ||
         sp_ggml_rows_q8_kquants_vnni(w, act, n_tokens, y, r0, r1)))
        return true;
    if (level == SP_SIMD_AVXVNNI &&
        sp_ggml_rows_q8_avxvnni(w, act, n_tokens, y, r0, r1))
        return true;
    if (level >= SP_SIMD_AVX2 &&
        (sp_ggml_rows_q8_avx2(w, act, n_tokens, y, r0, r1) ||
         sp_ggml_rows_q8_kquants_avx2(w, act, n_tokens, y, r0, r1)))
        return true;
#elif defined(__aarch64__)
    if (level == SP_SIMD_I8MM && sp_ggml_rows_q8_i8mm(w, act, n_tokens, y, r0, r1))
        return true;
    if ((level == SP_SIMD_DOTPROD || level == SP_SIMD_I8MM) &&
        (sp_ggml_rows_q8_dotprod(w, act, n_tokens, y, r0, r1) ||
         sp_ggml_rows_q8_kquants_dotprod(w, act, n_tokens, y, r0, r1)))
        return true;
#else
    (void)level;
#endif
    return sp_ggml_rows_q8_portable(w, act, n_tokens, y, r0, r1);
}

void sp_ggml_span_dot(const float *w, const float *x, int64_t ldx, int nt,
                      int64_t n, float *out, sp_simd_level level) {
#if defined(__x86_64__)
    if (level >= SP_SIMD_AVX512) {
        sp_ggml_span_dot_avx512(w, x, ldx, nt, n, out);
        return;
    }
#else
    (void)level;
#endif
    for (int t = 0; t < nt; t++) {
        /* 16 independent partial sums: an order gcc may keep while
         * vectorizing without -ffast-math */
        float s[16] = {0};
        const float *xt = x + (int64_t)t * ldx;
        for (int64_t k = 0; k + 16 <= n; k += 16)
            for (int j = 0; j < 16; j++) s[j] += w[k + j] * xt[k + j];
        float sum = 0;
        for (int j = 0; j < 16; j++) sum += s[j];
        out[t] += sum;
    }
}
