/* Opt-in prefill tile for bf16 weights with AVX-512 BF16 (vdpbf16ps: 32
 * bf16 products summed pairwise into 16 f32 lanes per instruction, twice
 * the f32 FMA rate).
 *
 * Same layout as the f32 tile of matmul_simd.inc (rows in the lanes, one
 * broadcast per token), except that a lane holds a pair of adjacent columns.
 * The weights are bf16 already, so packing them is exact; the activations
 * are rounded to bf16 (round to nearest even) once per token block, which is
 * the only change in numerics: each product x_j w_j becomes bf16(x_j) w_j,
 * an error of at most 2^-8 |x_j w_j| (bf16 keeps 8 significant bits),
 * and vdpbf16ps flushes subnormal inputs and outputs. Hence |y - y_exact| <= 2^-8 sum_j |x_j w_j| plus the
 * usual f32 accumulation error. Used only in the fast precision mode
 * (cpu_features.c). */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "compute/matmul/matmul_simd.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512_BF16)
#include "compute/matmul/matmul_transpose.h"

#define MP 32       /* rows per panel: two vectors */
#define MT 6        /* tokens per micro-kernel call */
#define KC 256      /* columns per panel (KC / 2 pairs): 16 KiB */

/* The two AVX-512 BF16 instructions, on bf16 pairs held in __m512: in asm
 * because the intrinsics' __m512bh type differs between the compilers
 * (gcc: shorts, clang: __bf16), and clang 16 looped forever optimizing the
 * bit casts between it and __m512. */
/* lanes 0..15: pairs from lo, 16..31 from hi, rounded to nearest even */
static inline __attribute__((always_inline)) __m512 bf_round2(__m512 hi,
                                                              __m512 lo) {
    __m512 r;
    __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(hi), "v"(lo));
    return r;
}

/* acc + w[2i] x[2i] + w[2i+1] x[2i+1] per f32 lane i */
static inline __attribute__((always_inline)) __m512 bf_dot2(__m512 acc,
                                                            __m512 w,
                                                            __m512 x) {
    __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
}

/* 32 columns (fewer at the end: zeros) of f32 as 16 bf16 pairs. */
static inline __attribute__((always_inline)) __m512
bf_pairs(const float *p, int64_t n) {
    const __mmask16 m0 = n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1u);
    const int64_t n1 = n - 16;
    const __mmask16 m1 = n1 >= 16 ? 0xFFFF
                         : n1 <= 0 ? 0 : (__mmask16)((1u << n1) - 1u);
    const __m512 lo = _mm512_maskz_loadu_ps(m0, p);
    const __m512 hi = _mm512_maskz_loadu_ps(m1, p + 16);
    /* words 0..15 from lo, 16..31 from hi: dword j = columns 2j, 2j+1 */
    return bf_round2(hi, lo);
}

/* panel[p * MP + i] = bf16 pair (columns 2p, 2p+1) of row i < nr, zero
 * rows above nr and a zero column past an odd kn. */
static void bf_pack(const float *tile, int64_t ldt, int nr, int64_t kn,
                    float *restrict panel) {
    for (int64_t k = 0; k < kn; k += 32) {
        const int64_t pairs = (kn - k + 1) / 2 < 16 ? (kn - k + 1) / 2 : 16;
        for (int v = 0; v < MP / 16; v++) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                const int row = v * 16 + i;
                r[i] = row < nr ? bf_pairs(tile + row * ldt + k, kn - k)
                                : _mm512_setzero_ps();
            }
            sp_transpose16(r);
            for (int j = 0; j < pairs; j++)
                _mm512_store_ps(panel + (k / 2 + j) * MP + v * 16, r[j]);
        }
    }
}

static inline __attribute__((always_inline)) void
bf_micro(const float *restrict panel, int64_t kp, const float *xb,
         const int mt, int nr, float *y, int64_t ldy, bool accumulate) {
    __m512 acc[MT][2];
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp; p++) {
        const __m512 w0 = _mm512_load_ps(panel + p * MP);
        const __m512 w1 = _mm512_load_ps(panel + p * MP + 16);
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) {
            const __m512 xv = _mm512_set1_ps(xb[t * (KC / 2) + p]);
            acc[t][0] = bf_dot2(acc[t][0], w0, xv);
            acc[t][1] = bf_dot2(acc[t][1], w1, xv);
        }
    }
    for (int t = 0; t < mt; t++) {
        float *o = y + t * ldy;
        if (nr == MP) {
            for (int v = 0; v < 2; v++)
                _mm512_storeu_ps(o + 16 * v,
                                 accumulate ? _mm512_add_ps(_mm512_loadu_ps(o + 16 * v),
                                                            acc[t][v])
                                            : acc[t][v]);
            continue;
        }
        _Alignas(64) float s[MP];
        _mm512_store_ps(s, acc[t][0]);
        _mm512_store_ps(s + 16, acc[t][1]);
        for (int i = 0; i < nr; i++) o[i] = accumulate ? o[i] + s[i] : s[i];
    }
}

void sp_mm_tile_bf16(const float *tile, int64_t ldt, int nr, const float *x,
                     int64_t ldx, int nt, int64_t kn, float *y, int64_t ldy,
                     bool acc) {
    _Alignas(64) float panel[KC / 2 * MP];
    _Alignas(64) float xb[MT * KC / 2]; /* bf16 pairs of MT tokens */
    for (int i = 0; i < nr; i += MP) {
        const int mr = nr - i < MP ? nr - i : MP;
        for (int64_t k0 = 0; k0 < kn; k0 += KC) {
            const int64_t kc = kn - k0 < KC ? kn - k0 : KC, kp = (kc + 1) / 2;
            const bool a = acc || k0 > 0;
            bf_pack(tile + i * ldt + k0, ldt, mr, kc, panel);
            for (int t = 0; t < nt; t += MT) {
                const int mt = nt - t < MT ? nt - t : MT;
                for (int u = 0; u < mt; u++)
                    for (int64_t k = 0; k < kc; k += 32)
                        _mm512_storeu_ps(xb + u * (KC / 2) + k / 2,
                                         bf_pairs(x + (t + u) * ldx + k0 + k,
                                                  kc - k));
                float *yt = y + t * ldy + i;
                switch (mt) {
                case 1: bf_micro(panel, kp, xb, 1, mr, yt, ldy, a); break;
                case 2: bf_micro(panel, kp, xb, 2, mr, yt, ldy, a); break;
                case 3: bf_micro(panel, kp, xb, 3, mr, yt, ldy, a); break;
                case 4: bf_micro(panel, kp, xb, 4, mr, yt, ldy, a); break;
                case 5: bf_micro(panel, kp, xb, 5, mr, yt, ldy, a); break;
                default: bf_micro(panel, kp, xb, 6, mr, yt, ldy, a); break;
                }
            }
        }
    }
}
SP_TARGET_END
#else
#include "compute/matmul/matmul_simd.h"

/* Never selected off x86 (sp_mm_bf16_force refuses); exact plain dots keep
 * the symbol's contract for callers that name it directly. */
void sp_mm_tile_bf16(const float *tile, int64_t ldt, int nr, const float *x,
                     int64_t ldx, int nt, int64_t kn, float *y, int64_t ldy,
                     bool acc) {
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < nr; i++) {
            float s = 0;
            for (int64_t k = 0; k < kn; k++)
                s += tile[i * ldt + k] * x[t * ldx + k];
            y[t * ldy + i] = acc ? y[t * ldy + i] + s : s;
        }
}
#endif
