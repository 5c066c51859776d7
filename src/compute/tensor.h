/* Element types and the weight-matrix descriptor that every kernel takes.
 *
 * A weight matrix is a view: it points into mmapped file data and owns
 * nothing. Quantized formats stay packed; kernels decode them on the fly. */
#ifndef SP_COMPUTE_TENSOR_H
#define SP_COMPUTE_TENSOR_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

/* Element type of a plain (unquantized) tensor. */
typedef enum sp_dtype {
    SP_DTYPE_F32 = 0,
    SP_DTYPE_F16,
    SP_DTYPE_BF16,
    SP_DTYPE_F64,
    SP_DTYPE_I8,
    SP_DTYPE_U8,
    SP_DTYPE_I16,
    SP_DTYPE_U16,
    SP_DTYPE_I32,
    SP_DTYPE_U32,
    SP_DTYPE_I64,
    SP_DTYPE_U64,
    SP_DTYPE_BOOL,
    SP_DTYPE_COUNT
} sp_dtype;

size_t sp_dtype_size(sp_dtype t);
const char *sp_dtype_name(sp_dtype t);

/* How a weight matrix is stored. */
typedef enum sp_wtype {
    SP_W_F32 = 0,
    SP_W_F16,
    SP_W_BF16,
    /* MLX affine quantization: each row holds `cols` codes of `bits` bits
     * packed little-endian into uint32 words (a bit stream for 3/5/6 bits);
     * every `group_size` consecutive codes share a scale s and bias b, and
     * w = s * q + b. scales/biases are [rows][cols / group_size]. */
    SP_W_AFFINE,
    /* A ggml block format from a GGUF file (ggml_quants.h): each row is
     * cols / block_size consecutive blocks of type `ggml_type`. */
    SP_W_GGML,
    /* MLX mxfp4 (OCP microscaling FP4): each row holds `cols` 4-bit E2M1
     * codes packed as AFFINE 4-bit ones (code 2i in the low nibble of byte
     * i); every 32 consecutive codes share one uint8 E8M0 exponent e in
     * `scales` ([rows][cols / 32]): w = e2m1(q) * 2^(e - 127). No biases;
     * bits 4 and group_size 32. */
    SP_W_MXFP4
} sp_wtype;

typedef struct sp_weight {
    sp_wtype type;
    int64_t rows;          /* output features */
    int64_t cols;          /* input features */
    const void *data;      /* row-major rows x cols (packed for AFFINE) */
    /* SP_W_AFFINE (and SP_W_MXFP4: bits 4, group_size 32, uint8 scales) */
    int bits;              /* 2, 3, 4, 5, 6 or 8 */
    int group_size;        /* 32, 64 or 128 */
    sp_dtype qparam_dtype; /* F32, F16 or BF16: type of scales and biases */
    const void *scales;
    const void *biases;
    /* SP_W_GGML only: an sp_ggml_type number */
    uint32_t ggml_type;
} sp_weight;

/* Bytes of one packed AFFINE row: cols * bits / 8 (cols is a multiple of 32
 * for every supported group size). */
static inline size_t sp_affine_row_bytes(const sp_weight *w) {
    return (size_t)w->cols * (size_t)w->bits / 8;
}

/* MXFP4, as MLX's mxfp4 mode and ggml's MXFP4 blocks store it: E2M1 code q
 * (sign bit 3) has the value sp_mxfp4_kvalues[q] / 2, the doubled values
 * being small integers (0, +-1, 2, 3, 4, 6, 8, 12); a block's E8M0 byte e
 * scales by 2^(e - 127). */
extern const int8_t sp_mxfp4_kvalues[16];

/* Half the scale of E8M0 byte e, 2^(e - 128), the factor of the doubled
 * values, exact (a subnormal for e < 2), with ggml's reading of e = 255
 * (ggml_e8m0_to_fp32_half: 2^126). */
static inline float sp_e8m0_half_ggml(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The same for MLX, which reads e = 255 as an infinite scale. */
static inline float sp_e8m0_half_mlx(uint8_t e) {
    if (e < 255) return sp_e8m0_half_ggml(e);
    const uint32_t inf = 0x7f800000u;
    float f;
    memcpy(&f, &inf, 4);
    return f;
}

/* Bytes the weight occupies (data + scales + biases). */
size_t sp_weight_nbytes(const sp_weight *w);

/* Rows [first, first + n) of w as a view of their own, pointing into w's
 * data (no copy): one expert of a stacked [experts * rows][cols] tensor, or
 * a block of rows. Every kernel takes it as it takes w. */
sp_weight sp_weight_row_block(const sp_weight *w, int64_t first, int64_t n);

/* Exact IEEE conversions (round-to-nearest-even on the way down). */
static inline float sp_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t sp_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float sp_f16_to_f32(uint16_t h);
uint16_t sp_f32_to_f16(float f);

/* Read element i of a float-typed buffer (F32, F16 or BF16) as f32. The
 * buffer may sit unaligned inside a mapped file, hence the memcpy loads. */
static inline float sp_load_float(const void *p, sp_dtype t, size_t i) {
    const unsigned char *b = (const unsigned char *)p;
    if (t == SP_DTYPE_F16 || t == SP_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        return t == SP_DTYPE_F16 ? sp_f16_to_f32(h) : sp_bf16_to_f32(h);
    }
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
}

#endif
