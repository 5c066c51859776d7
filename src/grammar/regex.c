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

/* Lengths count characters (code points, as minLength does); RX_INF is
 * no upper bound. */
#define RX_INF (-1L)

/* What the top level (outside every group) looked like, for cutting the
 * pattern to a length range. */
typedef struct rx_top {
    int alts;             /* top-level alternatives */
    bool anchored;        /* the first one starts with ^ and ends with $ */
    int atoms;            /* the first alternative's atoms */
    int variable;         /* its one atom of variable length, -1: none, -2: more */
    long width;           /* that atom's length per repetition (fixed) */
    long rep_min, rep_max;  /* and its quantifier's counts */
} rx_top;

typedef struct rx {
    const char *s, *p, *end;
    sp_strbuf *out;
    int depth;
    spindle_error *err;
    bool failed;
    rx_top top;
    /* Emitting: the top-level atom whose quantifier is replaced (-1:
     * none) and the counts it gets. */
    int cut_atom;
    long cut_min, cut_max;
} rx;

static long len_add(long a, long b) { return a == RX_INF || b == RX_INF ? RX_INF : a + b; }
static long len_mul(long a, long k) { return a == 0 || k == 0 ? 0 : a == RX_INF || k == RX_INF ? RX_INF : a * k; }
static long len_max(long a, long b) { return a == RX_INF || b == RX_INF ? RX_INF : a > b ? a : b; }

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

/* A quantifier: its counts into *qmin / *qmax; written as they are, or as
 * the cut's counts where `cut` (the top-level atom being cut). */
static bool parse_quantifier(rx *r, long *qmin, long *qmax, bool cut) {
    char c = *r->p;
    sp_strbuf real = {0}, *out = r->out;
    if (cut) r->out = &real;
    if (c == '*' || c == '+' || c == '?') {
        r->p++;
        sp_strbuf_addc(r->out, c);
        *qmin = c == '+' ? 1 : 0;
        *qmax = c == '?' ? 1 : RX_INF;
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
        *qmin = m;
        *qmax = n < 0 ? RX_INF : n;
    }
    if (cut) {
        sp_strbuf_free(&real);
        r->out = out;
        if (r->cut_max == RX_INF) sp_strbuf_printf(r->out, "{%ld,}", r->cut_min);
        else sp_strbuf_printf(r->out, "{%ld,%ld}", r->cut_min, r->cut_max);
    }
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '{'))
        return rx_fail(r, "a quantifier cannot follow a quantifier");
    return true;
}

static bool parse_alt(rx *r, long *lo, long *hi);

/* After "(?": a non-capturing group's ':' or a named group's "<name>"
 * (both match what a plain group does); lookaround is refused. */
static bool group_prefix(rx *r) {
    if (r->end - r->p >= 2 && r->p[1] == ':') {
        r->p += 2;
        return true;
    }
    if (r->end - r->p >= 3 && r->p[1] == '<' && r->p[2] != '=' && r->p[2] != '!') {
        const char *q = r->p + 2;
        while (q < r->end && (*q == '_' || *q == '$' || ((*q | 0x20) >= 'a' && (*q | 0x20) <= 'z') ||
                              (*q >= '0' && *q <= '9')))
            q++;
        if (q > r->p + 2 && q < r->end && *q == '>') {
            r->p = q + 1;
            return true;
        }
        return rx_fail(r, "a named group's name must be letters, digits, _ or $");
    }
    return rx_fail(r, "lookaround is not supported");
}

