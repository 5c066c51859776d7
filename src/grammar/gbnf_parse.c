/* GBNF, llama.cpp's grammar format (grammars/README.md there):
 *
 *   name ::= alternatives        # comment
 *   alternatives: sequence ("|" sequence)*
 *   item: "literal" | [class] | [^class] | . | name | ( alternatives )
 *         followed by *, +, ?, {m}, {m,}, {m,n}
 *
 * parsed as llama-grammar.cpp does: a newline ends a rule unless inside
 * parentheses or after "|" / "::=", and repetitions expand the same way
 * (x{2,4} is x x (x (x)?)?). Errors name the line and column. */
#include "grammar/gram_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/utf8.h"

typedef struct gp {
    const char *text, *p, *end;
    gb_builder b;
    int depth;
    spindle_error *err;
    bool failed;
} gp;

static bool fail_at(gp *g, const char *at, const char *fmt, const char *arg) {
    if (g->failed) return false;
    int line, col;
    gb_where(g->text, (size_t)(at - g->text), &line, &col);
    char why[256];
    snprintf(why, sizeof why, fmt, arg ? arg : "");
    sp_fail(g->err, SPINDLE_ERR_FORMAT, "grammar line %d col %d: %s", line,
            col, why);
    g->failed = true;
    return false;
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skip blanks and comments; newlines too when `newlines`. */
static void skip_space(gp *g, bool newlines) {
    while (g->p < g->end) {
        char c = *g->p;
        if (c == '#') {
            while (g->p < g->end && *g->p != '\n' && *g->p != '\r') g->p++;
        } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
            g->p++;
        } else {
            break;
        }
    }
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class, escapes decoded; false on error. */
static bool parse_char(gp *g, uint32_t *cp) {
    const char *at = g->p;
    if (g->p >= g->end) return fail_at(g, at, "unexpected end of grammar", NULL);
    if (*g->p != '\\') {
        int len;
        *cp = sp_utf8_next(g->p, (size_t)(g->end - g->p), &len);
        if (*cp == 0xFFFD && len <= 1 && (unsigned char)*g->p >= 0x80)
            return fail_at(g, at, "invalid UTF-8", NULL);
        g->p += len;
        return true;
    }
    if (++g->p >= g->end) return fail_at(g, at, "unfinished escape", NULL);
    char c = *g->p++;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = g->p < g->end ? hex_value(*g->p) : -1;
            if (h < 0) return fail_at(g, at, "expected %s hex digits after the escape",
                                      digits == 2 ? "2" : digits == 4 ? "4" : "8");
            v = v * 16 + (uint32_t)h;
            g->p++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return fail_at(g, at, "escape is not a Unicode scalar value", NULL);
        *cp = v;
        return true;
    }
    switch (c) {
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/':
    case '\'': case '.': case '(': case ')': case '|': case '*': case '+':
    case '?': case '{': case '}':
        *cp = (uint32_t)c;
        return true;
    default: {
        char s[2] = {c, 0};
        return fail_at(g, at, "unknown escape '\\%s'", s);
    }
    }
}

static bool push_code_point(gp *g, gb_vec *v, uint32_t cp) {
    char buf[4];
    size_t n = sp_utf8_encode(cp, buf);
    for (size_t i = 0; i < n; i++)
        if (!gb_push(&g->b, v, gb_byte(&g->b, (uint8_t)buf[i]))) return false;
    return true;
}

static bool parse_literal(gp *g, gb_vec *v) {
    const char *start = g->p++;
    while (g->p < g->end && *g->p != '"') {
        if (*g->p == '\n') return fail_at(g, start, "string literal not closed on its line", NULL);
        uint32_t cp;
        if (!parse_char(g, &cp) || !push_code_point(g, v, cp)) return false;
    }
    if (g->p >= g->end) return fail_at(g, start, "string literal is not closed", NULL);
    g->p++;
    return true;
}

static bool emit_ranges(gp *g, gb_vec *v, uint32_t *r, int n, bool negate) {
    uint32_t *norm = malloc((size_t)(2 * n + 4) * sizeof *norm);
    uint32_t *work = malloc((size_t)(2 * n + 4) * sizeof *work);
    bool ok = norm && work;
    if (ok) {
        memcpy(work, r, (size_t)n * 2 * sizeof *r);
        int m = gb_normalize_ranges(work, n, negate, norm);
        ok = gb_code_point_class(&g->b, v, norm, m, "char");
    } else {
        g->b.oom = true;
    }
    free(norm);
    free(work);
    return ok;
}

