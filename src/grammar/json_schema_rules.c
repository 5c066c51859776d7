/* The converter's building blocks: llama.cpp's built-in rules
 * (json-schema-to-grammar.cpp PRIMITIVE_RULES and STRING_FORMAT_RULES,
 * with its whitespace rule), JSON literals as GBNF strings, rule naming,
 * and integer ranges as digit patterns. */
#include "grammar/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct builtin {
    const char *name, *body, *deps;  /* deps: space-separated rule names */
} builtin;

static const builtin BUILTINS[] = {
    {"space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}", ""},
    {"boolean", "(\"true\" | \"false\") space", "space"},
    {"decimal-part", "[0-9]{1,16}", ""},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", ""},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
     "integral-part decimal-part space"},
    {"integer", "(\"-\"? integral-part) space", "integral-part space"},
    {"value", "object | array | string | number | boolean | null",
     "object array string number boolean null"},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
     "string value space"},
    {"array", "\"[\" space ( value (\",\" space value)* )? \"]\" space", "value space"},
    {"uuid", "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
             "[0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\" space", "space"},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", ""},
    {"string", "\"\\\"\" char* \"\\\"\" space", "char space"},
    {"null", "\"null\" space", "space"},
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", ""},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? "
             "( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", ""},
    {"date-time", "date \"T\" time", "date time"},
    {"date-string", "\"\\\"\" date \"\\\"\" space", "date space"},
    {"time-string", "\"\\\"\" time \"\\\"\" space", "time space"},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\" space", "date-time space"},
    /* Not in llama.cpp: a practical address (what jsonschema's checker
     * asks: one "@"), local part and dotted domain of safe characters. */
    {"email-string", "\"\\\"\" [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} "
                     "(\".\" [a-zA-Z0-9-]{1,63}){1,4} \"\\\"\" space", "space"},
};

