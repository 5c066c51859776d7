/* A JSON Schema `pattern` (the ECMA-262 subset schemas use) as a GBNF
 * expression over the *content* of a JSON string: literals, classes (with
 * ranges, negation, \d \w \s and their complements), ., groups (capturing
 * or (?:)), alternation and the quantifiers * + ? {m} {m,} {m,n} (lazy
 * forms match the same strings). A pattern is a search: without ^ / $ any
 * text may come before / after it. Characters JSON must escape are
 * written escaped: '"' as \", '\' as \\, control characters are left out
 * of classes and `.` (a schema pattern cannot usefully ask for them).
 * Lookaround, backreferences and \b are refused with the offset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/utf8.h"
#include "grammar/gram_build.h"

#define RX_MAX_DEPTH 64
#define RX_MAX_RANGES 512

typedef struct rx {
    const char *s, *p, *end;
    sp_strbuf *out;
    int depth;
    spindle_error *err;
    bool failed;
} rx;

static bool rx_fail(rx *r, const char *why) {
    if (!r->failed)
        sp_fail(r->err, SPINDLE_ERR_FORMAT, "regex offset %zu: %s",
                (size_t)(r->p - r->s), why);
    r->failed = true;
    return false;
}

/* A code point as a GBNF escape in its shortest form (\xNN, \uNNNN,
 * \UNNNNNNNN): other GBNF readers (llguidance's) mis-read the 8-digit
 * form, and the short ones keep the grammars readable. */
static void cp_escape(sp_strbuf *o, uint32_t cp) {
    if (cp < 0x80) sp_strbuf_printf(o, "\\x%02x", (unsigned)cp);
    else if (cp <= 0xFFFF) sp_strbuf_printf(o, "\\u%04x", (unsigned)cp);
    else sp_strbuf_printf(o, "\\U%08x", (unsigned)cp);
}

/* One code point as it must appear in JSON string content, as GBNF. */
static void literal_cp(sp_strbuf *o, uint32_t cp) {
    if (cp == '"') sp_strbuf_add(o, "\"\\\\\\\"\"", 6);        /* "\\\"" */
    else if (cp == '\\') sp_strbuf_add(o, "\"\\\\\\\\\"", 6);  /* "\\\\" */
    else if (cp == '\n') sp_strbuf_add(o, "\"\\\\n\"", 5);
    else if (cp == '\t') sp_strbuf_add(o, "\"\\\\t\"", 5);
    else if (cp == '\r') sp_strbuf_add(o, "\"\\\\r\"", 5);
    else if (cp < 0x20 || cp == 0x7F) sp_strbuf_printf(o, "\"\\\\u%04x\"", (unsigned)cp);
    else {
        sp_strbuf_addc(o, '[');
        cp_escape(o, cp);
        sp_strbuf_addc(o, ']');
    }
}

static void emit_class(sp_strbuf *o, const uint32_t *r, int n) {
    /* JSON-safe part: everything but '"', '\', controls and DEL. */
    static const uint32_t safe[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7E, 0x80, 0x10FFFF};
    bool quote = false, backslash = false, bar = false;
    sp_strbuf cls = {0};
    for (int i = 0; i < n; i++) {
        if (r[2 * i] <= '"' && '"' <= r[2 * i + 1]) quote = true;
        if (r[2 * i] <= '\\' && '\\' <= r[2 * i + 1]) backslash = true;
        for (int k = 0; k < 4; k++) {
            uint32_t lo = r[2 * i] > safe[2 * k] ? r[2 * i] : safe[2 * k];
            uint32_t hi = r[2 * i + 1] < safe[2 * k + 1] ? r[2 * i + 1] : safe[2 * k + 1];
            if (lo > hi) continue;
            cp_escape(&cls, lo);
            sp_strbuf_addc(&cls, '-');
            cp_escape(&cls, hi);
        }
    }
    sp_strbuf_addc(o, '(');
    if (cls.len) {
        sp_strbuf_printf(o, "[%s]", cls.p);
        bar = true;
    }
    if (quote) sp_strbuf_printf(o, "%s\"\\\\\\\"\"", bar ? " | " : ""), bar = true;
    if (backslash) sp_strbuf_printf(o, "%s\"\\\\\\\\\"", bar ? " | " : ""), bar = true;
    if (!bar) sp_strbuf_add(o, "[^\\x00-\\U0010FFFF]", 18); /* matches nothing */
    sp_strbuf_addc(o, ')');
    if (cls.oom) o->oom = true;
    sp_strbuf_free(&cls);
}

static int add_range(uint32_t *r, int n, uint32_t lo, uint32_t hi) {
    if (n >= RX_MAX_RANGES) return n;
    r[2 * n] = lo;
    r[2 * n + 1] = hi;
    return n + 1;
}

