/* Reference dequantization of ggml block formats, written to perform the same
 * float32 operations in the same order as ggml's dequantize_row_* so that
 * results are bit-identical (tests/unit_py/test_gguf_dequant.py checks this
 * against the `gguf` Python package). Speed is not the goal here; kernels
 * that read blocks directly come later. */
#include "compute/ggml/ggml_quants.h"
#include "compute/cpu_features.h"
#include "compute/tensor.h"

#include <string.h>

/* A fused multiply-add rounds once where ggml rounds twice. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

void sp_dequantize_row_f32(const void *x, float *y, int64_t k) {
    memcpy(y, x, (size_t)k * sizeof(float));
}

void sp_dequantize_row_f16(const void *x, float *y, int64_t k) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < k; i++) y[i] = sp_f16_to_f32(h[i]);
}

void sp_dequantize_row_bf16(const void *x, float *y, int64_t k) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < k; i++) y[i] = sp_bf16_to_f32(h[i]);
}

void sp_dequantize_row_q4_0(const void *vx, float *y, int64_t k) {
    const sp_block_q4_0 *x = vx;
    const int64_t nb = k / SP_QK4_0;
    for (int64_t i = 0; i < nb; i++) {
        const float d = sp_f16_to_f32(x[i].d);
        for (int j = 0; j < SP_QK4_0 / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[i * SP_QK4_0 + j] = x0 * d;
            y[i * SP_QK4_0 + j + SP_QK4_0 / 2] = x1 * d;
        }
    }
}

void sp_dequantize_row_q4_1(const void *vx, float *y, int64_t k) {
    const sp_block_q4_1 *x = vx;
    const int64_t nb = k / SP_QK4_1;
    for (int64_t i = 0; i < nb; i++) {
        const float d = sp_f16_to_f32(x[i].d);
        const float m = sp_f16_to_f32(x[i].m);
        for (int j = 0; j < SP_QK4_1 / 2; j++) {
            const int x0 = x[i].qs[j] & 0x0F;
            const int x1 = x[i].qs[j] >> 4;
            y[i * SP_QK4_1 + j] = x0 * d + m;
            y[i * SP_QK4_1 + j + SP_QK4_1 / 2] = x1 * d + m;
        }
    }
}

static uint32_t load_u32_le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

void sp_dequantize_row_q5_0(const void *vx, float *y, int64_t k) {
    const sp_block_q5_0 *x = vx;
    const int64_t nb = k / SP_QK5_0;
    for (int64_t i = 0; i < nb; i++) {
        const float d = sp_f16_to_f32(x[i].d);
        const uint32_t qh = load_u32_le(x[i].qh);
        for (int j = 0; j < SP_QK5_0 / 2; j++) {
            const int xh0 = (int)(((qh >> j) << 4) & 0x10);
            const int xh1 = (int)((qh >> (j + 12)) & 0x10);
            const int x0 = ((x[i].qs[j] & 0x0F) | xh0) - 16;
            const int x1 = ((x[i].qs[j] >> 4) | xh1) - 16;
            y[i * SP_QK5_0 + j] = x0 * d;
            y[i * SP_QK5_0 + j + SP_QK5_0 / 2] = x1 * d;
        }
    }
}

void sp_dequantize_row_q5_1(const void *vx, float *y, int64_t k) {
    const sp_block_q5_1 *x = vx;
    const int64_t nb = k / SP_QK5_1;
    for (int64_t i = 0; i < nb; i++) {
        const float d = sp_f16_to_f32(x[i].d);
        const float m = sp_f16_to_f32(x[i].m);
        const uint32_t qh = load_u32_le(x[i].qh);
        for (int j = 0; j < SP_QK5_1 / 2; j++) {
            const int xh0 = (int)(((qh >> j) << 4) & 0x10);
            const int xh1 = (int)((qh >> (j + 12)) & 0x10);
            const int x0 = (x[i].qs[j] & 0x0F) | xh0;
            const int x1 = (x[i].qs[j] >> 4) | xh1;
            y[i * SP_QK5_1 + j] = x0 * d + m;
            y[i * SP_QK5_1 + j + SP_QK5_1 / 2] = x1 * d + m;
        }
    }
}

void sp_dequantize_row_q8_0(const void *vx, float *y, int64_t k) {
    const sp_block_q8_0 *x = vx;
    const int64_t nb = k / SP_QK8_0;
    for (int64_t i = 0; i < nb; i++) {
        const float d = sp_f16_to_f32(x[i].d);
        for (int j = 0; j < SP_QK8_0; j++) y[i * SP_QK8_0 + j] = x[i].qs[j] * d;
    }
}

/* ggml's dequantize_row_mxfp4: the doubled value times half the scale. */
void sp_dequantize_row_mxfp4(const void *vx, float *y, int64_t k) {
    const sp_block_mxfp4 *x = vx;
    const int64_t nb = k / SP_QK_MXFP4;
    for (int64_t i = 0; i < nb; i++) {
        const float d = sp_e8m0_half_ggml(x[i].e);
        for (int j = 0; j < SP_QK_MXFP4 / 2; j++) {
            y[i * SP_QK_MXFP4 + j] = sp_mxfp4_kvalues[x[i].qs[j] & 0x0F] * d;
            y[i * SP_QK_MXFP4 + j + 16] = sp_mxfp4_kvalues[x[i].qs[j] >> 4] * d;
        }
    }
}

