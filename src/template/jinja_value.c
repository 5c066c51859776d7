/* Jinja values with Python semantics: reference counting, truthiness,
 * equality, str()/repr() and json.dumps() output, and UTF-8 helpers. The
 * printing code reproduces CPython byte for byte (float repr, string repr
 * quoting, json escaping) because chat templates print these directly. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "template/jinja_impl.h"

/* ------------------------------------------------------------ value budget */

static _Thread_local jx_budget *current_budget;

void jx_budget_enter(jx_budget *b) { current_budget = b; }
void jx_budget_leave(void) { current_budget = NULL; }
jx_budget *jx_budget_current(void) { return current_budget; }

/* Count `bytes` more for `o`; false (budget marked exceeded) past it. */
static bool charge(jx_obj *o, size_t bytes) {
    jx_budget *b = current_budget;
    if (!b) return true;
    if (bytes > b->max_live - b->live) {
        b->exceeded = true;
        return false;
    }
    b->live += bytes;
    o->charged += bytes;
    return true;
}

static void uncharge(jx_obj *o) {
    jx_budget *b = current_budget;
    if (b) b->live -= o->charged < b->live ? o->charged : b->live;
}

sp_strbuf jx_strbuf(void) {
    return (sp_strbuf){.limit = current_budget ? current_budget->max_string : 0};
}

bool jx_strbuf_ok(const sp_strbuf *b) {
    if (b->overflow && current_budget) current_budget->exceeded = true;
    return !b->oom && !b->overflow;
}

/* ------------------------------------------------------------ ref counting */

jx_value jx_ref(jx_value v) {
    if (v.t >= JX_STR) v.u.o->rc++;
    return v;
}

void jx_unref(jx_value v) {
    if (v.t < JX_STR) return;
    jx_obj *o = v.u.o;
    if (--o->rc > 0) return;
    switch (o->type) {
    case JX_STR: free(o->u.str.s); break;
    case JX_LIST:
        for (size_t i = 0; i < o->u.list.n; i++) jx_unref(o->u.list.v[i]);
        free(o->u.list.v);
        break;
    case JX_DICT:
    case JX_NS:
        for (size_t i = 0; i < o->u.dict.n; i++) {
            jx_unref(o->u.dict.k[i]);
            jx_unref(o->u.dict.v[i]);
        }
        free(o->u.dict.k);
        free(o->u.dict.v);
        break;
    case JX_FUNC: jx_unref(o->u.fn.self); break;
    default: break;
    }
    uncharge(o);
    free(o);
}

static jx_obj *obj_new(jx_type t) {
    jx_obj *o = calloc(1, sizeof *o);
    if (o && !charge(o, sizeof *o)) {
        free(o);
        return NULL;
    }
    if (o) {
        o->rc = 1;
        o->type = t;
    }
    return o;
}

bool jx_str_new(const char *s, size_t len, jx_value *out) {
    if (current_budget && len > current_budget->max_string) {
        current_budget->exceeded = true;
        return false;
    }
    jx_obj *o = obj_new(JX_STR);
    char *d = o && charge(o, len + 1) ? malloc(len + 1) : NULL;
    if (!o || !d) {
        if (o) uncharge(o);
        free(o);
        free(d);
        return false;
    }
    if (len) memcpy(d, s, len);
    d[len] = '\0';
    o->u.str.s = d;
    o->u.str.len = len;
    out->t = JX_STR;
    out->u.o = o;
    return true;
}

bool jx_str_cstr(const char *s, jx_value *out) { return jx_str_new(s, strlen(s), out); }

bool jx_list_new(size_t cap, bool tuple, jx_value *out) {
    jx_obj *o = obj_new(JX_LIST);
    if (!o) return false;
    if (cap) {
        o->u.list.v = charge(o, cap * sizeof(jx_value)) ? malloc(cap * sizeof(jx_value)) : NULL;
        if (!o->u.list.v) {
            uncharge(o);
            free(o);
            return false;
        }
        o->u.list.cap = cap;
    }
    o->u.list.tuple = tuple;
    out->t = JX_LIST;
    out->u.o = o;
    return true;
}

