/* ngram_harness — the n-gram (prompt lookup) drafter of
 * src/generation/drafter_ngram.c for tests/parity/test_spec.py.
 *
 * usage: ngram_harness NGRAM_MIN NGRAM_MAX MAX_DRAFT < IDS
 * IDS: whitespace-separated token ids (the history). For every prefix
 * length n = 1 .. len, in order (so the index grows incrementally, as in
 * the engine), prints one line: the proposed draft for history[0..n). */
#include <stdio.h>
#include <stdlib.h>

#include "generation/speculative.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: ngram_harness NGRAM_MIN NGRAM_MAX MAX_DRAFT < IDS\n");
        return 2;
    }
    int kmin = atoi(argv[1]), kmax = atoi(argv[2]), max = atoi(argv[3]);
    int n = 0, cap = 1024, t;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int32_t *out = malloc((size_t)(max > 0 ? max : 1) * sizeof *out);
    while (ids && scanf("%d", &t) == 1) {
        if (n == cap && !(ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids))) break;
        ids[n++] = t;
    }
    sp_ngram_index *ix;
    spindle_error err;
    if (!ids || !out || sp_ngram_new(kmin, kmax, &ix, &err)) {
        fprintf(stderr, "ngram_harness: %s\n", ids && out ? err.message : "out of memory");
        free(ids);
        free(out);
        return 1;
    }
    for (int len = 1; len <= n; len++) {
        int m = sp_ngram_propose(ix, ids, len, max, out);
        for (int i = 0; i < m; i++) printf(i ? " %d" : "%d", out[i]);
        putchar('\n');
    }
    sp_ngram_free(ix);
    free(ids);
    free(out);
    return 0;
}
