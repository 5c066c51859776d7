/* How the order of weight reads changes DRAM bandwidth: the measurement
 * behind the one-row-at-a-time decode kernels (bench/RESULTS.md).
 *
 *   gcc -O2 -march=native -o stream_rows bench/stream_rows.c
 *   ./stream_rows [MIB=512] [ROW_BYTES=2048]
 *
 * Reads the same buffer three ways with 64-byte loads and no compute:
 * contiguously; one row after the other (the same addresses, in rows of
 * ROW_BYTES, which is what a decode kernel streaming one row at a time
 * does); and 4 rows side by side, 64 bytes from each in turn (a kernel that
 * shares each activation load between 4 rows). One thread; best of 4 passes
 * each. Needs AVX-512F. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long long sink;

static double pass(const uint8_t *w, size_t n, size_t row, int side_by_side) {
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),
                      _mm512_setzero_si512(), _mm512_setzero_si512()};
    const double t0 = now();
    if (side_by_side == 0) {
        for (size_t i = 0; i < n; i += 256)
            for (int k = 0; k < 4; k++)
                acc[k] = _mm512_add_epi64(acc[k], _mm512_load_si512(w + i + 64 * k));
    } else if (side_by_side == 1) {
        for (size_t r = 0; r < n; r += row)
            for (size_t k = 0; k < row; k += 64)
                acc[0] = _mm512_add_epi64(acc[0], _mm512_load_si512(w + r + k));
    } else {
        for (size_t r = 0; r < n; r += 4 * row)
            for (size_t k = 0; k < row; k += 64)
                for (int i = 0; i < 4; i++)
                    acc[i] = _mm512_add_epi64(acc[i],
                                              _mm512_load_si512(w + r + i * row + k));
    }
    const double dt = now() - t0;
    for (int k = 0; k < 4; k++) sink += _mm512_reduce_add_epi64(acc[k]);
    return (double)n / dt * 1e-9;
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 512;
    const size_t row = argc > 2 ? (size_t)atol(argv[2]) : 2048;
    if (mib < 64 || row < 64 || row % 64) {
        fprintf(stderr, "usage: stream_rows [MIB>=64] [ROW_BYTES, multiple of 64]\n");
        return 2;
    }
    const size_t n = (mib << 20) / (4 * row) * (4 * row);
    uint8_t *w = aligned_alloc(64, n);
    if (!w) return 1;
    memset(w, 1, n);
    const char *names[3] = {"contiguous", "one row at a time", "4 rows side by side"};
    for (int mode = 0; mode < 3; mode++) {
        double best = 0;
        for (int p = 0; p < 4; p++) {
            const double g = pass(w, n, row, mode);
            if (g > best) best = g;
        }
        printf("%-22s %6.2f GB/s\n", names[mode], best);
    }
    free(w);
    return sink == 42; /* keep the sums alive */
}
