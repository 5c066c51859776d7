/* Shared by the libFuzzer harnesses: the parsers read files, so each input
 * is written to a private scratch directory first; an invariant that does
 * not hold aborts with a message, which libFuzzer reports as a crash. */
#ifndef SPINDLE_FUZZ_COMMON_H
#define SPINDLE_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spindle.h"

/* Sanitizer settings compiled in, so that a harness run by hand behaves as
 * in scripts/fuzz.sh: UBSan prints stacks. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1"; }

#define FUZZ_CHECK(cond, ...)                                              \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "invariant failed at %s:%d: %s: ", __FILE__,   \
                    __LINE__, #cond);                                      \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
            abort();                                                       \
        }                                                                  \
    } while (0)

/* The process's scratch directory (created once, under $TMPDIR or /tmp;
 * removed at exit). */
static char fuzz_dir[256];

static void fuzz_remove_dir(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (fuzz_dir[0] && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", fuzz_dir);
}

static const char *fuzz_scratch_dir(void) {
    if (fuzz_dir[0]) return fuzz_dir;
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/spindle-fuzz-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fuzz_dir)) {
        perror("mkdtemp");
        abort();
    }
    atexit(fuzz_remove_dir);
    return fuzz_dir;
}

/* The malloc'd scratch path of `name`. */
static char *fuzz_path(const char *name) {
    const char *dir = fuzz_scratch_dir();
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) abort();
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void fuzz_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Write the NUL-terminated `text` to path, or remove path when NULL. */
static void fuzz_write_or_remove(const char *path, const char *text) {
    if (text) fuzz_write(path, text, strlen(text));
    else unlink(path);
}

/* memcmp that accepts NULL for an empty range. */
static bool fuzz_same_bytes(const void *a, const void *b, size_t n) {
    return n == 0 || !memcmp(a, b, n);
}

/* A failing call must say what is wrong (FUZZ_VERBOSE=1 prints it: a
 * seed that should load can be checked to do so). */
static void fuzz_check_error(spindle_status st, const spindle_error *err) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "rejected (%d): %s\n", (int)st, err->message);
    FUZZ_CHECK(st != SPINDLE_OK, "status");
    FUZZ_CHECK(err->message[0] != '\0', "status %d with an empty message", (int)st);
    FUZZ_CHECK(!strchr(err->message, '\n'), "multi-line message: %s", err->message);
}

/* Whether [p, p+n) is well-formed UTF-8 (no surrogates, no overlongs). */
static bool fuzz_valid_utf8(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                   : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + len > n) return false;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_of_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

/* Split `data` at the first n_parts-1 NUL bytes into NUL-terminated
 * malloc'd strings; missing parts are NULL. Free with fuzz_free_parts. */
static void fuzz_split(const uint8_t *data, size_t size, char **parts, int n_parts) {
    for (int i = 0; i < n_parts; i++) parts[i] = NULL;
    size_t at = 0;
    for (int i = 0; i < n_parts && at <= size; i++) {
        const uint8_t *nul = i + 1 < n_parts ? memchr(data + at, 0, size - at) : NULL;
        size_t len = nul ? (size_t)(nul - (data + at)) : size - at;
        if (!(parts[i] = malloc(len + 1))) abort();
        if (len) memcpy(parts[i], data + at, len);
        parts[i][len] = '\0';
        if (!nul) break;
        at += len + 1;
    }
}

static void fuzz_free_parts(char **parts, int n_parts) {
    for (int i = 0; i < n_parts; i++) free(parts[i]);
}

#endif
