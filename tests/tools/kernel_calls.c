/* Calls sp_matmul on one random weight REPS times, for instruction counts
 * under an emulator (bench/arm64_insns.sh: no ARM machine is at hand, so
 * the AArch64 kernels are compared by the instructions they execute, the
 * difference of two REPS counts giving one call's).
 *
 *   kernel_calls TYPE ROWS COLS N_TOKENS REPS
 *     TYPE: a ggml block type (q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K
 *           q6_K) or mlx4 / mlx8 (MLX affine, group 64, bf16 scales)
 *   SPINDLE_SIMD and SPINDLE_PRECISION choose the kernels, as for spindle.
 * Prints the level and precision in use and a checksum of the outputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/ggml/ggml_quants.h"
#include "compute/matmul/matmul.h"
#include "compute/matmul/matmul_simd.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* f16 bits of a small positive scale (2^-10 .. 2^-6). */
static uint16_t small_f16(void) { return (uint16_t)((5u + next_u32() % 4) << 10 | (next_u32() & 0x3ff)); }

static const struct { const char *name; uint32_t type; int nscale; size_t off[2]; } ggml_types[] = {
    {"q4_0", SP_GGML_Q4_0, 1, {0}},           {"q4_1", SP_GGML_Q4_1, 2, {0, 2}},
    {"q5_0", SP_GGML_Q5_0, 1, {0}},           {"q5_1", SP_GGML_Q5_1, 2, {0, 2}},
    {"q8_0", SP_GGML_Q8_0, 1, {0}},           {"q2_K", SP_GGML_Q2_K, 2, {80, 82}},
    {"q3_K", SP_GGML_Q3_K, 1, {108}},         {"q4_K", SP_GGML_Q4_K, 2, {0, 2}},
    {"q5_K", SP_GGML_Q5_K, 2, {0, 2}},        {"q6_K", SP_GGML_Q6_K, 1, {208}},
};

static int make_ggml(const char *name, int64_t rows, int64_t cols, sp_weight *w) {
    for (size_t i = 0; i < sizeof ggml_types / sizeof *ggml_types; i++) {
        if (strcmp(name, ggml_types[i].name) != 0) continue;
        const sp_ggml_type_traits *tr = sp_ggml_traits(ggml_types[i].type);
        const size_t n = sp_ggml_row_size(ggml_types[i].type, cols) * (size_t)rows;
        if (!n) return 1;
        unsigned char *d = aligned_alloc(64, (n + 63) / 64 * 64);
        if (!d) return 1;
        for (size_t j = 0; j < n; j++) d[j] = (unsigned char)next_u32();
        for (size_t b = 0; b < n / tr->type_size; b++)
            for (int k = 0; k < ggml_types[i].nscale; k++) {
                const uint16_t h = small_f16();
                memcpy(d + b * tr->type_size + ggml_types[i].off[k], &h, 2);
            }
        *w = (sp_weight){.type = SP_W_GGML, .rows = rows, .cols = cols,
                         .data = d, .ggml_type = ggml_types[i].type};
        return 0;
    }
    return 1;
}

static int make_mlx(int bits, int64_t rows, int64_t cols, sp_weight *w) {
    const size_t groups = (size_t)(rows * cols / 64), nbytes = (size_t)(rows * cols * bits / 8);
    uint8_t *d = malloc(nbytes);
    uint16_t *s = malloc(groups * 2), *b = malloc(groups * 2);
    if (!d || !s || !b) return 1;
    for (size_t i = 0; i < nbytes; i++) d[i] = (uint8_t)next_u32();
    for (size_t g = 0; g < groups; g++)
        s[g] = (uint16_t)(0x3c00u - 0x0600u + next_u32() % 0x100), /* ~2^-6 bf16 */
        b[g] = (uint16_t)(0xbc00u + next_u32() % 0x80);
    *w = (sp_weight){.type = SP_W_AFFINE, .rows = rows, .cols = cols, .data = d,
                     .bits = bits, .group_size = 64, .qparam_dtype = SP_DTYPE_BF16,
                     .scales = s, .biases = b};
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: kernel_calls TYPE ROWS COLS N_TOKENS REPS\n");
        return 2;
    }
    const int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
    const int nt = atoi(argv[4]), reps = atoi(argv[5]);
    if (rows <= 0 || cols <= 0 || nt <= 0 || nt > 64 || reps < 0) {
        fprintf(stderr, "kernel_calls: bad ROWS, COLS, N_TOKENS or REPS\n");
        return 2;
    }
    sp_weight w;
    const int bad = strcmp(argv[1], "mlx4") == 0   ? make_mlx(4, rows, cols, &w)
                    : strcmp(argv[1], "mlx8") == 0 ? make_mlx(8, rows, cols, &w)
                                                   : make_ggml(argv[1], rows, cols, &w);
    if (bad) {
        fprintf(stderr, "kernel_calls: unknown TYPE or shape '%s'\n", argv[1]);
        return 2;
    }
    float *x = malloc(sizeof(float) * (size_t)(nt * cols));
    float *y = malloc(sizeof(float) * (size_t)(nt * rows));
    if (!x || !y) return 1;
    for (int64_t i = 0; i < nt * cols; i++) x[i] = (float)(next_u32() % 2001) / 1000.0f - 1.0f;
    double check = 0;
    for (int r = 0; r < reps; r++) {
        sp_matmul(NULL, &w, x, nt, y);
        check += y[r % (nt * rows)];
    }
    printf("%s %s %.6g\n", sp_simd_name(sp_simd_current()),
           sp_mm_precision_name(sp_mm_precision()), check);
    return 0;
}
