/* The converter's building blocks: llama.cpp's built-in rules
 * (json-schema-to-grammar.cpp PRIMITIVE_RULES and STRING_FORMAT_RULES,
 * with its whitespace rule), JSON literals as GBNF strings, rule naming,
 * integer ranges as digit patterns, and the JSON pointer walk of local
 * $refs. */
#include "grammar/json_schema.h"

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
    /* A calendar date (what RFC 3339 and Python's date.fromisoformat
     * accept): each month's days, February 29 in leap years only, no
     * year 0000. */
    {"date", "date-year \"-\" date-month-day | date-leap-year \"-02-29\"",
     "date-year date-month-day date-leap-year"},
    {"date-year", "[1-9] [0-9]{3} | \"0\" [1-9] [0-9]{2} | \"00\" [1-9] [0-9] | \"000\" [1-9]", ""},
    {"date-month-day", "( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
                       "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
                       "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] )", ""},
    {"date-leap-year", "[0-9] [0-9] date-leap-yy | date-leap-yy \"00\"", "date-leap-yy"},
    {"date-leap-yy", "\"0\" [48] | [2468] [048] | [13579] [26]", ""},
    /* time is time-hms, optional milliseconds, then a zone: the four
     * shapes are 9, 13, 14 and 18 characters (the length bounds pick). */
    {"time", "time-hms ( \".\" [0-9]{3} )? ( \"Z\" | time-offset )", "time-hms time-offset"},
    {"time-hms", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9]", ""},
    {"time-offset", "( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9]", ""},
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

void js_uint_range(sp_strbuf *out, unsigned long long lo, long long hi) {
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
        js_uint_range(out, (unsigned long long)lo_abs, hi_abs);
        first = false;
    }
    if (!has_max || max >= 0) {
        sp_strbuf_add(out, first ? "" : " | ", first ? 0 : 3);
        js_uint_range(out, has_min && min > 0 ? (unsigned long long)min : 0,
                     has_max ? max : -1);
    }
    return sp_strbuf_addc(out, ')');
}

/* ------------------------------------------------------- local $refs */

bool js_pointer_target(const cJSON *root, const char *ref, const cJSON **out) {
    *out = NULL;
    if (ref[0] != '#') return false;
    const cJSON *target = root;
    const char *p = ref + 1;
    char seg[256];
    while (*p == '/') {
        p++;
        size_t n = strcspn(p, "/");
        size_t k = 0, i = 0;
        for (; i < n && k + 1 < sizeof seg; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                seg[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                seg[k++] = p[i];
            }
        }
        seg[k] = 0;
        /* An array index is digits without a leading zero (RFC 6901), read
         * only when short enough for an int: atoi("1x") is 1, and atoi of
         * a longer number is undefined. A truncated segment names
         * nothing. */
        size_t digits = strspn(seg, "0123456789");
        bool index = digits == k && k >= 1 && k <= 9 && (seg[0] != '0' || k == 1);
        if (i < n) target = NULL;
        else if (cJSON_IsArray(target))
            target = index ? cJSON_GetArrayItem(target, (int)strtol(seg, NULL, 10)) : NULL;
        else target = cJSON_GetObjectItemCaseSensitive(target, seg);
        if (!target) return true;
        p += n;
    }
    if (*p) return false;
    *out = target;
    return true;
}

static const cJSON *anchor_in(const cJSON *s, const char *name, int depth) {
    if (depth > 256 || !(cJSON_IsObject(s) || cJSON_IsArray(s))) return NULL;
    const cJSON *a = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "$anchor") : NULL;
    const cJSON *d = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "$dynamicAnchor") : NULL;
    if ((cJSON_IsString(a) && !strcmp(a->valuestring, name)) ||
        (cJSON_IsString(d) && !strcmp(d->valuestring, name)))
        return s;
    const cJSON *it, *hit = NULL;
    cJSON_ArrayForEach(it, s)
        if (!hit) hit = anchor_in(it, name, depth + 1);
    return hit;
}

const cJSON *js_anchor_target(const cJSON *root, const char *name) {
    return anchor_in(root, name, 0);
}

static bool nested_id(const cJSON *s, int depth) {
    const cJSON *it;
    cJSON_ArrayForEach(it, s) {
        if (depth > 0 && it->string && !strcmp(it->string, "$id") && cJSON_IsString(it)) return true;
        if ((cJSON_IsObject(it) || cJSON_IsArray(it)) && depth < 256 && nested_id(it, depth + 1)) return true;
    }
    return false;
}

bool js_has_nested_resource(const cJSON *root) {
    return nested_id(root, 0);
}