void sp_dequantize_row_q2_K(const void *vx, float *y, int64_t k) {
    const sp_block_q2_K *x = vx;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = sp_f16_to_f32(x[i].d);
        const float min = sp_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int n = 0; n < SP_QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                /* Two sub-blocks of 16 share each group of 32 bytes. */
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 0xF);
                    const float ml = min * (sc >> 4);
                    const uint8_t *qq = q + 16 * half;
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * ((qq[l] >> shift) & 3) - ml;
                }
            }
            q += 32;
        }
    }
}

void sp_dequantize_row_q3_K(const void *vx, float *y, int64_t k) {
    const sp_block_q3_K *x = vx;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d_all = sp_f16_to_f32(x[i].d);
        const uint8_t *q = x[i].qs;
        const uint8_t *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int n = 0; n < SP_QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * sp_get_scale_k3(x[i].scales, is++);
                    const uint8_t *qq = q + 16 * half;
                    const uint8_t *hh = hm + 16 * half;
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (((qq[l] >> shift) & 3) - ((hh[l] & m) ? 0 : 4));
                }
                m = (uint8_t)(m << 1);
            }
            q += 32;
        }
    }
}

void sp_dequantize_row_q4_K(const void *vx, float *y, int64_t k) {
    const sp_block_q4_K *x = vx;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs;
        const float d = sp_f16_to_f32(x[i].d);
        const float min = sp_f16_to_f32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < SP_QK_K; j += 64) {
            sp_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            sp_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

void sp_dequantize_row_q5_K(const void *vx, float *y, int64_t k) {
    const sp_block_q5_K *x = vx;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = sp_f16_to_f32(x[i].d);
        const float min = sp_f16_to_f32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        unsigned u1 = 1, u2 = 2;
        for (int j = 0; j < SP_QK_K; j += 64) {
            sp_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            sp_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

void sp_dequantize_row_q6_K(const void *vx, float *y, int64_t k) {
    const sp_block_q6_K *x = vx;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = sp_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < SP_QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void sp_dequantize_row_q8_K(const void *vx, float *y, int64_t k) {
    const sp_block_q8_K *x = vx;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < SP_QK_K; j++) *y++ = x[i].d * x[i].qs[j];
}

#define BLOCK(T) _Alignof(T)
/* The table's dequantizer of a type with an AVX2 version: that version when
 * an x86 SIMD level is in use (the same bits, several times faster), else
 * the reference loop. */
#if defined(__x86_64__)
#define SP_BEST_DEQUANT(name)                                               \
    static void name##_best(const void *x, float *y, int64_t k) {          \
        (sp_simd_avx2_active() ? name##_avx2 : name)(x, y, k);                     \
    }
#else
#define SP_BEST_DEQUANT(name)                                               \
    static void name##_best(const void *x, float *y, int64_t k) {          \
        name(x, y, k);                                                      \
    }
#endif
SP_BEST_DEQUANT(sp_dequantize_row_q4_0)
SP_BEST_DEQUANT(sp_dequantize_row_q4_1)
SP_BEST_DEQUANT(sp_dequantize_row_q5_0)
SP_BEST_DEQUANT(sp_dequantize_row_q5_1)
SP_BEST_DEQUANT(sp_dequantize_row_q8_0)
SP_BEST_DEQUANT(sp_dequantize_row_q4_K)
SP_BEST_DEQUANT(sp_dequantize_row_q6_K)

static const sp_ggml_type_traits k_traits[SP_GGML_TYPE_LIMIT] = {
    [SP_GGML_F32] = {"F32", 1, 4, 4, sp_dequantize_row_f32},
    [SP_GGML_F16] = {"F16", 1, 2, 2, sp_dequantize_row_f16},
    [SP_GGML_BF16] = {"BF16", 1, 2, 2, sp_dequantize_row_bf16},
    [SP_GGML_Q4_0] = {"Q4_0", SP_QK4_0, sizeof(sp_block_q4_0), BLOCK(sp_block_q4_0), sp_dequantize_row_q4_0_best},
    [SP_GGML_Q4_1] = {"Q4_1", SP_QK4_1, sizeof(sp_block_q4_1), BLOCK(sp_block_q4_1), sp_dequantize_row_q4_1_best},
    [SP_GGML_Q5_0] = {"Q5_0", SP_QK5_0, sizeof(sp_block_q5_0), BLOCK(sp_block_q5_0), sp_dequantize_row_q5_0_best},
    [SP_GGML_Q5_1] = {"Q5_1", SP_QK5_1, sizeof(sp_block_q5_1), BLOCK(sp_block_q5_1), sp_dequantize_row_q5_1_best},
    [SP_GGML_Q8_0] = {"Q8_0", SP_QK8_0, sizeof(sp_block_q8_0), BLOCK(sp_block_q8_0), sp_dequantize_row_q8_0_best},
    [SP_GGML_Q8_1] = {"Q8_1", SP_QK8_1, sizeof(sp_block_q8_1), BLOCK(sp_block_q8_1), NULL},
    [SP_GGML_Q2_K] = {"Q2_K", SP_QK_K, sizeof(sp_block_q2_K), BLOCK(sp_block_q2_K), sp_dequantize_row_q2_K},
    [SP_GGML_Q3_K] = {"Q3_K", SP_QK_K, sizeof(sp_block_q3_K), BLOCK(sp_block_q3_K), sp_dequantize_row_q3_K},
    [SP_GGML_Q4_K] = {"Q4_K", SP_QK_K, sizeof(sp_block_q4_K), BLOCK(sp_block_q4_K), sp_dequantize_row_q4_K_best},
    [SP_GGML_Q5_K] = {"Q5_K", SP_QK_K, sizeof(sp_block_q5_K), BLOCK(sp_block_q5_K), sp_dequantize_row_q5_K},
    [SP_GGML_Q6_K] = {"Q6_K", SP_QK_K, sizeof(sp_block_q6_K), BLOCK(sp_block_q6_K), sp_dequantize_row_q6_K_best},
    [SP_GGML_Q8_K] = {"Q8_K", SP_QK_K, sizeof(sp_block_q8_K), BLOCK(sp_block_q8_K), sp_dequantize_row_q8_K},
    [SP_GGML_MXFP4] = {"MXFP4", SP_QK_MXFP4, sizeof(sp_block_mxfp4), BLOCK(sp_block_mxfp4), sp_dequantize_row_mxfp4},
    /* Known to ggml, not loadable here: sizes from ggml-common.h. */
    [SP_GGML_IQ2_XXS] = {"IQ2_XXS", SP_QK_K, 66, 2, NULL},
    [SP_GGML_IQ2_XS] = {"IQ2_XS", SP_QK_K, 74, 2, NULL},
    [SP_GGML_IQ3_XXS] = {"IQ3_XXS", SP_QK_K, 98, 2, NULL},
    [SP_GGML_IQ1_S] = {"IQ1_S", SP_QK_K, 50, 2, NULL},
    [SP_GGML_IQ4_NL] = {"IQ4_NL", 32, 18, 2, NULL},
    [SP_GGML_IQ3_S] = {"IQ3_S", SP_QK_K, 110, 2, NULL},
    [SP_GGML_IQ2_S] = {"IQ2_S", SP_QK_K, 82, 2, NULL},
    [SP_GGML_IQ4_XS] = {"IQ4_XS", SP_QK_K, 136, 2, NULL},
    [SP_GGML_I8] = {"I8", 1, 1, 1, NULL},
    [SP_GGML_I16] = {"I16", 1, 2, 2, NULL},
    [SP_GGML_I32] = {"I32", 1, 4, 4, NULL},
    [SP_GGML_I64] = {"I64", 1, 8, 8, NULL},
    [SP_GGML_F64] = {"F64", 1, 8, 8, NULL},
    [SP_GGML_IQ1_M] = {"IQ1_M", SP_QK_K, 56, 1, NULL},
    [SP_GGML_TQ1_0] = {"TQ1_0", SP_QK_K, 54, 2, NULL},
    [SP_GGML_TQ2_0] = {"TQ2_0", SP_QK_K, 66, 2, NULL},
    [SP_GGML_NVFP4] = {"NVFP4", 64, 36, 1, NULL},
    [SP_GGML_Q1_0] = {"Q1_0", 128, 18, 2, NULL},
};
#undef BLOCK

const sp_ggml_type_traits *sp_ggml_traits(uint32_t type) {
    if (type >= SP_GGML_TYPE_LIMIT || !k_traits[type].name) return NULL;
    return &k_traits[type];
}

const char *sp_ggml_type_name(uint32_t type) {
    const sp_ggml_type_traits *t = sp_ggml_traits(type);
    return t ? t->name : NULL;
}

bool sp_ggml_type_supported(uint32_t type) {
    const sp_ggml_type_traits *t = sp_ggml_traits(type);
    return t && t->to_f32;
}

size_t sp_ggml_row_size(uint32_t type, int64_t ne0) {
    const sp_ggml_type_traits *t = sp_ggml_traits(type);
    if (!t || ne0 < 0 || ne0 % t->block_size != 0) return 0;
    return (size_t)(ne0 / t->block_size) * t->type_size;
}