/* One atom; its length range into *lo / *hi. */
static bool parse_atom(rx *r, long *lo, long *hi) {
    char c = *r->p;
    uint32_t cp;
    *lo = *hi = 1;
    if (c == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?' && !group_prefix(r)) return false;
        if (++r->depth > RX_MAX_DEPTH) return rx_fail(r, "groups nest too deeply");
        sp_strbuf_addc(r->out, '(');
        if (!parse_alt(r, lo, hi)) return false;
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

/* Any JSON string content: what an unanchored side of a pattern admits. */
static const char ANY[] = "([^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}))*";

/* One alternative: atoms and their quantifiers. At the top level (outside
 * groups) ^ may start it and $ end it, anchoring that alternative alone
 * (a pattern is a search: an unanchored side admits any text). */
static bool parse_seq(rx *r, long *lo, long *hi) {
    bool empty = true, top = r->depth == 0, first_top = top && r->top.alts++ == 0;
    bool anchor_start = top && r->p < r->end && *r->p == '^', anchor_end = false;
    if (anchor_start) r->p++;
    else if (top) sp_strbuf_printf(r->out, "%s ", ANY);
    *lo = 0;
    *hi = top && !anchor_start ? RX_INF : 0;
    int atom = 0;
    while (!r->failed && r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (*r->p == '^' || *r->p == '$') {
            if (!(top && *r->p == '$' && (r->p + 1 == r->end || r->p[1] == '|')))
                return rx_fail(r, "anchors are supported only at the start and end of the pattern "
                               "or of its top-level alternatives");
            anchor_end = true;
            r->p++;
            continue;
        }
        if (!empty) sp_strbuf_addc(r->out, ' ');
        long alo, ahi, qmin = 1, qmax = 1;
        if (!parse_atom(r, &alo, &ahi)) return false;
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{') &&
            !parse_quantifier(r, &qmin, &qmax, top && r->cut_atom == atom))
            return false;
        if (first_top && len_mul(alo, qmin) != len_mul(ahi, qmax)) {
            r->top.variable = r->top.variable == -1 && alo == ahi ? atom : -2;
            r->top.width = alo;
            r->top.rep_min = qmin;
            r->top.rep_max = qmax;
        }
        *lo = len_add(*lo, len_mul(alo, qmin));
        *hi = len_add(*hi, len_mul(ahi, qmax));
        atom++;
        empty = false;
    }
    if (empty) sp_strbuf_add(r->out, "\"\"", 2);
    if (top && !anchor_end) {
        sp_strbuf_printf(r->out, " %s", ANY);
        *hi = RX_INF;
    }
    if (first_top) {
        r->top.anchored = anchor_start && anchor_end;
        r->top.atoms = atom;
    }
    return !r->failed;
}

static bool parse_alt(rx *r, long *lo, long *hi) {
    if (!parse_seq(r, lo, hi)) return false;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        sp_strbuf_add(r->out, " | ", 3);
        long alo, ahi;
        if (!parse_seq(r, &alo, &ahi)) return false;
        *lo = alo < *lo ? alo : *lo;
        *hi = len_max(*hi, ahi);
    }
    return true;
}

/* The pattern into out; its length range into *lo / *hi. */
static spindle_status regex_emit(rx *r, long *lo, long *hi) {
    spindle_error *err = r->err;
    if (r->end - r->s > SP_GRAMMAR_MAX_SOURCE)
        return sp_fail(err, SPINDLE_ERR_LIMIT, "regex: over the size limit");
    if (!sp_utf8_valid(r->s, (size_t)(r->end - r->s)))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "regex: invalid UTF-8");
    r->top.variable = -1;
    sp_strbuf_addc(r->out, '(');
    if (!parse_alt(r, lo, hi)) return err ? err->status : SPINDLE_ERR_FORMAT;
    if (r->p < r->end) {
        rx_fail(r, "unbalanced ')'");
        return err ? err->status : SPINDLE_ERR_FORMAT;
    }
    sp_strbuf_addc(r->out, ')');
    if (r->out->oom) return sp_fail(err, SPINDLE_ERR_MEMORY, "regex: out of memory");
    return SPINDLE_OK;
}

spindle_status sp_regex_to_gbnf(const char *re, size_t len, sp_strbuf *out,
                                spindle_error *err) {
    return sp_regex_to_gbnf_lengths(re, len, 0, -1, out, err);
}

static long ceil_div(long a, long b) { return a <= 0 ? 0 : (a + b - 1) / b; }

spindle_status sp_regex_to_gbnf_lengths(const char *re, size_t len, long min_len,
                                        long max_len, sp_strbuf *out, spindle_error *err) {
    sp_strbuf first = {0};
    rx r = {.s = re, .p = re, .end = re + len, .out = &first, .err = err, .cut_atom = -1};
    long lo, hi;
    spindle_status st = regex_emit(&r, &lo, &hi);
    /* Bounds the pattern's own lengths already meet change nothing. */
    bool within = lo >= min_len && (max_len < 0 || (hi != RX_INF && hi <= max_len));
    if (st || within) {
        if (!st) sp_strbuf_add(out, first.p, first.len);
        sp_strbuf_free(&first);
        return st ? st : out->oom ? sp_fail(err, SPINDLE_ERR_MEMORY, "regex: out of memory") : SPINDLE_OK;
    }
    sp_strbuf_free(&first);
    /* An anchored pattern with one repeated part of fixed width and the
     * rest fixed: the length range is that part's count range. */
    rx_top t = r.top;
    if (t.alts != 1 || !t.anchored || t.variable < 0 || t.width < 1)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "with minLength/maxLength, a pattern is compiled "
                       "only where its lengths already meet them or it is ^...$ with one repeated "
                       "part (other cuts need an intersection of languages)");
    long fixed = lo - t.width * t.rep_min;
    long cmin = ceil_div(min_len - fixed, t.width), cmax = t.rep_max;
    if (cmin < t.rep_min) cmin = t.rep_min;
    if (max_len >= 0) {
        long m = max_len < fixed ? -1 : (max_len - fixed) / t.width;
        cmax = cmax == RX_INF || m < cmax ? m : cmax;
    }
    if (cmax != RX_INF && cmax < cmin)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "no string of the pattern has a length within "
                       "minLength/maxLength");
    if (cmin > SP_GRAMMAR_MAX_REPEAT || cmax > SP_GRAMMAR_MAX_REPEAT)
        return sp_fail(err, SPINDLE_ERR_LIMIT, "with minLength/maxLength, the pattern's repeated "
                       "part would repeat past %d times", SP_GRAMMAR_MAX_REPEAT);
    rx cut = {.s = re, .p = re, .end = re + len, .out = out, .err = err,
              .cut_atom = t.variable, .cut_min = cmin, .cut_max = cmax};
    return regex_emit(&cut, &lo, &hi);
}