/* \d \w \s (upper case: negated) into ranges; false for other letters. */
static bool class_escape(char c, uint32_t *r, int *n, bool *negate) {
    char l = (char)(c | 0x20);
    if (l != 'd' && l != 'w' && l != 's') return false;
    *negate = c != l;
    if (l == 'd') *n = add_range(r, *n, '0', '9');
    if (l == 'w') {
        *n = add_range(r, *n, '0', '9');
        *n = add_range(r, *n, 'A', 'Z');
        *n = add_range(r, *n, '_', '_');
        *n = add_range(r, *n, 'a', 'z');
    }
    if (l == 's') {
        *n = add_range(r, *n, '\t', '\r');
        *n = add_range(r, *n, ' ', ' ');
        *n = add_range(r, *n, 0xA0, 0xA0);
        *n = add_range(r, *n, 0x2028, 0x2029);
    }
    return true;
}

/* `digits` hex digits at r->p into *v. */
static bool hex_digits(rx *r, int digits, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < digits; i++, r->p++) {
        char h = r->p < r->end ? *r->p : 0;
        int d = h >= '0' && h <= '9' ? h - '0' : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10 : -1;
        if (d < 0) return rx_fail(r, "bad hex escape");
        *v = *v * 16 + (uint32_t)d;
    }
    return true;
}

/* After \u of a high surrogate: the \uDC00-\uDFFF that completes the
 * pair (ECMAScript's UTF-16 spelling of a code point past U+FFFF). A lone
 * surrogate is no character of JSON text: refused. */
static bool surrogate_pair(rx *r, uint32_t *cp) {
    uint32_t lo = 0;
    if (*cp <= 0xDBFF && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
        const char *at = r->p;
        r->p += 2;
        if (hex_digits(r, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
            return true;
        }
        if (r->failed) return false;
        r->p = at;
    }
    char why[80];
    snprintf(why, sizeof why, "\\u%04X is a lone surrogate, not a character", (unsigned)*cp);
    return rx_fail(r, why);
}

static bool escaped_cp(rx *r, uint32_t *cp) {
    if (r->p >= r->end) return rx_fail(r, "pattern ends in a backslash");
    char c = *r->p++;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : 0;
    if (digits) {
        if (!hex_digits(r, digits, cp)) return false;
        return *cp >= 0xD800 && *cp <= 0xDFFF ? surrogate_pair(r, cp) : true;
    }
    switch (c) {
    case 'n': *cp = '\n'; return true;
    case 't': *cp = '\t'; return true;
    case 'r': *cp = '\r'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v': *cp = '\v'; return true;
    case '0': *cp = 0; return true;
    case 'b': case 'B': return rx_fail(r, "word boundaries (\\b) are not supported");
    default:
        if ((c >= '1' && c <= '9')) return rx_fail(r, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return rx_fail(r, "unknown escape");
        *cp = (unsigned char)c;
        return true;
    }
}

static bool next_cp(rx *r, uint32_t *cp) {
    int len;
    *cp = sp_utf8_next(r->p, (size_t)(r->end - r->p), &len);
    r->p += len;
    return true;
}

static bool emit_ranges(rx *r, uint32_t *ranges, int n, bool negate) {
    uint32_t norm[2 * RX_MAX_RANGES + 8];
    int m = gb_normalize_ranges(ranges, n, negate, norm);
    emit_class(r->out, norm, m);
    return true;
}

static bool parse_class(rx *r) {
    r->p++;
    bool negate = r->p < r->end && *r->p == '^';
    if (negate) r->p++;
    uint32_t ranges[2 * RX_MAX_RANGES + 8];
    int n = 0;
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        uint32_t lo;
        if (*r->p == '\\') {
            r->p++;
            bool neg_esc = false;
            uint32_t sub[16];
            int ns = 0;
            if (r->p < r->end && class_escape(*r->p, sub, &ns, &neg_esc)) {
                r->p++;
                if (neg_esc) {
                    uint32_t comp[2 * 16 + 8];
                    ns = gb_normalize_ranges(sub, ns, true, comp);
                    for (int i = 0; i < ns; i++) n = add_range(ranges, n, comp[2 * i], comp[2 * i + 1]);
                } else {
                    for (int i = 0; i < ns; i++) n = add_range(ranges, n, sub[2 * i], sub[2 * i + 1]);
                }
                continue;
            }
            if (!escaped_cp(r, &lo)) return false;
        } else {
            next_cp(r, &lo);
        }
        uint32_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                if (!escaped_cp(r, &hi)) return false;
            } else {
                next_cp(r, &hi);
            }
            if (hi < lo) return rx_fail(r, "character range is reversed");
        }
        if (n >= RX_MAX_RANGES) return rx_fail(r, "character class too large");
        n = add_range(ranges, n, lo, hi);
    }
    if (r->p >= r->end) return rx_fail(r, "character class is not closed");
    r->p++;
    return emit_ranges(r, ranges, n, negate);
}

static bool parse_alt(rx *r);

