/* Activations split into several int8 parts per block, for the decode
 * kernels of ggml_dot.h at precision high: x = sum_l d_l * q_l + r, each
 * part quantizing what the previous ones left (|r| <= d_l / 2 after part l,
 * d_{l+1} = max|r| / 127), so 3 parts keep about 22 significant bits of
 * every block. Every part is a valid sp_ggml_act of its type, with f32 (not
 * f16-rounded) scales and exact f32 sums s, so the kernels' integer block
 * sums of each part are exact and the parts add up to the f32 product up to
 * summation order: llama.cpp's single 8-bit rounding of the activations
 * (precision fast) moves logits by tenths, and through 30 layers chaotically
 * (bench/history/until-2026-12-07.md), this does not. */
#include "compute/ggml/ggml_dot.h"

#include <math.h>
#include <string.h>

#include "compute/cpu_features.h"

/* Round to nearest, ties to even (|v| <= 2^22). */
static int nearest(float v) {
    const float t = v + 12582912.f;
    int i;
    memcpy(&i, &t, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* One block of `bs` values in `levels` parts: q[l][0..bs), d[l], sum[l]. */
static void split_block(const float *x, int bs, int levels, int8_t *const q[],
                        float d[], int32_t sum[], bool avx2) {
#if defined(__x86_64__)
    if (avx2) {
        sp_ggml_split_block_avx2(x, bs, levels, q, d, sum);
        return;
    }
#endif
    (void)avx2;
    float r[SP_QK_K];
    memcpy(r, x, (size_t)bs * sizeof(float));
    for (int l = 0; l < levels; l++) {
        float amax = 0.0f;
        for (int j = 0; j < bs; j++) amax = fmaxf(amax, fabsf(r[j]));
        const float dl = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int32_t s = 0;
        for (int j = 0; j < bs; j++) {
            int v = nearest(r[j] * id);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            q[l][j] = (int8_t)v;
            s += v;
            r[j] = fmaf((float)-v, dl, r[j]); /* exact: |result| <= d */
        }
        d[l] = dl;
        sum[l] = s;
    }
}

void sp_ggml_split_row32(const float *x, int64_t cols, int levels,
                         int8_t *const q[], float *const d[],
                         int32_t *const sum32[]) {
#if defined(__x86_64__)
    if (sp_simd_current() >= SP_SIMD_AVX512) {
        sp_ggml_split_row32_avx512(x, cols, levels, q, d, sum32);
        return;
    }
#endif
    const bool avx2 = sp_simd_avx2_active();
    for (int64_t b = 0; b < cols / 32; b++) {
        int8_t *qb[SP_GGML_SPLIT_MAX_LEVELS] = {0};
        float db[SP_GGML_SPLIT_MAX_LEVELS];
        int32_t sb[SP_GGML_SPLIT_MAX_LEVELS];
        for (int l = 0; l < levels; l++) qb[l] = q[l] + 32 * b;
        split_block(x + 32 * b, 32, levels, qb, db, sb, avx2);
        for (int l = 0; l < levels; l++) d[l][b] = db[l], sum32[l][b] = sb[l];
    }
}

static void block_sums(int64_t cols, bool k_quant, sp_ggml_act *a) {
    sp_ggml_act_group_sums(a, cols);
    if (k_quant)
        for (int64_t g = 0; g < cols / 16; g++)
            a->bsums[g] = (int16_t)(a->sum4[4 * g] + a->sum4[4 * g + 1] +
                                    a->sum4[4 * g + 2] + a->sum4[4 * g + 3]);
}

bool sp_ggml_quantize_act_split(uint32_t act_type, const float *x,
                                int64_t cols, int levels, sp_ggml_act *parts) {
    if (!x || !parts || levels < 1 || levels > SP_GGML_SPLIT_MAX_LEVELS ||
        cols <= 0 || cols > SP_GGML_DOT_MAX_COLS)
        return false;
    const bool k_quant = act_type == SP_GGML_Q8_K;
    if (act_type != SP_GGML_Q8_0 && act_type != SP_GGML_Q8_1 && !k_quant)
        return false;
    const int bs = k_quant ? SP_QK_K : 32;
    if (cols % bs) return false;
    int8_t *q[SP_GGML_SPLIT_MAX_LEVELS];
    float *d[SP_GGML_SPLIT_MAX_LEVELS];
    int32_t *sum32[SP_GGML_SPLIT_MAX_LEVELS];
    for (int l = 0; l < levels; l++)
        q[l] = parts[l].q, d[l] = parts[l].d, sum32[l] = parts[l].sum32;
    if (k_quant) {
        const bool avx2 = sp_simd_avx2_active();
        for (int64_t b = 0; b < cols / bs; b++) {
            int8_t *qb[SP_GGML_SPLIT_MAX_LEVELS] = {0};
            float db[SP_GGML_SPLIT_MAX_LEVELS];
            int32_t sb[SP_GGML_SPLIT_MAX_LEVELS];
            for (int l = 0; l < levels; l++) qb[l] = q[l] + b * bs;
            split_block(x + b * bs, bs, levels, qb, db, sb, avx2);
            for (int l = 0; l < levels; l++) parts[l].d[b] = db[l];
        }
    } else {
        sp_ggml_split_row32(x, cols, levels, q, d, sum32);
        for (int l = 0; l < levels; l++)
            for (int64_t b = 0; b < cols / 32; b++)
                parts[l].s[b] = (float)parts[l].sum32[b] * parts[l].d[b];
    }
    for (int l = 0; l < levels; l++) block_sums(cols, k_quant, &parts[l]);
    return true;
}
