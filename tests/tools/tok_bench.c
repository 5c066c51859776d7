/* Timing harness for bench/tokenizer_bench.py: loads a tokenizer directory
 * (timed) and encodes every line of a text file separately (timed, best of
 * N rounds). Prints one JSON object.
 *
 *   tok_bench DIR FILE [ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spindle.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok_bench DIR FILE [ROUNDS]\n");
        return 1;
    }
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    if (rounds < 1) rounds = 1;
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "tok_bench: cannot open %s\n", argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "tok_bench: cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);
    spindle_error err = {0};
    spindle_tokenizer *tok = NULL;
    double t0 = now();
    if (spindle_tokenizer_load(argv[1], &tok, &err)) {
        fprintf(stderr, "tok_bench: %s\n", err.message);
        return 1;
    }
    double load = now() - t0, best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < rounds; r++) {
        tokens = 0;
        t0 = now();
        for (long i = 0; i < size;) {
            char *nl = memchr(buf + i, '\n', (size_t)(size - i));
            long e = nl ? nl - buf : size;
            int32_t *ids;
            size_t n;
            if (spindle_tokenizer_encode(tok, buf + i, (size_t)(e - i), true, &ids, &n, &err)) {
                fprintf(stderr, "tok_bench: %s\n", err.message);
                return 1;
            }
            tokens += n;
            spindle_free(ids);
            i = e + 1;
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    printf("{\"load_s\": %.6f, \"encode_s\": %.6f, \"bytes\": %ld, \"tokens\": %zu}\n",
           load, best, size, tokens);
    spindle_tokenizer_free(tok);
    free(buf);
    return 0;
}
