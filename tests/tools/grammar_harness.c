/* Drives a grammar matcher for tests/grammar: loads a tokenizer and a
 * grammar, then reads commands from stdin, one a line, answering each:
 *
 *   mask          -> "mask <accepting 0|1> <hex> <ns> <cpu_ns>": the mask's
 *                    32-bit words, 8 hex digits each, lowest word first,
 *                    and the wall-clock and thread-CPU nanoseconds
 *                    spindle_grammar_matcher_mask took (CPU time is the
 *                    one to compare on a loaded machine)
 *   accept <id>   -> "ok" | "rejected"
 *   reset         -> "ok": back to the start of the grammar
 *   compile       -> "compile <ns> <cpu_ns>": the time to build the grammar
 *                    from FILE again (schema conversion included) and a
 *                    matcher on it
 *
 *   grammar_harness TOKENIZER (gbnf|json_schema|json_object) FILE
 *                   [--print | --mask-slots N]
 *   grammar_harness TOKENIZER (gbnf|json_schema) --batch
 * --batch reads one grammar file path a line from stdin and answers each
 * with "ok <cpu_ns>" (it compiled, in that much thread CPU time) or
 * "error: <message>" (a corpus pass loads the tokenizer once).
 * --print writes the GBNF the grammar was built from and exits.
 * --mask-slots N gives the grammar's mask cache N slots (256 by default),
 * so that a short walk evicts and recomputes masks.
 * A grammar that fails to compile prints "error: <message>" and exits 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "spindle.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return s;
}

static int batch(spindle_grammar_vocab *vocab, spindle_grammar_kind kind) {
    static char path[4096];
    while (fgets(path, sizeof path, stdin)) {
        path[strcspn(path, "\n")] = 0;
        size_t len = 0;
        char *text = read_file(path, &len);
        spindle_error err = {0};
        spindle_grammar *g = NULL;
        struct timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        spindle_status st = text ? spindle_grammar_new(vocab, kind, text, len, &g, &err)
                                 : SPINDLE_ERR_IO;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        if (st) printf("error: %s\n", text ? err.message : "cannot read the grammar file");
        else
            printf("ok %lld\n", (c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec));
        fflush(stdout);
        spindle_grammar_free(g);
        free(text);
    }
    return 0;
}

int main(int argc, char **argv) {
    bool print = argc == 5 && !strcmp(argv[4], "--print");
    if (argc == 6 && !strcmp(argv[4], "--mask-slots")) sp_gauto_mask_slots = atoi(argv[5]);
    else if (argc != 4 && !print) {
        fprintf(stderr, "usage: grammar_harness TOKENIZER KIND FILE [--print | --mask-slots N]\n");
        return 1;
    }
    spindle_error err = {0};
    spindle_tokenizer *tok = NULL;
    spindle_grammar_vocab *vocab = NULL;
    if (spindle_tokenizer_load(argv[1], &tok, &err) ||
        spindle_grammar_vocab_new(tok, &vocab, &err)) {
        printf("error: %s\n", err.message);
        spindle_tokenizer_free(tok);
        return 2;
    }
    spindle_grammar_kind kind = !strcmp(argv[2], "gbnf") ? SPINDLE_GRAMMAR_GBNF
                                : !strcmp(argv[2], "json_schema") ? SPINDLE_GRAMMAR_JSON_SCHEMA
                                                                  : SPINDLE_GRAMMAR_JSON_OBJECT;
    if (!strcmp(argv[3], "--batch")) {
        int rc = batch(vocab, kind);
        spindle_grammar_vocab_free(vocab);
        spindle_tokenizer_free(tok);
        return rc;
    }
    size_t len = 0;
    char *text = read_file(argv[3], &len);
    spindle_grammar *g = NULL;
    spindle_grammar_matcher *m = NULL;
    int n_vocab = spindle_tokenizer_vocab_size(tok);
    if (!text || spindle_grammar_new(vocab, kind, text, len, &g, &err) ||
        spindle_grammar_matcher_new(g, &m, &err)) {
        printf("error: %s\n", text ? err.message : "cannot read the grammar file");
        spindle_grammar_free(g);
        free(text);
        spindle_grammar_vocab_free(vocab);
        spindle_tokenizer_free(tok);
        return 2;
    }
    if (print) {
        fputs(spindle_grammar_gbnf(g), stdout);
        n_vocab = -1;  /* print only: fall through to the cleanup */
    }
    uint32_t *bits = calloc((size_t)(n_vocab > 0 ? n_vocab + 31 : 32) / 32, sizeof *bits);
    static char line[256];
    while (n_vocab > 0 && fgets(line, sizeof line, stdin)) {
        int id;
        if (!strncmp(line, "mask", 4)) {
            struct timespec t0, t1, c0, c1;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
            clock_gettime(CLOCK_MONOTONIC, &t0);
            spindle_status st = spindle_grammar_matcher_mask(m, bits, &err);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
            long long ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
            long long cpu_ns = (c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec);
            if (st) {
                printf("error: %s\n", err.message);
            } else {
                printf("mask %d ", spindle_grammar_matcher_accepting(m) ? 1 : 0);
                for (int w = 0; w < (n_vocab + 31) / 32; w++) printf("%08x", bits[w]);
                printf(" %lld %lld\n", ns, cpu_ns);
            }
        } else if (sscanf(line, "accept %d", &id) == 1) {
            printf(spindle_grammar_matcher_accept(m, id, &err) ? "rejected\n" : "ok\n");
        } else if (!strncmp(line, "compile", 7)) {
            struct timespec t0, t1, c0, c1;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
            clock_gettime(CLOCK_MONOTONIC, &t0);
            spindle_grammar *g2 = NULL;
            spindle_grammar_matcher *m2 = NULL;
            spindle_status st = spindle_grammar_new(vocab, kind, text, len, &g2, &err);
            if (!st) st = spindle_grammar_matcher_new(g2, &m2, &err);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
            spindle_grammar_matcher_free(m2);
            spindle_grammar_free(g2);
            if (st) printf("error: %s\n", err.message);
            else
                printf("compile %lld %lld\n",
                       (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec),
                       (c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec));
        } else if (!strncmp(line, "reset", 5)) {
            spindle_grammar_matcher_free(m);
            m = NULL;
            if (spindle_grammar_matcher_new(g, &m, &err)) {
                printf("error: %s\n", err.message);
                return 2;
            }
            printf("ok\n");
        } else {
            printf("error: unknown command\n");
        }
        fflush(stdout);
    }
    free(bits);
    free(text);
    spindle_grammar_matcher_free(m);
    spindle_grammar_free(g);
    spindle_grammar_vocab_free(vocab);
    spindle_tokenizer_free(tok);
    return 0;
}
