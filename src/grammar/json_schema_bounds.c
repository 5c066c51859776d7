/* Bounds the converter compiles into the grammar exactly: number ranges
 * (minimum / maximum / exclusive ones, digit by digit against the
 * bound's decimal), the length of an email-format string, and integer
 * multipleOf. */
#include "grammar/json_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- number ranges */

static bool all_zero(const char *s) {
    return s && s[strspn(s, "0")] == 0;
}

/* Digit strings of length 0..n (length 0 only when with_empty) whose
 * value as a fraction 0.d1d2... lies between lo and hi, each a digit
 * string compared as the same kind of fraction (NULL: no bound; strict:
 * exclusive). Writes the non-empty strings' alternatives to `out` and
 * returns whether any string (the empty one included) qualifies, with
 * *empty_ok saying whether the empty one does. */
static bool frac_digits(sp_strbuf *out, const char *lo, bool lo_strict,
                        const char *hi, bool hi_strict, int n, bool with_empty,
                        bool *empty_ok);

/* One alternative of frac_digits: the digit class `cls`, then the rest
 * of the string (n more digits at most) within the bounds. */
static void frac_alt(sp_strbuf *out, const char *cls, const char *lo, bool lo_strict,
                     const char *hi, bool hi_strict, int n, bool *any) {
    sp_strbuf rest = {0};
    bool rest_empty;
    if (frac_digits(&rest, lo, lo_strict, hi, hi_strict, n, true, &rest_empty)) {
        sp_strbuf_printf(out, "%s%s", *any ? " | " : "", cls);
        if (rest.len) sp_strbuf_printf(out, " (%s)%s", rest.p, rest_empty ? "?" : "");
        *any = true;
    }
    sp_strbuf_free(&rest);
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
    char cls[16];
    if (l0 > h0) return *empty_ok;
    if (l0 == h0) {
        snprintf(cls, sizeof cls, "[%c]", l0);
        frac_alt(out, cls, lr, lo_strict, hr, hi_strict, n - 1, &any);
        return any || *empty_ok;
    }
    char mid_lo = lo ? (char)(l0 + 1) : l0, mid_hi = hi ? (char)(h0 - 1) : h0;
    if (lo) {
        snprintf(cls, sizeof cls, "[%c]", l0);
        frac_alt(out, cls, lr, lo_strict, NULL, false, n - 1, &any);
    }
    if (mid_lo <= mid_hi) {
        if (mid_lo == mid_hi) sp_strbuf_printf(out, "%s[%c]", any ? " | " : "", mid_lo);
        else sp_strbuf_printf(out, "%s[%c-%c]", any ? " | " : "", mid_lo, mid_hi);
        if (n > 1) sp_strbuf_printf(out, " [0-9]{0,%d}", n - 1);
        any = true;
    }
    if (hi) {
        snprintf(cls, sizeof cls, "[%c]", h0);
        frac_alt(out, cls, NULL, false, hr, hi_strict, n - 1, &any);
    }
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
        js_uint_range(out, from, to);
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

/* ------------------------------------------------------- email lengths */

/* The email-string built-in's language (local part "@" label, then 1..4
 * dotted labels) cut to lengths [min, max] by counting: one rule per
 * (place in the address, characters so far). The local part's cap of 64
 * and a label's of 63 cannot bind when max <= 67, so the count is the
 * only state; past that they would multiply the rules, and it is
 * refused. */
enum { EM_LOCAL, EM_AT, EM_LABEL, EM_DOT = EM_LABEL + 5, EM_STATES = EM_DOT + 5 };
#define EM_MAX_LEN 67
#define EM_LOCAL_CHAR "[a-zA-Z0-9._%+-]"
#define EM_LABEL_CHAR "[a-zA-Z0-9-]"

const char *js_email_rule(js_conv *c, long min, long max, const char *name,
                          const char *ptr) {
    if (max < 0 || max > EM_MAX_LEN)
        return js_fail(c, ptr, "format 'email' with minLength/maxLength needs maxLength <= %d "
                       "(past that the caps on its parts' lengths would need counting too)",
                       EM_MAX_LEN), NULL;
    /* next[s][n]: the rule for the rest after n characters in state s;
     * "" when only the end may follow, NULL when nothing can. */
    const char *next[EM_STATES][EM_MAX_LEN + 2];
    char rn[300];
    for (long n = max + 1; n >= 1; n--)
        for (int s = 0; s < EM_STATES; s++) {
            next[s][n] = NULL;
            if (n > max || s == EM_DOT) continue; /* no "after the 0th dot" */
            int dots = s >= EM_DOT ? s - EM_DOT : s - EM_LABEL;
            sp_strbuf o = {0};
            int alts = 0;
            bool end = s >= EM_LABEL && s < EM_DOT && dots >= 1 && n >= min;
            const char *to[2] = {NULL, NULL};
            const char *cls[2] = {NULL, NULL};
            if (s == EM_LOCAL) {
                to[0] = next[EM_LOCAL][n + 1], cls[0] = EM_LOCAL_CHAR;
                to[1] = next[EM_AT][n + 1], cls[1] = "\"@\"";
            } else if (s == EM_AT || s >= EM_DOT) {
                to[0] = next[EM_LABEL + (s == EM_AT ? 0 : dots)][n + 1], cls[0] = EM_LABEL_CHAR;
            } else {
                to[0] = next[s][n + 1], cls[0] = EM_LABEL_CHAR;
                if (dots < 4) to[1] = next[EM_DOT + dots + 1][n + 1], cls[1] = "\".\"";
            }
            for (int k = 0; k < 2; k++)
                if (to[k]) sp_strbuf_printf(&o, "%s%s%s%s", alts++ ? " | " : "", cls[k],
                                            *to[k] ? " " : "", to[k]);
            if (alts == 0) {
                sp_strbuf_free(&o);
                next[s][n] = end ? "" : NULL;
                continue;
            }
            sp_strbuf body = {0};
            sp_strbuf_printf(&body, end ? "( %s )?" : "%s", o.p);
            sp_strbuf_free(&o);
            snprintf(rn, sizeof rn, "%s-email-%d-%ld", name, s, n);
            if (body.oom) return js_fail(c, ptr, "out of memory"), NULL;
            next[s][n] = js_add_rule(c, rn, body.p);
            sp_strbuf_free(&body);
            if (!next[s][n]) return NULL;
        }
    if (!next[EM_LOCAL][1])
        return js_fail(c, ptr, "format 'email': no such string has a length within minLength/maxLength"), NULL;
    const char *space = js_add_primitive(c, "space");
    sp_strbuf o = {0};
    sp_strbuf_printf(&o, "\"\\\"\" %s %s \"\\\"\" %s", EM_LOCAL_CHAR, next[EM_LOCAL][1],
                     space ? space : "space");
    if (o.oom) return js_fail(c, ptr, "out of memory"), NULL;
    const char *r = js_add_rule(c, name, o.p);
    sp_strbuf_free(&o);
    return r;
}

/* ------------------------------------------------- multipleOf integers */

/* Integers (llama.cpp's integer rule: "-"? and up to 16 digits, no
 * leading zero; on a number, then optionally "." and zeros) divisible
 * by k, or on a number a multiple of 10^-e (decimal_multiple_rule): the digits read left to right keep the
 * remainder mod k, one rule per (remainder, digits so far). */
/* A number (without exponent, as bounded numbers) whose value is a
 * multiple of 10^-e: no nonzero digit past the e-th decimal. */
static const char *decimal_multiple_rule(js_conv *c, int e, const char *name, const char *ptr) {
    const char *ip = js_add_primitive(c, "integral-part"), *space = js_add_primitive(c, "space");
    sp_strbuf o = {0};
    sp_strbuf_printf(&o, "\"-\"? %s ( \".\" ( [0-9]{1,%d}", ip ? ip : "integral-part", e);
    if (e < 16) sp_strbuf_printf(&o, " | [0-9]{%d} \"0\"{1,%d}", e, 16 - e);
    sp_strbuf_printf(&o, " ) )? %s", space ? space : "space");
    if (o.oom) return js_fail(c, ptr, "out of memory"), NULL;
    const char *r = js_add_rule(c, name, o.p);
    sp_strbuf_free(&o);
    return r;
}

/* e with k = 10^-e (1 <= e <= 16), else 0. */
static int decimal_power(double k) {
    double p = 1;
    for (int e = 1; e <= 16; e++) {
        p *= 10;
        if (fabs(k * p - 1) < 1e-9) return e;
    }
    return 0;
}

const char *js_multiple_rule(js_conv *c, const cJSON *k_json, bool number, const char *name,
                             const char *ptr) {
    double kd = k_json->valuedouble;
    int e = number ? decimal_power(kd) : 0;
    if (e) return decimal_multiple_rule(c, e, name, ptr);
    if (!(kd >= 1 && kd <= JS_MAX_MULTIPLE) || kd != floor(kd))
        return js_fail(c, ptr, "multipleOf must be a whole number 1..%d%s", JS_MAX_MULTIPLE,
                       number ? " or, on a number, a power of ten such as 0.01" : ""), NULL;
    int k = (int)kd;
    const char *next[JS_MAX_MULTIPLE][17];
    char rn[300];
    for (int d = 16; d >= 1; d--)
        for (int r = 0; r < k; r++) {
            sp_strbuf o = {0};
            int alts = 0;
            for (int to = 0; to < k && d < 16; to++) {
                if (!next[to][d + 1]) continue;
                char cls[16];
                int n = 0;
                for (int dg = 0; dg <= 9; dg++)
                    if ((10 * r + dg) % k == to) cls[n++] = (char)('0' + dg);
                if (!n) continue;
                cls[n] = 0;
                sp_strbuf_printf(&o, "%s[%s]%s%s", alts++ ? " | " : "", cls,
                                 *next[to][d + 1] ? " " : "", next[to][d + 1]);
            }
            if (!alts) {
                next[r][d] = r == 0 ? "" : NULL;
                sp_strbuf_free(&o);
                continue;
            }
            sp_strbuf body = {0};
            sp_strbuf_printf(&body, r == 0 ? "( %s )?" : "%s", o.p);
            sp_strbuf_free(&o);
            if (body.oom) return js_fail(c, ptr, "out of memory"), NULL;
            snprintf(rn, sizeof rn, "%s-mod-%d-%d", name, r, d);
            next[r][d] = js_add_rule(c, rn, body.p);
            sp_strbuf_free(&body);
            if (!next[r][d]) return NULL;
        }
    sp_strbuf o = {0};
    sp_strbuf_printf(&o, "\"-\"? ( \"0\"");
    for (int dg = 1; dg <= 9; dg++) {
        const char *to = next[dg % k][1];
        if (to) sp_strbuf_printf(&o, " | \"%d\"%s%s", dg, *to ? " " : "", to);
    }
    const char *space = js_add_primitive(c, "space");
    /* A number that is a whole multiple may be written with zero decimals. */
    sp_strbuf_printf(&o, " )%s %s", number ? " ( \".\" \"0\"{1,16} )?" : "", space ? space : "space");
    if (o.oom) return js_fail(c, ptr, "out of memory"), NULL;
    const char *r = js_add_rule(c, name, o.p);
    sp_strbuf_free(&o);
    return r;
}