static bool parse_quantifier(rx *r) {
    char c = *r->p;
    if (c == '*' || c == '+' || c == '?') {
        r->p++;
        sp_strbuf_addc(r->out, c);
    } else {
        const char *at = r->p++;
        long m = 0, n = -1;
        bool digits = false;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9' && m <= SP_GRAMMAR_MAX_REPEAT)
            m = m * 10 + (*r->p++ - '0'), digits = true;
        if (!digits) {
            r->p = at;
            return rx_fail(r, "'{' must start a repetition {m}, {m,} or {m,n}");
        }
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            if (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
                n = 0;
                while (r->p < r->end && *r->p >= '0' && *r->p <= '9' && n <= SP_GRAMMAR_MAX_REPEAT)
                    n = n * 10 + (*r->p++ - '0');
            }
        } else {
            n = m;
        }
        if (r->p >= r->end || *r->p != '}') return rx_fail(r, "repetition is not closed by '}'");
        r->p++;
        if (m > SP_GRAMMAR_MAX_REPEAT || n > SP_GRAMMAR_MAX_REPEAT || (n >= 0 && n < m))
            return rx_fail(r, "repetition counts must be 0..1000 with min <= max");
        if (n < 0) sp_strbuf_printf(r->out, "{%ld,}", m);
        else sp_strbuf_printf(r->out, "{%ld,%ld}", m, n);
    }
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '{'))
        return rx_fail(r, "a quantifier cannot follow a quantifier");
    return true;
}

static bool parse_atom(rx *r) {
    char c = *r->p;
    uint32_t cp;
    if (c == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->end - r->p >= 2 && r->p[1] == ':') r->p += 2;
            else return rx_fail(r, "lookaround and named groups are not supported");
        }
        if (++r->depth > RX_MAX_DEPTH) return rx_fail(r, "groups nest too deeply");
        sp_strbuf_addc(r->out, '(');
        if (!parse_alt(r)) return false;
        if (r->p >= r->end || *r->p != ')') return rx_fail(r, "group is not closed");
        r->p++;
        r->depth--;
        return sp_strbuf_addc(r->out, ')');
    }
    if (c == '[') return parse_class(r);
    if (c == '.') {
        r->p++;
        uint32_t nl[4] = {'\n', '\n', '\r', '\r'};
        return emit_ranges(r, nl, 2, true);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return rx_fail(r, "nothing to repeat");
    if (c == '\\') {
        r->p++;
        uint32_t ranges[16];
        int n = 0;
        bool negate = false;
        if (r->p < r->end && class_escape(*r->p, ranges, &n, &negate)) {
            r->p++;
            return emit_ranges(r, ranges, n, negate);
        }
        if (!escaped_cp(r, &cp)) return false;
    } else {
        next_cp(r, &cp);
    }
    literal_cp(r->out, cp);
    return true;
}

static bool parse_seq(rx *r) {
    bool empty = true;
    while (!r->failed && r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (*r->p == '^' || *r->p == '$') {
            if (!((*r->p == '^' && r->p == r->s) || (*r->p == '$' && r->p + 1 == r->end)))
                return rx_fail(r, "anchors are supported only at the start and end");
            r->p++;
            continue;
        }
        if (!empty) sp_strbuf_addc(r->out, ' ');
        if (!parse_atom(r)) return false;
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{') &&
            !parse_quantifier(r))
            return false;
        empty = false;
    }
    if (empty) sp_strbuf_add(r->out, "\"\"", 2);
    return !r->failed;
}

static bool parse_alt(rx *r) {
    if (!parse_seq(r)) return false;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        sp_strbuf_add(r->out, " | ", 3);
        if (!parse_seq(r)) return false;
    }
    return true;
}

spindle_status sp_regex_to_gbnf(const char *re, size_t len, sp_strbuf *out,
                                spindle_error *err) {
    if (len > SP_GRAMMAR_MAX_SOURCE)
        return sp_fail(err, SPINDLE_ERR_LIMIT, "regex: over the size limit");
    if (!sp_utf8_valid(re, len)) return sp_fail(err, SPINDLE_ERR_FORMAT, "regex: invalid UTF-8");
    rx r = {.s = re, .p = re, .end = re + len, .out = out, .err = err};
    bool anchored_start = len > 0 && re[0] == '^';
    bool anchored_end = len > 0 && re[len - 1] == '$' && (len < 2 || re[len - 2] != '\\');
    /* Unanchored ends: any JSON string content may come before / after. */
    const char *any = "([^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}))*";
    if (!anchored_start) sp_strbuf_printf(out, "%s ", any);
    sp_strbuf_addc(out, '(');
    if (!parse_alt(&r)) return err ? err->status : SPINDLE_ERR_FORMAT;
    if (r.p < r.end) {
        rx_fail(&r, "unbalanced ')'");
        return err ? err->status : SPINDLE_ERR_FORMAT;
    }
    sp_strbuf_addc(out, ')');
    if (!anchored_end) sp_strbuf_printf(out, " %s", any);
    if (out->oom) return sp_fail(err, SPINDLE_ERR_MEMORY, "regex: out of memory");
    return SPINDLE_OK;
}
