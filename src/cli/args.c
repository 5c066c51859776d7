/* Option-parsing helpers of the subcommands (args.h): strict option values,
 * --help, and one-line errors naming an unknown option. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sp_arg_is_help(const char *arg) {
    return !strcmp(arg, "-h") || !strcmp(arg, "--help");
}

int sp_arg_unknown(const char *cmd, const char *arg) {
    fprintf(stderr, "spindle %s: unknown or incomplete option '%s' (see 'spindle %s --help')\n",
            cmd, arg, cmd);
    return 2;
}

const char *sp_arg_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "spindle: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

bool sp_arg_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "spindle: %s expects an integer in [%ld, %ld], got '%s'\n",
                opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool sp_arg_float(const char *opt, const char *s, double lo, double hi,
                  double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "spindle: %s expects a number in [%g, %g], got '%s'\n",
                opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool sp_arg_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "spindle: %s expects a non-negative integer, got '%s'\n",
                opt, s);
        return false;
    }
    *out = v;
    return true;
}

bool sp_arg_bytes(const char *opt, const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    else if (*end == 'M' || *end == 'm') shift = 20;
    else if (*end == 'G' || *end == 'g') shift = 30;
    if (shift) end++;
    if (errno || end == s || *end || *s == '-' || v == 0 ||
        v > (SIZE_MAX >> shift)) {
        fprintf(stderr, "spindle: %s expects a positive byte count (suffix "
                        "K, M or G allowed), got '%s'\n", opt, s);
        return false;
    }
    *out = (size_t)v << shift;
    return true;
}

int sp_arg_prompt_cache(int argc, char **argv, int *i,
                        spindle_load_options *lo) {
    const char *a = argv[*i], *v;
    const bool dir = !strcmp(a, "--prompt-cache-dir");
    if (!dir && strcmp(a, "--prompt-cache-disk-bytes") != 0) return 0;
    if (!(v = sp_arg_value(argc, argv, i))) return -1;
    if (dir) {
        lo->prompt_cache_dir = v;
        return 1;
    }
    return sp_arg_bytes(a, v, &lo->prompt_cache_disk_bytes) ? 1 : -1;
}

int sp_arg_sampler(int argc, char **argv, int *i, spindle_sampler_params *sp) {
    static const struct {
        const char *name;
        double lo, hi;
        bool integer;
    } opts[] = {{"--temp", 0, 1e4, false},        {"--top-k", 0, 1 << 24, true},
                {"--top-p", 0, 1, false},         {"--min-p", 0, 1, false},
                {"--xtc-probability", 0, 1, false}, {"--xtc-threshold", 0, 0.5, false}};
    const char *a = argv[*i], *v;
    size_t k = 0;
    while (k < sizeof opts / sizeof opts[0] && strcmp(a, opts[k].name) != 0) k++;
    if (k == sizeof opts / sizeof opts[0]) return 0;
    if (!(v = sp_arg_value(argc, argv, i))) return -1;
    long n = 0;
    double x = 0;
    if (opts[k].integer ? !sp_arg_int(a, v, (long)opts[k].lo, (long)opts[k].hi, &n)
                        : !sp_arg_float(a, v, opts[k].lo, opts[k].hi, &x))
        return -1;
    switch (k) {
    case 0: sp->temperature = (float)x; break;
    case 1: sp->top_k = (int)n; break;
    case 2: sp->top_p = (float)x; break;
    case 3: sp->min_p = (float)x; break;
    case 4: sp->xtc_probability = (float)x; break;
    default: sp->xtc_threshold = (float)x; break;
    }
    return 1;
}

bool sp_arg_kv_type(const char *opt, const char *s, spindle_kv_type *out) {
    spindle_error err = {0};
    if (spindle_kv_type_parse(s, out, &err) == SPINDLE_OK) return true;
    fprintf(stderr, "spindle: %s: %s\n", opt, err.message);
    return false;
}

/* A comma-separated list of integers in [lo, hi]; `what` names them in
 * the error line. */
static bool int_list(const char *opt, const char *s, long lo, long hi,
                     const char *what, int32_t **out, int *n) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) { fprintf(stderr, "spindle: out of memory\n"); return false; }
    int count = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < lo || x > hi ||
            (*end && *end != ',')) {
            fprintf(stderr, "spindle: %s expects comma-separated %s, "
                            "got '%s'\n", opt, what, s);
            free(v);
            return false;
        }
        v[count++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (count == 0) {
        fprintf(stderr, "spindle: %s is empty\n", opt);
        free(v);
        return false;
    }
    *out = v;
    *n = count;
    return true;
}

bool sp_arg_id_list(const char *opt, const char *s, int32_t **ids, int *n) {
    return int_list(opt, s, 0, INT32_MAX, "token ids", ids, n);
}

bool sp_arg_count_list(const char *opt, const char *s, long hi, int32_t **v,
                       int *n) {
    char what[64];
    snprintf(what, sizeof what, "counts in [1, %ld]", hi);
    return int_list(opt, s, 1, hi, what, v, n);
}

bool sp_arg_pooling(const char *opt, const char *s, spindle_pooling *out) {
    static const char *const names[] = {"mean", "cls", "last"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (spindle_pooling)(SPINDLE_POOLING_MEAN + i);
            return true;
        }
    fprintf(stderr, "spindle: %s expects mean, cls or last, got '%s'%s\n", opt, s,
            strcmp(s, "none") ? "" : " (per-token rows are not supported)");
    return false;
}

char **sp_read_stdin_lines(bool skip_empty, char **buf, int *n) {
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap);
    for (size_t r; s && (r = fread(s + len, 1, cap - len - 1, stdin)) > 0;) {
        len += r;
        if (len + 1 >= cap) {
            char *g = realloc(s, cap *= 2);
            if (!g) free(s);
            s = g;
        }
    }
    *buf = s;
    *n = 0;
    if (!s) return NULL;
    s[len] = '\0';
    int lines = 1;
    for (size_t i = 0; i < len; i++) lines += s[i] == '\n';
    char **out = calloc((size_t)lines, sizeof *out);
    for (char *p = s; out && p < s + len;) {
        char *end = strchr(p, '\n');
        if (end) *end = '\0';
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r') p[--l] = '\0';
        if (l || !skip_empty) out[(*n)++] = p;
        p = end ? end + 1 : s + len;
    }
    if (!out) {
        free(s);
        *buf = NULL;
    }
    return out;
}