bool jx_dict_new(jx_type type, jx_value *out) {
    jx_obj *o = obj_new(type);
    if (!o) return false;
    out->t = type;
    out->u.o = o;
    return true;
}

bool jx_list_push(jx_value list, jx_value item) {
    jx_obj *o = list.u.o;
    if (o->u.list.n == o->u.list.cap) {
        size_t cap = o->u.list.cap ? o->u.list.cap * 2 : 4;
        jx_value *v = charge(o, (cap - o->u.list.cap) * sizeof *v)
                          ? realloc(o->u.list.v, cap * sizeof *v) : NULL;
        if (!v) {
            jx_unref(item);
            return false;
        }
        o->u.list.v = v;
        o->u.list.cap = cap;
    }
    o->u.list.v[o->u.list.n++] = item;
    return true;
}

static bool key_eq(jx_value a, jx_value b) {
    if (a.t == JX_STR && b.t == JX_STR)
        return jx_slen(a) == jx_slen(b) && memcmp(jx_s(a), jx_s(b), jx_slen(a)) == 0;
    return jx_equal(a, b);
}

const jx_value *jx_dict_get(jx_value dict, jx_value key) {
    jx_obj *o = dict.u.o;
    for (size_t i = 0; i < o->u.dict.n; i++)
        if (key_eq(o->u.dict.k[i], key)) return &o->u.dict.v[i];
    return NULL;
}

const jx_value *jx_dict_get_cstr(jx_value dict, const char *key, size_t len) {
    jx_obj *o = dict.u.o;
    for (size_t i = 0; i < o->u.dict.n; i++) {
        jx_value k = o->u.dict.k[i];
        if (k.t == JX_STR && jx_slen(k) == len && memcmp(jx_s(k), key, len) == 0)
            return &o->u.dict.v[i];
    }
    return NULL;
}

bool jx_dict_set(jx_value dict, jx_value key, jx_value val) {
    jx_obj *o = dict.u.o;
    for (size_t i = 0; i < o->u.dict.n; i++)
        if (key_eq(o->u.dict.k[i], key)) {
            jx_unref(o->u.dict.v[i]);
            jx_unref(key);
            o->u.dict.v[i] = val;
            return true;
        }
    if (o->u.dict.n == o->u.dict.cap) {
        size_t cap = o->u.dict.cap ? o->u.dict.cap * 2 : 8;
        jx_value *k = charge(o, 2 * (cap - o->u.dict.cap) * sizeof *k)
                          ? realloc(o->u.dict.k, cap * sizeof *k) : NULL;
        if (k) o->u.dict.k = k;
        jx_value *v = k ? realloc(o->u.dict.v, cap * sizeof *v) : NULL;
        if (v) o->u.dict.v = v;
        if (!k || !v) {
            jx_unref(key);
            jx_unref(val);
            return false;
        }
        o->u.dict.cap = cap;
    }
    o->u.dict.k[o->u.dict.n] = key;
    o->u.dict.v[o->u.dict.n++] = val;
    return true;
}

bool jx_dict_set_cstr(jx_value dict, const char *key, jx_value val) {
    jx_value k;
    if (!jx_str_cstr(key, &k)) {
        jx_unref(val);
        return false;
    }
    return jx_dict_set(dict, k, val);
}

/* -------------------------------------------------------------- semantics */

bool jx_truthy(jx_value v) {
    switch (v.t) {
    case JX_UNDEF:
    case JX_NONE: return false;
    case JX_BOOL: return v.u.b;
    case JX_INT: return v.u.i != 0;
    case JX_FLOAT: return v.u.f != 0.0;
    case JX_STR: return jx_slen(v) > 0;
    case JX_LIST: return v.u.o->u.list.n > 0 || v.u.o->u.list.iterator;
    case JX_DICT: return v.u.o->u.dict.n > 0;
    default: return true;
    }
}

