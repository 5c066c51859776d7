/* Drives the MoE routing (compute/routing.h) from raw binary files so that
 * tests/unit_py/test_routing_vs_mlx.py can compare it with mlx.
 *
 *   routing_harness MODE RENORM N K LOGITS IDX WEIGHTS
 *
 * MODE is softmax_topk or topk_softmax, RENORM 0 or 1. LOGITS holds rows of
 * N f32 logits (as many rows as the file holds); IDX receives K int32 expert
 * indices per row and WEIGHTS their K f32 weights, best first. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/routing.h"

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: see the header of routing_harness.c\n");
        return 2;
    }
    sp_route_mode mode = !strcmp(argv[1], "softmax_topk")
                             ? SP_ROUTE_SOFTMAX_TOPK
                             : SP_ROUTE_TOPK_SOFTMAX;
    bool renorm = atoi(argv[2]) != 0;
    int n = atoi(argv[3]), k = atoi(argv[4]);
    FILE *in = fopen(argv[5], "rb");
    FILE *oi = fopen(argv[6], "wb"), *ow = fopen(argv[7], "wb");
    float *row = malloc((size_t)(n > 0 ? n : 1) * sizeof *row);
    int *idx = malloc((size_t)(k > 0 ? k : 1) * sizeof *idx);
    float *w = malloc((size_t)(k > 0 ? k : 1) * sizeof *w);
    if (!in || !oi || !ow || !row || !idx || !w || n < 1 || k < 1 || k > n) {
        fprintf(stderr, "routing_harness: bad arguments or files\n");
        return 1;
    }
    while (fread(row, sizeof *row, (size_t)n, in) == (size_t)n) {
        sp_route(row, n, k, mode, renorm, idx, w);
        int32_t i32[256];
        for (int j = 0; j < k && j < 256; j++) i32[j] = idx[j];
        if (fwrite(i32, sizeof *i32, (size_t)k, oi) != (size_t)k ||
            fwrite(w, sizeof *w, (size_t)k, ow) != (size_t)k)
            return 1;
    }
    free(row), free(idx), free(w);
    fclose(in);
    return (fclose(oi) | fclose(ow)) != 0;
}