bool js_fail(js_conv *c, const char *pointer, const char *fmt, ...) {
    if (c->failed) return false;
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    sp_fail(c->err, SPINDLE_ERR_FORMAT, "json schema at '%s': %s",
            pointer && *pointer ? pointer : "/", why);
    c->failed = true;
    return false;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

const char *js_add_rule(js_conv *c, const char *name, const char *body) {
    if (c->failed) return NULL;
    char base[128];
    size_t n = 0;
    for (const char *p = name; *p && n < sizeof base - 12; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-';
        if (ok) base[n++] = ch;
        else if (n == 0 || base[n - 1] != '-') base[n++] = '-';
    }
    if (n == 0) base[n++] = 'r';
    base[n] = 0;
    char key[160];
    snprintf(key, sizeof key, "%s", base);
    for (int i = 0;; i++) {
        int found = -1;
        for (int r = 0; r < c->n_rules; r++)
            if (!strcmp(c->rules[r].name, key)) found = r;
        if (found < 0) break;
        if (!strcmp(c->rules[found].body, body)) return c->rules[found].name;
        snprintf(key, sizeof key, "%s%d", base, i);
    }
    if (c->n_rules >= JS_MAX_RULES) {
        js_fail(c, NULL, "the grammar would need more than %d rules", JS_MAX_RULES);
        return NULL;
    }
    if (c->n_rules == c->cap_rules) {
        int cap = c->cap_rules ? c->cap_rules * 2 : 32;
        js_rule *q = realloc(c->rules, (size_t)cap * sizeof *q);
        if (!q) {
            js_fail(c, NULL, "out of memory");
            return NULL;
        }
        c->rules = q;
        c->cap_rules = cap;
    }
    js_rule *r = &c->rules[c->n_rules];
    r->name = dup_str(key);
    r->body = dup_str(body);
    if (!r->name || !r->body) {
        free(r->name);
        free(r->body);
        js_fail(c, NULL, "out of memory");
        return NULL;
    }
    c->n_rules++;
    return r->name;
}

const char *js_add_primitive(js_conv *c, const char *name) {
    for (size_t i = 0; i < sizeof BUILTINS / sizeof *BUILTINS; i++) {
        if (strcmp(BUILTINS[i].name, name)) continue;
        const char *res = js_add_rule(c, name, BUILTINS[i].body);
        char dep[64];
        for (const char *p = BUILTINS[i].deps; res && *p;) {
            size_t n = strcspn(p, " ");
            snprintf(dep, sizeof dep, "%.*s", (int)n, p);
            bool have = false;
            for (int r = 0; r < c->n_rules; r++)
                if (!strcmp(c->rules[r].name, dep)) have = true;
            if (!have && !js_add_primitive(c, dep)) return NULL;
            p += n;
            while (*p == ' ') p++;
        }
        return res;
    }
    js_fail(c, NULL, "internal: no built-in rule '%s'", name);
    return NULL;
}

bool js_literal(sp_strbuf *out, const char *text) {
    sp_strbuf_addc(out, '"');
    for (const char *p = text; *p; p++) {
        switch (*p) {
        case '"': sp_strbuf_add(out, "\\\"", 2); break;
        case '\\': sp_strbuf_add(out, "\\\\", 2); break;
        case '\n': sp_strbuf_add(out, "\\n", 2); break;
        case '\r': sp_strbuf_add(out, "\\r", 2); break;
        case '\t': sp_strbuf_add(out, "\\t", 2); break;
        default: sp_strbuf_addc(out, *p);
        }
    }
    return sp_strbuf_addc(out, '"');
}

bool js_const_rule(sp_strbuf *out, const cJSON *value) {
    char *text = cJSON_PrintUnformatted(value);
    if (!text) return false;
    bool ok = js_literal(out, text);
    cJSON_free(text);
    return ok;
}

/* ------------------------------------------------------ integer ranges */

/* Digit strings x <= y of one length: alternatives covering [x, y]. */
static void same_length(sp_strbuf *out, const char *x, const char *y, int n) {
    if (n == 0) return;
    if (n == 1) {
        if (x[0] == y[0]) sp_strbuf_printf(out, "[%c]", x[0]);
        else sp_strbuf_printf(out, "[%c-%c]", x[0], y[0]);
        return;
    }
    if (x[0] == y[0]) {
        sp_strbuf_printf(out, "[%c] ", x[0]);
        same_length(out, x + 1, y + 1, n - 1);
        return;
    }
    char zeros[24], nines[24];
    memset(zeros, '0', (size_t)n - 1);
    memset(nines, '9', (size_t)n - 1);
    bool x_low = !memcmp(x + 1, zeros, (size_t)n - 1);
    bool y_high = !memcmp(y + 1, nines, (size_t)n - 1);
    char lo = x_low ? x[0] : (char)(x[0] + 1);
    char hi = y_high ? y[0] : (char)(y[0] - 1);
    sp_strbuf_addc(out, '(');
    bool first = true;
    if (!x_low) {
        sp_strbuf_printf(out, "[%c] (", x[0]);
        same_length(out, x + 1, nines, n - 1);
        sp_strbuf_addc(out, ')');
        first = false;
    }
    if (lo <= hi) {
        sp_strbuf_printf(out, "%s[%c-%c] [0-9]{%d}", first ? "" : " | ", lo, hi, n - 1);
        first = false;
    }
    if (!y_high) {
        sp_strbuf_printf(out, "%s[%c] (", first ? "" : " | ", y[0]);
        same_length(out, zeros, y + 1, n - 1);
        sp_strbuf_addc(out, ')');
    }
    sp_strbuf_addc(out, ')');
}

static int digits(unsigned long long v) {
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* [lo, hi] of non-negative integers; hi < 0: unbounded (up to 16 digits,
 * the cap of llama.cpp's integral-part). */
static void non_negative(sp_strbuf *out, unsigned long long lo, long long hi) {
    const int cap = 16;
    int dl = digits(lo), dh = hi < 0 ? cap : digits((unsigned long long)hi);
    bool first = true;
    sp_strbuf_addc(out, '(');
    for (int d = dl; d <= dh; d++) {
        unsigned long long pow = 1;
        for (int k = 1; k < d; k++) pow *= 10;
        unsigned long long a = d == 1 ? 0 : pow, b = pow * 10 - 1;
        if (a < lo) a = lo;
        if (hi >= 0 && b > (unsigned long long)hi) b = (unsigned long long)hi;
        if (a > b) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%0*llu", d, a);
        snprintf(ys, sizeof ys, "%0*llu", d, b);
        sp_strbuf_add(out, first ? "" : " | ", first ? 0 : 3);
        same_length(out, xs, ys, d);
        first = false;
    }
    sp_strbuf_addc(out, ')');
}

bool js_int_range(sp_strbuf *out, bool has_min, long long min, bool has_max,
                  long long max) {
    if (has_min && has_max && min > max) return false;
    const long long big = 999999999999999LL; /* 15 digits each way */
    if ((has_min && (min < -big || min > big)) || (has_max && (max < -big || max > big)))
        return false;
    bool first = true;
    sp_strbuf_addc(out, '(');
    if (!has_min || min < 0) { /* negatives: "-" then |v| in the mirrored range */
        long long lo_abs = has_max && max < 0 ? -max : 1;
        long long hi_abs = has_min ? -min : -1;
        sp_strbuf_add(out, "\"-\" ", 4);
        non_negative(out, (unsigned long long)lo_abs, hi_abs);
        first = false;
    }
    if (!has_max || max >= 0) {
        sp_strbuf_add(out, first ? "" : " | ", first ? 0 : 3);
        non_negative(out, has_min && min > 0 ? (unsigned long long)min : 0,
                     has_max ? max : -1);
    }
    return sp_strbuf_addc(out, ')');
}

/* ------------------------------------------------------- number ranges */

/* Digit strings of length 0..n (length 0 only when with_empty) whose
 * value as a fraction 0.d1d2... lies between lo and hi, each a digit
 * string compared as the same kind of fraction (NULL: no bound; strict:
 * exclusive). Writes the non-empty strings' alternatives to `out` and
 * returns whether any string (the empty one included) qualifies, with
 * *empty_ok saying whether the empty one does. */
static bool all_zero(const char *s) {
    return s && s[strspn(s, "0")] == 0;
}

static bool frac_digits(sp_strbuf *out, const char *lo, bool lo_strict,
                        const char *hi, bool hi_strict, int n, bool with_empty,
                        bool *empty_ok) {
    if (lo && all_zero(lo) && !lo_strict) lo = NULL; /* ">= 0" holds always */
    *empty_ok = with_empty && !lo && !(hi && all_zero(hi) && hi_strict);
    if (n == 0) return *empty_ok;
    char l0 = lo && *lo ? *lo : '0', h0 = hi && *hi ? *hi : (hi ? '0' : '9');
    const char *lr = lo ? (*lo ? lo + 1 : lo) : NULL;
    const char *hr = hi ? (*hi ? hi + 1 : hi) : NULL;
    bool any = false;
    /* One alternative: the digit class, then the rest of the string. */
#define FRAC_ALT(cls, LO, LS, HI, HS)                                             \
    do {                                                                          \
        sp_strbuf rest = {0};                                                     \
        bool rest_empty;                                                          \
        if (frac_digits(&rest, LO, LS, HI, HS, n - 1, true, &rest_empty)) {       \
            sp_strbuf_printf(out, "%s%s", any ? " | " : "", cls);                 \
            if (rest.len)                                                         \
                sp_strbuf_printf(out, " (%s)%s", rest.p, rest_empty ? "?" : "");  \
            any = true;                                                           \
        }                                                                         \
        sp_strbuf_free(&rest);                                                    \
    } while (0)
    char cls[16];
    if (l0 > h0) return *empty_ok;
    if (l0 == h0) {
        snprintf(cls, sizeof cls, "[%c]", l0);
        FRAC_ALT(cls, lr, lo_strict, hr, hi_strict);
        return any || *empty_ok;
    }
    char mid_lo = lo ? (char)(l0 + 1) : l0, mid_hi = hi ? (char)(h0 - 1) : h0;
    if (lo) {
        snprintf(cls, sizeof cls, "[%c]", l0);
        FRAC_ALT(cls, lr, lo_strict, NULL, false);
    }
    if (mid_lo <= mid_hi) {
        if (mid_lo == mid_hi) sp_strbuf_printf(out, "%s[%c]", any ? " | " : "", mid_lo);
        else sp_strbuf_printf(out, "%s[%c-%c]", any ? " | " : "", mid_lo, mid_hi);
        if (n > 1) sp_strbuf_printf(out, " [0-9]{0,%d}", n - 1);
        any = true;
    }
    if (hi) {
        snprintf(cls, sizeof cls, "[%c]", h0);
        FRAC_ALT(cls, NULL, false, hr, hi_strict);
    }
#undef FRAC_ALT
    return any || *empty_ok;
}

/* The optional fraction of a number ("." then 1..16 digits, or nothing,
 * as llama.cpp's decimal-part) with value in the bounds; false if none. */
static bool fraction_part(sp_strbuf *out, const char *lo, bool lo_strict,
                          const char *hi, bool hi_strict) {
    sp_strbuf body = {0};
    bool empty_ok;
    bool any = frac_digits(&body, lo, lo_strict, hi, hi_strict, 16, true, &empty_ok);
    if (!any && !empty_ok) return sp_strbuf_free(&body), false;
    if (body.len)
        sp_strbuf_printf(out, " (\".\" (%s))%s", body.p, empty_ok ? "?" : "");
    sp_strbuf_free(&body);
    return true;
}

/* A non-negative decimal bound: integer digits (no leading zeros, "" for
 * zero) and fraction digits (no trailing zeros). `huge`: 17 or more
 * integer digits, past anything llama.cpp's integral-part writes. */
typedef struct js_dec {
    char ip[20], fp[400];
    bool huge, strict;
} js_dec;

/* |d| as the shortest decimal that reads back as d (what the schema's
 * author wrote: 0.1 is "0.1", not the double's 0.1000000000000000055). */
static void decimal_of(double d, bool strict, js_dec *out) {
    char e[40];
    d = fabs(d);
    for (int prec = 0; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, d);
        if (strtod(e, NULL) == d) break;
    }
    char digs[24];
    int nd = 0;
    const char *p = e;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digs[nd++] = *p;
    digs[nd] = 0;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    memset(out, 0, sizeof *out);
    out->strict = strict;
    /* value = digs[0].digs[1..] x 10^exp10 */
    if (exp10 >= 16) {
        out->huge = d != 0;
    } else if (exp10 >= 0) {
        for (int i = 0; i <= exp10; i++) out->ip[i] = i < nd ? digs[i] : '0';
        if (nd > exp10 + 1) snprintf(out->fp, sizeof out->fp, "%s", digs + exp10 + 1);
    } else {
        int z = -exp10 - 1;
        memset(out->fp, '0', (size_t)z);
        snprintf(out->fp + z, sizeof out->fp - (size_t)z, "%s", digs);
    }
    /* Canonical: no leading zeros in ip, no trailing zeros in fp. */
    size_t lead = strspn(out->ip, "0");
    memmove(out->ip, out->ip + lead, strlen(out->ip + lead) + 1);
    size_t n = strlen(out->fp);
    while (n && out->fp[n - 1] == '0') out->fp[--n] = 0;
}

/* Magnitudes (the number without its sign) between lo and hi (NULL: no
 * bound), written as integral-part and an optional fraction. */
static bool magnitude(sp_strbuf *out, const js_dec *lo, const js_dec *hi) {
    if (lo && lo->huge) return false;
    if (hi && hi->huge) hi = NULL;
    unsigned long long li = lo ? strtoull(lo->ip, NULL, 10) : 0;
    unsigned long long hv = hi ? strtoull(hi->ip, NULL, 10) : 0;
    const unsigned long long cap = 9999999999999999ULL; /* 16 digits */
    if (hi && li > hv) return false;
    bool any = false;
    sp_strbuf alt = {0};
    /* The integer part equal to lo's: the fraction decides. */
    bool lo_trivial = !lo || (!*lo->fp && !lo->strict);
    if (!lo_trivial || (hi && li == hv)) {
        sp_strbuf_printf(&alt, "\"%llu\"", li);
        bool ok = hi && li == hv
                      ? fraction_part(&alt, lo ? lo->fp : NULL, lo && lo->strict, hi->fp, hi->strict)
                      : fraction_part(&alt, lo ? lo->fp : NULL, lo && lo->strict, NULL, false);
        if (ok && alt.p) {
            sp_strbuf_printf(out, "%s", alt.p);
            any = true;
        }
        sp_strbuf_free(&alt);
        if (hi && li == hv) return any;
    }
    /* Integer parts strictly inside: any fraction. */
    unsigned long long from = lo_trivial ? li : li + 1;
    long long to = hi ? (long long)hv - 1 : -1;
    if (from <= cap && (!hi || (long long)from <= to)) {
        sp_strbuf_printf(out, "%s", any ? " | " : "");
        non_negative(out, from, to);
        sp_strbuf_add(out, " (\".\" [0-9]{1,16})?", 19);
        any = true;
    }
    if (hi) {
        sp_strbuf_printf(&alt, "\"%llu\"", hv);
        if (fraction_part(&alt, NULL, false, hi->fp, hi->strict) && alt.p) {
            sp_strbuf_printf(out, "%s%s", any ? " | " : "", alt.p);
            any = true;
        }
        sp_strbuf_free(&alt);
    }
    return any;
}

bool js_number_range(sp_strbuf *out, const js_bound *lo, const js_bound *hi) {
    js_dec a, b;
    bool any = false;
    sp_strbuf part = {0};
    /* Negative texts: "-" and a magnitude in [-hi, -lo]. A text "-0"
     * is the value 0. */
    bool neg_possible = !lo || lo->value < 0 || (lo->value == 0 && !lo->strict);
    if (neg_possible) {
        const js_dec *mlo = NULL, *mhi = NULL;
        if (hi && hi->value <= 0) {
            decimal_of(hi->value, hi->strict, &a);
            mlo = &a;
        }
        if (lo) {
            decimal_of(lo->value, lo->strict, &b);
            mhi = &b;
        }
        if (magnitude(&part, mlo, mhi)) {
            sp_strbuf_printf(out, "\"-\" (%s)", part.p);
            any = true;
        }
        sp_strbuf_free(&part);
    }
    bool pos_possible = !hi || hi->value > 0 || (hi->value == 0 && !hi->strict);
    if (pos_possible) {
        const js_dec *mlo = NULL, *mhi = NULL;
        if (lo && lo->value >= 0) {
            decimal_of(lo->value, lo->strict, &a);
            mlo = &a;
        }
        if (hi) {
            decimal_of(hi->value, hi->strict, &b);
            mhi = &b;
        }
        if (magnitude(&part, mlo, mhi)) {
            sp_strbuf_printf(out, "%s%s", any ? " | " : "", part.p);
            any = true;
        }
        sp_strbuf_free(&part);
    }
    return any;
}