bool jx_equal(jx_value a, jx_value b) {
    if (jx_is_num(a) && jx_is_num(b)) {
        if (a.t != JX_FLOAT && b.t != JX_FLOAT) {
            int64_t x = jx_int_of(a), y = jx_int_of(b);
            return x == y;
        }
        return jx_num_of(a) == jx_num_of(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JX_UNDEF:
    case JX_NONE: return true;
    case JX_STR: return key_eq(a, b);
    case JX_LIST: {
        jx_obj *x = a.u.o, *y = b.u.o;
        if (x->u.list.n != y->u.list.n) return false;
        for (size_t i = 0; i < x->u.list.n; i++)
            if (!jx_equal(x->u.list.v[i], y->u.list.v[i])) return false;
        return true;
    }
    case JX_DICT: {
        jx_obj *x = a.u.o, *y = b.u.o;
        if (x->u.dict.n != y->u.dict.n) return false;
        for (size_t i = 0; i < x->u.dict.n; i++) {
            const jx_value *o = jx_dict_get(b, x->u.dict.k[i]);
            if (!o || !jx_equal(x->u.dict.v[i], *o)) return false;
        }
        return true;
    }
    default: return a.u.o == b.u.o;
    }
}

const char *jx_type_name(jx_value v) {
    switch (v.t) {
    case JX_UNDEF: return "Undefined";
    case JX_NONE: return "NoneType";
    case JX_BOOL: return "bool";
    case JX_INT: return "int";
    case JX_FLOAT: return "float";
    case JX_STR: return v.u.o->u.str.markup ? "Markup" : "str";
    case JX_LIST:
        if (v.u.o->u.list.iterator) return v.u.o->u.list.iterator;
        return v.u.o->u.list.tuple ? "tuple" : "list";
    case JX_DICT: return "dict";
    case JX_NS: return "Namespace";
    case JX_FUNC: return "function";
    }
    return "object";
}

/* Python's str.isspace(). */
bool jx_is_space_cp(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 ||
           c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---------------------------------------------------------------- printing */

/* float.__repr__: the shortest digits that round-trip, laid out as CPython
 * does (scientific below 1e-4 and from 1e16 on). */
void jx_format_float(double d, char out[40]) {
    if (isnan(d)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(d)) {
        strcpy(out, d < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp: [-]D[.DDD]e[+-]XX */
    char digits[24];
    int nd = 0, exp10;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char *o = out;
    if (neg) *o++ = '-';
    if (exp10 < -4 || exp10 >= 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return;
    }
    if (exp10 < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -exp10 - 1; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else {
        for (int i = 0; i <= exp10; i++) *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > exp10 + 1) {
            memcpy(o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += nd - exp10 - 1;
        } else {
            *o++ = '0';
        }
    }
    *o = '\0';
}

static bool printable_cp(uint32_t c) {
    if (c == ' ') return true;
    if (c < 0x20 || c == 0x7F) return false;
    if (c < 0x7F) return true;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    switch (cat) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default: return true;
    }
}

static bool write_str_repr(sp_strbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sp_strbuf_addc(b, q);
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t c = sp_utf8_next(s + i, n - i, &k);
        if (c == (uint32_t)q || c == '\\') {
            sp_strbuf_addc(b, '\\');
            sp_strbuf_addc(b, (char)c);
        } else if (c == '\n') sp_strbuf_add(b, "\\n", 2);
        else if (c == '\r') sp_strbuf_add(b, "\\r", 2);
        else if (c == '\t') sp_strbuf_add(b, "\\t", 2);
        else if (printable_cp(c)) sp_strbuf_add(b, s + i, k);
        else if (c < 0x100) sp_strbuf_printf(b, "\\x%02x", c);
        else if (c < 0x10000) sp_strbuf_printf(b, "\\u%04x", c);
        else sp_strbuf_printf(b, "\\U%08x", c);
        i += k;
    }
    return sp_strbuf_addc(b, q);
}

static bool write_value(sp_strbuf *b, jx_value v, bool repr, int depth) {
    char num[40];
    if (depth > 200) return sp_strbuf_add(b, "...", 3);
    switch (v.t) {
    case JX_UNDEF: return repr ? sp_strbuf_add(b, "Undefined", 9) : true;
    case JX_NONE: return sp_strbuf_add(b, "None", 4);
    case JX_BOOL: return v.u.b ? sp_strbuf_add(b, "True", 4) : sp_strbuf_add(b, "False", 5);
    case JX_INT: return sp_strbuf_printf(b, "%lld", (long long)v.u.i);
    case JX_FLOAT:
        jx_format_float(v.u.f, num);
        return sp_strbuf_add(b, num, strlen(num));
    case JX_STR:
        return repr ? write_str_repr(b, jx_s(v), jx_slen(v)) : sp_strbuf_add(b, jx_s(v), jx_slen(v));
    case JX_LIST: {
        jx_obj *o = v.u.o;
        /* jinja2 prints the iterator's address, which no output can match. */
        if (o->u.list.iterator) {
            sp_strbuf_addc(b, '<');
            sp_strbuf_add(b, o->u.list.iterator, strlen(o->u.list.iterator));
            return sp_strbuf_add(b, " object>", 8);
        }
        bool t = o->u.list.tuple;
        sp_strbuf_addc(b, t ? '(' : '[');
        for (size_t i = 0; i < o->u.list.n; i++) {
            if (i) sp_strbuf_add(b, ", ", 2);
            write_value(b, o->u.list.v[i], true, depth + 1);
        }
        if (t && o->u.list.n == 1) sp_strbuf_addc(b, ',');
        return sp_strbuf_addc(b, t ? ')' : ']');
    }
    case JX_DICT:
    case JX_NS: {
        jx_obj *o = v.u.o;
        if (v.t == JX_NS) sp_strbuf_add(b, "<Namespace ", 11);
        sp_strbuf_addc(b, '{');
        for (size_t i = 0; i < o->u.dict.n; i++) {
            if (i) sp_strbuf_add(b, ", ", 2);
            write_value(b, o->u.dict.k[i], true, depth + 1);
            sp_strbuf_add(b, ": ", 2);
            write_value(b, o->u.dict.v[i], true, depth + 1);
        }
        sp_strbuf_addc(b, '}');
        return v.t == JX_NS ? sp_strbuf_addc(b, '>') : true;
    }
    case JX_FUNC:
        return sp_strbuf_printf(b, "<function %s>", v.u.o->u.fn.name ? v.u.o->u.fn.name : "?");
    }
    return true;
}

bool jx_write_str(sp_strbuf *b, jx_value v) { return write_value(b, v, false, 0); }
bool jx_write_repr(sp_strbuf *b, jx_value v) { return write_value(b, v, true, 0); }

bool jx_to_str(jx_value v, jx_value *out) {
    if (v.t == JX_STR) {
        *out = jx_ref(v);
        return true;
    }
    sp_strbuf b = jx_strbuf();
    if (!jx_write_str(&b, v) && !jx_strbuf_ok(&b)) {
        sp_strbuf_free(&b);
        return false;
    }
    bool ok = jx_str_new(b.p ? b.p : "", b.len, out);
    sp_strbuf_free(&b);
    return ok;
}

static void write_json_str(sp_strbuf *b, const char *s, size_t n, bool ascii) {
    sp_strbuf_addc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
                esc = tmp;
            }
        }
        if (ascii && c >= 0x80) {
            /* ensure_ascii: \uXXXX, as UTF-16 surrogate pairs above U+FFFF. */
            int len;
            uint32_t cp = sp_utf8_next(s + i, n - i, &len);
            sp_strbuf_add(b, s + run, i - run);
            if (cp >= 0x10000)
                sp_strbuf_printf(b, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                                 0xDC00 + ((cp - 0x10000) & 0x3FF));
            else sp_strbuf_printf(b, "\\u%04x", cp);
            i += (size_t)len - 1;
            run = i + 1;
        } else if (esc) {
            sp_strbuf_add(b, s + run, i - run);
            sp_strbuf_add(b, esc, strlen(esc));
            run = i + 1;
        }
    }
    sp_strbuf_add(b, s + run, n - run);
    sp_strbuf_addc(b, '"');
}

