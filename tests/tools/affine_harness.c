/* Drives the affine-quantized weight kernels from raw binary files so that
 * tests/unit_py/test_affine_packing.py can compare them with MLX.
 *
 *   affine_harness dequant ROWS COLS BITS GS QDTYPE PACKED SCALES BIASES OUT
 *   affine_harness matmul  ROWS COLS BITS GS QDTYPE PACKED SCALES BIASES OUT
 *                          X N_TOKENS THREADS
 *
 * QDTYPE is f32, f16 or bf16 (type of SCALES and BIASES), or mxfp4: MLX's
 * mxfp4 mode (BITS 4, GS 32, SCALES the uint8 exponents, BIASES ignored:
 * pass any name). PACKED holds the
 * uint32 words of mx.quantize, X is [N_TOKENS][COLS] f32. dequant writes
 * [ROWS][COLS] f32 (sp_weight_row), matmul writes [N_TOKENS][ROWS] f32
 * (sp_matmul). Inputs are placed one byte past an aligned address, as a
 * tensor inside an mmapped file may be. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/matmul/matmul.h"

/* Read exactly `want` bytes of `path` into a fresh buffer, at offset 1. */
static unsigned char *read_exact(const char *path, size_t want,
                                 unsigned char **base) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "affine_harness: cannot open %s\n", path);
        return NULL;
    }
    *base = malloc(want + 1);
    if (!*base) {
        fclose(f);
        return NULL;
    }
    size_t got = fread(*base + 1, 1, want, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != want || extra != EOF) {
        fprintf(stderr, "affine_harness: %s: expected %zu bytes\n", path, want);
        free(*base);
        *base = NULL;
        return NULL;
    }
    return *base + 1;
}

static int write_all(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, sizeof *v, n, f) != n) {
        fprintf(stderr, "affine_harness: cannot write %s\n", path);
        if (f) fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    const int is_matmul = argc == 14 && strcmp(argv[1], "matmul") == 0;
    if (!is_matmul && !(argc == 11 && strcmp(argv[1], "dequant") == 0)) {
        fprintf(stderr, "usage: see the header of affine_harness.c\n");
        return 2;
    }
    sp_weight w = {.type = SP_W_AFFINE};
    w.rows = atoll(argv[2]);
    w.cols = atoll(argv[3]);
    w.bits = atoi(argv[4]);
    w.group_size = atoi(argv[5]);
    const char *qd = argv[6];
    const int mxfp4 = strcmp(qd, "mxfp4") == 0;
    w.qparam_dtype = strcmp(qd, "f16") == 0    ? SP_DTYPE_F16
                     : strcmp(qd, "bf16") == 0 ? SP_DTYPE_BF16
                     : mxfp4                   ? SP_DTYPE_U8
                                               : SP_DTYPE_F32;
    if (mxfp4) w.type = SP_W_MXFP4;
    if (w.rows <= 0 || w.cols <= 0 || w.group_size <= 0 ||
        w.cols % w.group_size != 0 || w.cols % 32 != 0 || w.bits < 2 ||
        w.bits > 8 || w.bits == 7) {
        fprintf(stderr, "affine_harness: bad shape\n");
        return 2;
    }
    const size_t groups = (size_t)w.rows * (size_t)(w.cols / w.group_size);
    const size_t qsize = sp_dtype_size(w.qparam_dtype);
    unsigned char *b_data = NULL, *b_scales = NULL, *b_biases = NULL,
                  *b_x = NULL;
    float *out = NULL;
    int rc = 1;
    w.data = read_exact(argv[7], (size_t)w.rows * sp_affine_row_bytes(&w),
                        &b_data);
    w.scales = read_exact(argv[8], groups * qsize, &b_scales);
    if (!mxfp4) w.biases = read_exact(argv[9], groups * qsize, &b_biases);
    if (!w.data || !w.scales || (!mxfp4 && !w.biases)) goto done;

    if (!is_matmul) {
        out = malloc((size_t)w.rows * (size_t)w.cols * sizeof *out);
        if (!out) goto done;
        for (int64_t r = 0; r < w.rows; r++)
            sp_weight_row(&w, r, out + r * w.cols);
        rc = write_all(argv[10], out, (size_t)w.rows * (size_t)w.cols);
        goto done;
    }

    const int n_tokens = atoi(argv[12]);
    const int threads = atoi(argv[13]);
    if (n_tokens <= 0) goto done;
    const unsigned char *xb =
        read_exact(argv[11], (size_t)n_tokens * (size_t)w.cols * 4, &b_x);
    float *x = malloc((size_t)n_tokens * (size_t)w.cols * sizeof *x);
    out = malloc((size_t)n_tokens * (size_t)w.rows * sizeof *out);
    if (xb && x && out) {
        memcpy(x, xb, (size_t)n_tokens * (size_t)w.cols * 4);
        sp_pool *pool = threads > 1 ? sp_pool_create(threads) : NULL;
        sp_matmul(pool, &w, x, n_tokens, out);
        sp_pool_destroy(pool);
        rc = write_all(argv[10], out, (size_t)n_tokens * (size_t)w.rows);
    }
    free(x);
done:
    free(b_data);
    free(b_scales);
    free(b_biases);
    free(b_x);
    free(out);
    return rc;
}