static bool parse_class(gp *g, gb_vec *v) {
    const char *start = g->p++;
    bool negate = g->p < g->end && *g->p == '^';
    if (negate) g->p++;
    int n = 0, cap = 16;
    uint32_t *r = malloc((size_t)cap * 2 * sizeof *r);
    bool ok = r != NULL;
    while (ok && g->p < g->end && *g->p != ']') {
        uint32_t lo, hi;
        ok = parse_char(g, &lo);
        hi = lo;
        if (ok && g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
            g->p++;
            ok = parse_char(g, &hi);
            if (ok && hi < lo) ok = fail_at(g, start, "character range is reversed", NULL);
        }
        if (ok && n == cap) {
            uint32_t *q = realloc(r, (size_t)(cap *= 2) * 2 * sizeof *r);
            if (!q) ok = false, g->b.oom = true;
            else r = q;
        }
        if (ok) {
            r[2 * n] = lo;
            r[2 * n + 1] = hi;
            n++;
        }
    }
    if (ok && g->p >= g->end) ok = fail_at(g, start, "character class is not closed", NULL);
    if (ok) g->p++;
    if (ok) ok = emit_ranges(g, v, r, n, negate);
    free(r);
    return ok;
}

static bool parse_alternates(gp *g, int rule, bool nested);

/* Repeat the symbol v[from..] min..max times (max < 0: unbounded). */
static bool repeat(gp *g, gb_vec *v, int from, long min, long max,
                   const char *at) {
    if (from == v->n) return fail_at(g, at, "expecting something before the repetition", NULL);
    if (min > SP_GRAMMAR_MAX_REPEAT || max > SP_GRAMMAR_MAX_REPEAT)
        return fail_at(g, at, "repetition count over the limit of 1000", NULL);
    int len = v->n - from;
    int32_t *unit = malloc((size_t)len * sizeof *unit);
    if (!unit) return !(g->b.oom = true);
    memcpy(unit, v->v + from, (size_t)len * sizeof *unit);
    bool ok = true;
    if (min == 0) {
        g->b.n_elems -= len;
        v->n = from;
    }
    for (long i = 1; i < min && ok; i++)
        for (int k = 0; k < len && ok; k++) ok = gb_push(&g->b, v, unit[k]);
    long n_opt = max < 0 ? 1 : max - min;
    int last = -1;
    for (long i = 0; i < n_opt && ok; i++) {
        int r = gb_new_rule(&g->b, "rep");
        gb_vec *alt = r >= 0 ? gb_add_alt(&g->b, r) : NULL;
        ok = alt != NULL;
        for (int k = 0; k < len && ok; k++) ok = gb_push(&g->b, alt, unit[k]);
        if (ok && (max < 0 || i > 0)) ok = gb_push(&g->b, alt, SP_G_REF(max < 0 ? r : last));
        if (ok) ok = gb_push(&g->b, alt, SP_G_END);
        gb_vec *empty = ok ? gb_add_alt(&g->b, r) : NULL;
        ok = empty && gb_push(&g->b, empty, SP_G_END);
        if (ok && max >= 0) {
            g->b.rules[r].rep_units = (int)i + 1;
            g->b.rules[r].rep_below = last;
        }
        last = r;
    }
    if (ok && n_opt > 0) ok = gb_push(&g->b, v, SP_G_REF(last));
    free(unit);
    if (ok && g->b.n_elems > SP_GRAMMAR_MAX_ELEMS)
        return fail_at(g, at, "grammar is over the size limit after expanding repetitions", NULL);
    return ok;
}

static bool parse_count(gp *g, long *v) {
    const char *s = g->p;
    *v = 0;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9' && *v <= 100000)
        *v = *v * 10 + (*g->p++ - '0');
    return g->p > s;
}

static bool parse_braces(gp *g, gb_vec *v, int from) {
    const char *at = g->p++;
    skip_space(g, true);
    long min, max;
    if (!parse_count(g, &min)) return fail_at(g, at, "expected a number after '{'", NULL);
    skip_space(g, true);
    max = min;
    if (g->p < g->end && *g->p == ',') {
        g->p++;
        skip_space(g, true);
        max = parse_count(g, &max) ? max : -1;
        skip_space(g, true);
    }
    if (g->p >= g->end || *g->p != '}') return fail_at(g, at, "expected '}' to close the repetition", NULL);
    g->p++;
    if (max >= 0 && max < min) return fail_at(g, at, "repetition has max below min", NULL);
    return repeat(g, v, from, min, max, at);
}

static bool parse_group(gp *g, gb_vec *v) {
    const char *at = g->p++;
    if (++g->depth > SP_GRAMMAR_MAX_NESTING)
        return fail_at(g, at, "groups nested deeper than the limit of 64", NULL);
    int r = gb_new_rule(&g->b, "group");
    if (r < 0) return false;
    skip_space(g, true);
    if (!parse_alternates(g, r, true)) return false;
    if (g->p >= g->end || *g->p != ')') return fail_at(g, at, "expected ')' to close this group", NULL);
    g->p++;
    g->depth--;
    return gb_push(&g->b, v, SP_G_REF(r));
}

