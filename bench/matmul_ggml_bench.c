/* Throughput of one ggml block-quantized product at precision fast: the
 * kernel-level measurement behind bench/RESULTS.md's "Q2_K / Q3_K / Q5_K
 * prefill GEMM" table, usable on a loaded machine (best of N by the
 * thread's CPU time, not wall time).
 *
 *   cmake --build build && gcc -O2 -D_GNU_SOURCE -Isrc -Iinclude \
 *       -o matmul_ggml_bench bench/matmul_ggml_bench.c build/libspindle.a -lm -lpthread
 *   ./matmul_ggml_bench TYPE ROWS COLS TOKENS MATRICES TRIALS
 *
 * TYPE is the ggml type number (8 Q8_0, 10 Q2_K, 11 Q3_K, 12 Q4_K, 13 Q5_K,
 * 14 Q6_K). Random blocks with small positive f16 scales; TOKENS rows of
 * random activations; sp_matmul on one thread (SPINDLE_SIMD caps the level)
 * over MATRICES weight matrices in turn, so that more than the last-level
 * cache makes the weights come from DRAM as in a model. Prints the best
 * trial's time per product, GMAC/s and a checksum of the outputs (equal
 * checksums: the same bits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compute/ggml/ggml_dot.h"
#include "compute/ggml/ggml_quants.h"
#include "compute/matmul/matmul.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/tensor.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s TYPE ROWS COLS TOKENS MATRICES TRIALS\n", argv[0]);
        return 2;
    }
    uint32_t type = (uint32_t)atoi(argv[1]);
    int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
    int nt = atoi(argv[4]), nmat = atoi(argv[5]), trials = atoi(argv[6]);
    const sp_ggml_type_traits *tr = sp_ggml_traits(type);
    size_t rb = sp_ggml_row_size(type, cols);
    if (!tr || !rb || rows < 1 || nt < 1 || nmat < 1 || trials < 1) {
        fprintf(stderr, "bad type or size\n");
        return 2;
    }
    sp_weight *w = calloc(nmat, sizeof *w);
    srand(1);
    for (int m = 0; m < nmat; m++) {
        unsigned char *d = aligned_alloc(64, rb * rows);
        for (size_t i = 0; i < rb * rows; i++) d[i] = rand();
        /* f16 fields: small positive scales wherever they sit (Q2_K/Q3_K/Q6_K at the end, others at the start) */
        for (size_t b = 0; b < rb * rows / tr->type_size; b++) {
            unsigned char *p = d + b * tr->type_size;
            uint16_t h = 0x2000 + rand() % 0x400;
            if (type == SP_GGML_Q6_K || type == SP_GGML_Q3_K) memcpy(p + tr->type_size - 2, &h, 2);
            else if (type == SP_GGML_Q2_K) { memcpy(p + tr->type_size - 4, &h, 2); memcpy(p + tr->type_size - 2, &h, 2); }
            else { memcpy(p, &h, 2); if (type == SP_GGML_Q4_K || type == SP_GGML_Q5_K) memcpy(p + 2, &h, 2); }
        }
        w[m] = (sp_weight){.type = SP_W_GGML, .rows = rows, .cols = cols, .data = d, .ggml_type = type};
    }
    float *x = malloc(sizeof(float) * nt * cols), *y = malloc(sizeof(float) * nt * rows);
    for (int64_t i = 0; i < nt * cols; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    sp_mm_precision_force(SP_PRECISION_FAST);
    double best = 1e30, chk = 0;
    for (int r = 0; r < trials; r++) {
        double t0 = now();
        for (int m = 0; m < nmat; m++) { sp_matmul(NULL, &w[m], x, nt, y); chk += y[7]; }
        double t = (now() - t0) / nmat;
        if (t < best) best = t;
    }
    printf("%s nt=%d best %.3f ms/product  %.1f GMAC/s  chk %.6g\n", tr->name, nt, best * 1e3, (double)rows * cols * nt / best / 1e9, chk);
    return 0;
}