static void json_newline(sp_strbuf *b, const char *indent, int level) {
    sp_strbuf_addc(b, '\n');
    for (int i = 0; i < level; i++) sp_strbuf_add(b, indent, strlen(indent));
}

static int cmp_keys(const void *x, const void *y) {
    const jx_value *a = *(const jx_value *const *)x, *b = *(const jx_value *const *)y;
    size_t la = jx_slen(*a), lb = jx_slen(*b);
    int c = memcmp(jx_s(*a), jx_s(*b), la < lb ? la : lb);
    return c ? c : (la < lb ? -1 : la > lb);
}

static const char *not_serializable(const char *iterator) {
    static const char *const messages[][2] = {
        {JX_GENERATOR, "Object of type generator is not JSON serializable"},
        {JX_LIST_REVERSE, "Object of type list_reverseiterator is not JSON serializable"},
        {JX_DICT_REVERSE, "Object of type dict_reversekeyiterator is not JSON serializable"}};
    for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++)
        if (!strcmp(messages[i][0], iterator)) return messages[i][1];
    return "Object of type iterator is not JSON serializable";
}

bool jx_write_json(sp_strbuf *b, jx_value v, const jx_json_style *st, int depth,
                   const char **why) {
    const char *indent = st->indent, *item_sep = st->item_sep;
    char num[40];
    if (depth > 500) {
        *why = "maximum recursion depth exceeded while encoding a JSON object";
        return false;
    }
    switch (v.t) {
    case JX_NONE: return sp_strbuf_add(b, "null", 4), true;
    case JX_BOOL: return sp_strbuf_add(b, v.u.b ? "true" : "false", v.u.b ? 4 : 5), true;
    case JX_INT: return sp_strbuf_printf(b, "%lld", (long long)v.u.i), true;
    case JX_FLOAT:
        if (isnan(v.u.f)) strcpy(num, "NaN");
        else if (isinf(v.u.f)) strcpy(num, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jx_format_float(v.u.f, num);
        sp_strbuf_add(b, num, strlen(num));
        return true;
    case JX_STR: write_json_str(b, jx_s(v), jx_slen(v), st->ensure_ascii); return true;
    case JX_LIST: {
        jx_obj *o = v.u.o;
        if (o->u.list.iterator) {
            *why = not_serializable(o->u.list.iterator);
            return false;
        }
        if (o->u.list.n == 0) return sp_strbuf_add(b, "[]", 2), true;
        sp_strbuf_addc(b, '[');
        for (size_t i = 0; i < o->u.list.n; i++) {
            if (i) sp_strbuf_add(b, item_sep, strlen(item_sep));
            if (indent) json_newline(b, indent, depth + 1);
            if (!jx_write_json(b, o->u.list.v[i], st, depth + 1, why))
                return false;
        }
        if (indent) json_newline(b, indent, depth);
        sp_strbuf_addc(b, ']');
        return true;
    }
    case JX_DICT: {
        jx_obj *o = v.u.o;
        if (o->u.dict.n == 0) return sp_strbuf_add(b, "{}", 2), true;
        size_t n = o->u.dict.n;
        /* Keys become strings first, as json.dumps does for int/float/bool
         * /None keys, so that sorting compares what is written. */
        jx_value *keys = calloc(n, sizeof *keys);
        const jx_value **order = calloc(n, sizeof *order);
        bool ok = keys && order;
        for (size_t i = 0; ok && i < n; i++) {
            jx_value k = o->u.dict.k[i];
            if (k.t == JX_STR) keys[i] = jx_ref(k);
            else if (k.t == JX_NONE) ok = jx_str_cstr("null", &keys[i]);
            else if (k.t == JX_BOOL) ok = jx_str_cstr(k.u.b ? "true" : "false", &keys[i]);
            else if (k.t == JX_INT || k.t == JX_FLOAT) ok = jx_to_str(k, &keys[i]);
            else {
                *why = "keys must be str, int, float, bool or None";
                ok = false;
                keys[i] = JX_UNDEFINED;
            }
            order[i] = &keys[i];
        }
        if (ok && st->sort_keys) qsort(order, n, sizeof *order, cmp_keys);
        if (ok) sp_strbuf_addc(b, '{');
        for (size_t j = 0; ok && j < n; j++) {
            size_t i = (size_t)(order[j] - keys);
            if (j) sp_strbuf_add(b, item_sep, strlen(item_sep));
            if (indent) json_newline(b, indent, depth + 1);
            write_json_str(b, jx_s(keys[i]), jx_slen(keys[i]), st->ensure_ascii);
            sp_strbuf_add(b, st->key_sep, strlen(st->key_sep));
            ok = jx_write_json(b, o->u.dict.v[i], st, depth + 1, why);
        }
        if (ok && indent) json_newline(b, indent, depth);
        if (ok) sp_strbuf_addc(b, '}');
        for (size_t i = 0; keys && i < n; i++) jx_unref(keys[i]);
        free(keys);
        free(order);
        if (!ok && !*why) *why = "out of memory";
        return ok;
    }
    case JX_UNDEF: *why = "Object of type Undefined is not JSON serializable"; return false;
    case JX_NS: *why = "Object of type Namespace is not JSON serializable"; return false;
    default: *why = "Object of type function is not JSON serializable"; return false;
    }
}

/* ------------------------------------------------------------------- cJSON */

bool jx_from_json(const cJSON *j, jx_value *out, int depth) {
    if (depth > 500) return false;
    if (!j || cJSON_IsNull(j)) {
        *out = JX_NONEV;
        return true;
    }
    if (cJSON_IsBool(j)) {
        *out = jx_bool(cJSON_IsTrue(j));
        return true;
    }
    if (cJSON_IsNumber(j)) {
        /* Integral values are ints unless sp_json_parse saw a float literal. */
        double d = j->valuedouble;
        if (!(j->type & SP_JSON_FLOAT_FLAG) && d == floor(d) && fabs(d) < 9007199254740992.0)
            *out = jx_int((int64_t)d);
        else *out = jx_float(d);
        return true;
    }
    if (cJSON_IsString(j)) return jx_str_cstr(j->valuestring ? j->valuestring : "", out);
    if (cJSON_IsArray(j)) {
        if (!jx_list_new(0, false, out)) return false;
        for (const cJSON *c = j->child; c; c = c->next) {
            jx_value v;
            if (!jx_from_json(c, &v, depth + 1) || !jx_list_push(*out, v)) {
                jx_unref(*out);
                return false;
            }
        }
        return true;
    }
    if (cJSON_IsObject(j)) {
        if (!jx_dict_new(JX_DICT, out)) return false;
        for (const cJSON *c = j->child; c; c = c->next) {
            jx_value v;
            if (!jx_from_json(c, &v, depth + 1) ||
                !jx_dict_set_cstr(*out, c->string ? c->string : "", v)) {
                jx_unref(*out);
                return false;
            }
        }
        return true;
    }
    *out = JX_NONEV;
    return true;
}