static bool parse_sequence(gp *g, gb_vec *v, bool nested) {
    int last = v->n;
    while (!g->failed && g->p < g->end) {
        const char *at = g->p;
        char c = *g->p;
        int start = v->n;
        bool ok = true;
        if (c == '"') ok = parse_literal(g, v);
        else if (c == '[') ok = parse_class(g, v);
        else if (c == '.') {
            uint32_t any[2] = {0, 0x10FFFF};
            g->p++;
            ok = emit_ranges(g, v, any, 1, false);
        } else if (c == '(') ok = parse_group(g, v);
        else if (is_word(c)) {
            const char *s = g->p;
            while (g->p < g->end && is_word(*g->p)) g->p++;
            int r = gb_rule_id(&g->b, s, (size_t)(g->p - s));
            if (r < 0) return false;
            if (g->b.rules[r].first_use == (size_t)-1)
                g->b.rules[r].first_use = (size_t)(s - g->text);
            ok = gb_push(&g->b, v, SP_G_REF(r));
        } else if (c == '*' || c == '+' || c == '?') {
            g->p++;
            ok = repeat(g, v, last, c == '+', c == '?' ? 1 : -1, at);
            start = last;
        } else if (c == '{') {
            ok = parse_braces(g, v, last);
            start = last;
        } else {
            break;
        }
        if (!ok) return fail_at(g, at, "out of memory", NULL);
        last = start;
        skip_space(g, nested);
        if (g->b.n_elems > SP_GRAMMAR_MAX_ELEMS)
            return fail_at(g, at, "grammar is over the size limit", NULL);
    }
    return !g->failed;
}

static bool parse_alternates(gp *g, int rule, bool nested) {
    for (;;) {
        gb_vec *alt = gb_add_alt(&g->b, rule);
        if (!alt) return fail_at(g, g->p, "out of memory", NULL);
        if (!parse_sequence(g, alt, nested)) return false;
        alt = &g->b.rules[rule].alts[g->b.rules[rule].n_alts - 1];
        if (!gb_push(&g->b, alt, SP_G_END)) return fail_at(g, g->p, "out of memory", NULL);
        if (g->p >= g->end || *g->p != '|') return true;
        g->p++;
        skip_space(g, true);
    }
}

static bool parse_rule(gp *g) {
    const char *s = g->p;
    while (g->p < g->end && is_word(*g->p)) g->p++;
    if (g->p == s) return fail_at(g, s, "expected a rule name", NULL);
    int r = gb_rule_id(&g->b, s, (size_t)(g->p - s));
    if (r < 0) return fail_at(g, s, "out of memory", NULL);
    if (g->b.rules[r].defined)
        return fail_at(g, s, "rule '%s' is defined twice", g->b.rules[r].name);
    g->b.rules[r].defined = true;
    skip_space(g, false);
    if (g->end - g->p < 3 || memcmp(g->p, "::=", 3))
        return fail_at(g, g->p, "expected '::=' after the rule name", NULL);
    g->p += 3;
    skip_space(g, true);
    if (!parse_alternates(g, r, false)) return false;
    if (g->p < g->end && *g->p == '\r') g->p++;
    if (g->p < g->end && *g->p == '\n') g->p++;
    else if (g->p < g->end)
        return fail_at(g, g->p, "unexpected character; expected the end of the rule", NULL);
    return true;
}

spindle_status sp_gbnf_parse(const char *text, size_t len, sp_gram *out,
                             spindle_error *err) {
    memset(out, 0, sizeof *out);
    if (!text) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "grammar: no text");
    if (len > SP_GRAMMAR_MAX_SOURCE)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "grammar: %zu bytes is over the limit of %d", len,
                       SP_GRAMMAR_MAX_SOURCE);
    if (memchr(text, 0, len))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "grammar: contains a NUL byte");
    /* The text must be NUL-terminated for gb_where; copy it. */
    char *copy = malloc(len + 1);
    if (!copy) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    memcpy(copy, text, len);
    copy[len] = 0;
    gp g = {.text = copy, .p = copy, .end = copy + len, .err = err};
    skip_space(&g, true);
    while (!g.failed && g.p < g.end) {
        if (!parse_rule(&g)) break;
        skip_space(&g, true);
    }
    spindle_status st = g.failed ? err ? err->status : SPINDLE_ERR_FORMAT
                                 : gb_finish(&g.b, copy, out, err);
    if (g.failed && g.b.oom)
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    gb_free(&g.b);
    free(copy);
    return st;
}
