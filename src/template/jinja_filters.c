/* Jinja filters and tests, with jinja2's semantics and transformers' tojson
 * (json.dumps with ensure_ascii=False and its indent / separators /
 * sort_keys arguments). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_impl.h"
#include "template/jinja_str.h"

bool jx_dict_items(jx_ctx *ctx, jx_value d, jx_value *out);

static bool is_name(const char *a, const char *b) { return strcmp(a, b) == 0; }

static bool as_str(jx_ctx *ctx, jx_value v, jx_value *out) {
    return jx_to_str(v, out) || jx_fail(ctx, "out of memory");
}

static bool length_of(jx_ctx *ctx, jx_value v, int64_t *n) {
    switch (v.t) {
    case JX_UNDEF: *n = 0; return true;
    case JX_STR: *n = (int64_t)sp_utf8_count(jx_s(v), jx_slen(v)); return true;
    case JX_LIST:
        if (v.u.o->u.list.iterator) break;
        *n = (int64_t)v.u.o->u.list.n;
        return true;
    case JX_DICT: *n = (int64_t)v.u.o->u.dict.n; return true;
    default: break;
    }
    return jx_fail(ctx, "object of type '%s' has no len()", jx_type_name(v));
}

/* Attribute lookup by a dotted path ("a.b" or "0"), as Jinja's
 * make_attrgetter does. */
static bool attr_path(jx_ctx *ctx, jx_value v, jx_value path, jx_value *out) {
    if (path.t != JX_STR) return jx_getattr(ctx, v, path, out);
    const char *p = jx_s(path);
    size_t n = jx_slen(path);
    jx_value cur = jx_ref(v);
    for (size_t i = 0; i <= n;) {
        const char *dot = memchr(p + i, '.', n - i);
        size_t e = dot ? (size_t)(dot - p) : n;
        jx_value key, next;
        bool digit = e > i;
        for (size_t k = i; k < e; k++) digit = digit && p[k] >= '0' && p[k] <= '9';
        if (digit) key = jx_int(strtoll(p + i, NULL, 10));
        else if (!jx_str_new(p + i, e - i, &key)) return jx_unref(cur), jx_fail(ctx, "out of memory");
        bool ok = jx_getattr(ctx, cur, key, &next);
        jx_unref(key);
        jx_unref(cur);
        if (!ok) return false;
        cur = next;
        i = e + 1;
        if (!dot) break;
    }
    *out = cur;
    return true;
}

/* Sort key comparison shared by sort, dictsort, unique, min and max. */
static int cmp_values(jx_ctx *ctx, jx_value a, jx_value b, bool case_sensitive, bool *ok) {
    jx_value la = jx_ref(a), lb = jx_ref(b);
    if (!case_sensitive && a.t == JX_STR) jx_unref(la), *ok = jx_case(ctx, a, 'l', &la);
    if (!case_sensitive && b.t == JX_STR && *ok) jx_unref(lb), *ok = jx_case(ctx, b, 'l', &lb);
    int r = 0;
    if (*ok) {
        bool lt = false, gt = false;
        *ok = jx_compare(ctx, '<', la, lb, &lt) && jx_compare(ctx, '>', la, lb, &gt);
        r = lt ? -1 : gt ? 1 : 0;
    }
    jx_unref(la);
    jx_unref(lb);
    return r;
}

typedef struct sort_item {
    jx_value key, item;
} sort_item;

/* Stable merge sort (Python's sort is stable; qsort is not). */
static bool sort_items(jx_ctx *ctx, sort_item *v, size_t n, bool cs, bool reverse) {
    if (n < 2) return true;
    sort_item *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return jx_fail(ctx, "out of memory");
    bool ok = true;
    for (size_t w = 1; w < n && ok; w *= 2) {
        for (size_t lo = 0; lo < n && ok; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi && ok) {
                int c = cmp_values(ctx, v[j].key, v[i].key, cs, &ok);
                if (reverse) c = -c;
                tmp[k++] = c < 0 ? v[j++] : v[i++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        /* A failed comparison leaves this pass unfinished: keep the last
         * complete permutation so that every item is released once. */
        if (ok) memcpy(v, tmp, n * sizeof *v);
    }
    free(tmp);
    return ok;
}

static bool f_sort(jx_ctx *ctx, jx_value v, const jx_args *a, bool dictsort, jx_value *out) {
    jx_value items;
    bool reverse = false, cs = false;
    const jx_value *r = jx_arg(a, dictsort ? 2 : 0, "reverse"),
                   *c = jx_arg(a, dictsort ? 0 : 1, "case_sensitive"),
                   *attr = dictsort ? NULL : jx_arg(a, 2, "attribute"),
                   *by = dictsort ? jx_arg(a, 1, "by") : NULL;
    if (r) reverse = jx_truthy(*r);
    if (c) cs = jx_truthy(*c);
    bool by_value = by && by->t == JX_STR && !strcmp(jx_s(*by), "value");
    if (dictsort) {
        if (!jx_is_map(v)) return jx_fail(ctx, "dictsort expects a mapping");
        if (!jx_dict_items(ctx, v, &items)) return false;
    } else if (!jx_to_list(ctx, v, &items)) {
        return false;
    }
    size_t n = items.u.o->u.list.n;
    sort_item *s = calloc(n ? n : 1, sizeof *s);
    bool ok = s != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        jx_value it = items.u.o->u.list.v[i];
        s[i].item = it;
        if (dictsort) s[i].key = jx_ref(it.u.o->u.list.v[by_value ? 1 : 0]);
        else if (attr) ok = attr_path(ctx, it, *attr, &s[i].key);
        else s[i].key = jx_ref(it);
    }
    ok = ok && sort_items(ctx, s, n, cs, reverse);
    if (ok && !jx_list_new(n, false, out)) ok = jx_fail(ctx, "out of memory");
    for (size_t i = 0; ok && i < n; i++) jx_list_push(*out, jx_ref(s[i].item));
    for (size_t i = 0; s && i < n; i++) jx_unref(s[i].key);
    free(s);
    jx_unref(items);
    return ok || (s ? false : jx_fail(ctx, "out of memory"));
}

static bool f_tojson(jx_ctx *ctx, jx_value v, const jx_args *a, jx_value *out) {
    const jx_value *ea = jx_arg(a, 0, "ensure_ascii"), *ind = jx_arg(a, 1, "indent"),
                   *seps = jx_arg(a, 2, "separators"), *sk = jx_arg(a, 3, "sort_keys");
    char spaces[64];
    const char *indent = NULL, *item_sep = ", ", *key_sep = ": ";
    if (ind && ind->t == JX_INT) {
        int64_t k = ind->u.i < 0 ? 0 : ind->u.i > 63 ? 63 : ind->u.i;
        memset(spaces, ' ', (size_t)k);
        spaces[k] = '\0';
        indent = spaces;
    } else if (ind && ind->t == JX_STR) {
        indent = jx_s(*ind);
    } else if (ind && ind->t != JX_NONE) {
        return jx_fail(ctx, "tojson: indent must be an int or a string");
    }
    if (indent) item_sep = ",";
    if (seps && seps->t == JX_LIST && seps->u.o->u.list.n == 2 &&
        seps->u.o->u.list.v[0].t == JX_STR && seps->u.o->u.list.v[1].t == JX_STR) {
        item_sep = jx_s(seps->u.o->u.list.v[0]);
        key_sep = jx_s(seps->u.o->u.list.v[1]);
    } else if (seps && seps->t != JX_NONE) {
        return jx_fail(ctx, "tojson: separators must be a pair of strings");
    }
    jx_json_style style = {indent, item_sep, key_sep, sk && jx_truthy(*sk), ea && jx_truthy(*ea)};
    sp_strbuf b = jx_strbuf();
    const char *why = NULL;
    if (!jx_write_json(&b, v, &style, 0, &why)) {
        sp_strbuf_free(&b);
        return jx_fail(ctx, "%s", why ? why : "tojson failed");
    }
    return jx_str_from_buf(ctx, &b, out);
}

static bool f_indent(jx_ctx *ctx, jx_value v, const jx_args *a, jx_value *out) {
    const jx_value *w = jx_arg(a, 0, "width"), *first = jx_arg(a, 1, "first"),
                   *blank = jx_arg(a, 2, "blank");
    jx_value s, ind;
    if (!as_str(ctx, v, &s)) return false;
    if (w && w->t == JX_STR) ind = jx_ref(*w);
    else {
        int64_t k = w && w->t == JX_INT ? w->u.i : 4;
        char sp[256];
        if (k < 0) k = 0;
        if (k > 255) k = 255;
        memset(sp, ' ', (size_t)k);
        if (!jx_str_new(sp, (size_t)k, &ind)) return jx_unref(s), jx_fail(ctx, "out of memory");
    }
    /* Jinja appends "\n" so that splitlines() keeps a trailing empty line. */
    sp_strbuf src = jx_strbuf(), b = jx_strbuf();
    sp_strbuf_add(&src, jx_s(s), jx_slen(s));
    sp_strbuf_addc(&src, '\n');
    const char *p = src.p;
    size_t n = src.len, i = 0, line = 0;
    bool blank_too = blank && jx_truthy(*blank);
    while (i < n) {
        size_t next, e = jx_line_end(p, n, i, &next);
        if (line > 0) {
            sp_strbuf_addc(&b, '\n');
            if (blank_too || e > i) sp_strbuf_add(&b, jx_s(ind), jx_slen(ind));
        }
        sp_strbuf_add(&b, p + i, e - i);
        i = next;
        line++;
    }
    sp_strbuf_free(&src);
    jx_value r;
    bool ok = jx_str_from_buf(ctx, &b, &r);
    if (ok && first && jx_truthy(*first)) {
        sp_strbuf c = jx_strbuf();
        sp_strbuf_add(&c, jx_s(ind), jx_slen(ind));
        sp_strbuf_add(&c, jx_s(r), jx_slen(r));
        jx_unref(r);
        ok = jx_str_from_buf(ctx, &c, &r);
    }
    jx_unref(s);
    jx_unref(ind);
    if (ok) *out = r;
    return ok;
}

/* select / reject / selectattr / rejectattr. */
/* The items of a map/select/reject subject and the generator that will hold
 * the results. jinja2 iterates only a truthy subject ("if value:"), so none
 * and other falsy values give an empty result. */
static bool generator_start(jx_ctx *ctx, jx_value v, jx_value *items, jx_value *out) {
    bool ok = jx_truthy(v) ? jx_to_list(ctx, v, items)
                           : jx_list_new(0, false, items) || jx_fail(ctx, "out of memory");
    if (!ok) return false;
    if (!jx_list_new(0, false, out)) return jx_unref(*items), jx_fail(ctx, "out of memory");
    out->u.o->u.list.iterator = JX_GENERATOR;
    return true;
}

static bool f_select(jx_ctx *ctx, jx_value v, const jx_args *a, bool attr, bool keep, jx_value *out) {
    jx_value items;
    size_t first_test = attr ? 1 : 0;
    if (attr && a->npos < 1) return jx_fail(ctx, "selectattr needs an attribute name");
    const char *test = a->npos > first_test && a->pos[first_test].t == JX_STR ? jx_s(a->pos[first_test]) : NULL;
    if (a->npos > first_test && !test) return jx_fail(ctx, "test name must be a string");
    jx_args targs = {a->pos + first_test + 1, a->npos > first_test + 1 ? a->npos - first_test - 1 : 0,
                     NULL, NULL, 0};
    if (!generator_start(ctx, v, &items, out)) return false;
    for (size_t i = 0; i < items.u.o->u.list.n; i++) {
        jx_value it = items.u.o->u.list.v[i], subject;
        if (attr) {
            if (!attr_path(ctx, it, a->pos[0], &subject)) goto fail;
        } else {
            subject = jx_ref(it);
        }
        bool r = jx_truthy(subject);
        bool ok = !test || jx_apply_test(ctx, test, subject, &targs, &r);
        jx_unref(subject);
        if (!ok) goto fail;
        if (r == keep) jx_list_push(*out, jx_ref(it));
    }
    jx_unref(items);
    return true;
fail:
    jx_unref(items);
    jx_unref(*out);
    *out = JX_UNDEFINED;
    return false;
}

static bool f_map(jx_ctx *ctx, jx_value v, const jx_args *a, jx_value *out) {
    jx_value items;
    const jx_value *attr = jx_arg(a, 99, "attribute"), *dflt = jx_arg(a, 99, "default");
    if (!attr && (a->npos < 1 || a->pos[0].t != JX_STR))
        return jx_fail(ctx, "map needs a filter name or attribute=");
    jx_args fargs = {a->pos + 1, a->npos ? a->npos - 1 : 0, NULL, NULL, 0};
    if (!generator_start(ctx, v, &items, out)) return false;
    for (size_t i = 0; i < items.u.o->u.list.n; i++) {
        jx_value it = items.u.o->u.list.v[i], r;
        bool ok = attr ? attr_path(ctx, it, *attr, &r) : jx_apply_filter(ctx, jx_s(a->pos[0]), it, &fargs, &r);
        if (!ok) return jx_unref(items), jx_unref(*out), *out = JX_UNDEFINED, false;
        if (attr && r.t == JX_UNDEF && dflt) r = jx_ref(*dflt);
        jx_list_push(*out, r);
    }
    jx_unref(items);
    return true;
}

static bool f_join(jx_ctx *ctx, jx_value v, const jx_args *a, jx_value *out) {
    const jx_value *sep = jx_arg(a, 0, "d"), *attr = jx_arg(a, 1, "attribute");
    jx_value items;
    if (!jx_to_list(ctx, v, &items)) return false;
    sp_strbuf b = jx_strbuf();
    bool ok = true;
    for (size_t i = 0; ok && i < items.u.o->u.list.n; i++) {
        if (i && sep) jx_write_str(&b, *sep);
        jx_value it = items.u.o->u.list.v[i], x;
        if (attr) {
            ok = attr_path(ctx, it, *attr, &x);
            if (ok) jx_write_str(&b, x), jx_unref(x);
        } else {
            jx_write_str(&b, it);
        }
    }
    jx_unref(items);
    if (!ok) return sp_strbuf_free(&b), false;
    return jx_str_from_buf(ctx, &b, out);
}

static bool f_unique(jx_ctx *ctx, jx_value v, const jx_args *a, jx_value *out) {
    const jx_value *cs = jx_arg(a, 0, "case_sensitive"), *attr = jx_arg(a, 1, "attribute");
    jx_value items, seen;
    if (!jx_to_list(ctx, v, &items)) return false;
    if (!jx_list_new(0, false, out) || !jx_list_new(0, false, &seen))
        return jx_unref(items), jx_fail(ctx, "out of memory");
    bool ok = true;
    for (size_t i = 0; ok && i < items.u.o->u.list.n; i++) {
        jx_value it = items.u.o->u.list.v[i], key;
        ok = attr ? attr_path(ctx, it, *attr, &key) : (key = jx_ref(it), true);
        if (ok && key.t == JX_STR && !(cs && jx_truthy(*cs))) {
            jx_value low;
            ok = jx_case(ctx, key, 'l', &low);
            jx_unref(key);
            key = ok ? low : JX_UNDEFINED;
        }
        bool dup = false;
        for (size_t j = 0; ok && j < seen.u.o->u.list.n && !dup; j++) dup = jx_equal(seen.u.o->u.list.v[j], key);
        if (ok && !dup) {
            jx_list_push(seen, key);
            jx_list_push(*out, jx_ref(it));
        } else {
            jx_unref(key);
        }
    }
    jx_unref(items);
    jx_unref(seen);
    return ok;
}

/* int(x) of a float as jinja2's int filter: NaN and infinities (which
 * Python refuses) give the default; a finite value beyond int64 (a Python
 * big int) is an error here. */
static bool float_to_int(jx_ctx *ctx, double f, jx_value dflt, jx_value *out) {
    if (isnan(f) || isinf(f)) return *out = jx_ref(dflt), true;
    if (!jx_float_fits_int(f)) return jx_fail(ctx, "int: %g is outside the 64-bit integer range", f);
    *out = jx_int((int64_t)f);
    return true;
}

static bool to_number(jx_ctx *ctx, jx_value v, bool want_int, const jx_args *a, jx_value *out) {
    const jx_value *d = jx_arg(a, 0, "default");
    jx_value dflt = d ? *d : want_int ? jx_int(0) : jx_float(0.0);
    if (v.t == JX_INT || v.t == JX_BOOL) {
        int64_t i = jx_int_of(v);
        *out = want_int ? jx_int(i) : jx_float((double)i);
        return true;
    }
    if (v.t == JX_FLOAT) {
        if (!want_int) return *out = v, true;
        return float_to_int(ctx, v.u.f, dflt, out);
    }
    if (v.t == JX_STR) {
        char buf[128];
        size_t k = 0;
        const char *s = jx_s(v);
        for (size_t i = 0; i < jx_slen(v) && k < sizeof buf - 1; i++)
            if (s[i] != '_') buf[k++] = s[i];
        buf[k] = '\0';
        char *e;
        if (want_int) {
            long long i = strtoll(buf, &e, 10);
            while (*e && jx_is_space_cp((unsigned char)*e)) e++;
            if (e != buf && !*e) return *out = jx_int(i), true;
        }
        double f = strtod(buf, &e);
        while (*e && jx_is_space_cp((unsigned char)*e)) e++;
        if (e != buf && !*e && k > 0) {
            if (want_int) return float_to_int(ctx, f, dflt, out);
            *out = jx_float(f);
            return true;
        }
    }
    *out = jx_ref(dflt);
    return true;
}

static bool f_round(jx_ctx *ctx, jx_value v, const jx_args *a, jx_value *out) {
    const jx_value *p = jx_arg(a, 0, "precision"), *m = jx_arg(a, 1, "method");
    if (!jx_is_num(v)) return jx_fail(ctx, "round expects a number");
    double x = jx_num_of(v);
    int64_t prec = p && p->t == JX_INT ? p->u.i : 0;
    const char *method = m && m->t == JX_STR ? jx_s(*m) : "common";
    double scale = pow(10.0, (double)prec);
    if (!strcmp(method, "ceil")) x = ceil(x * scale) / scale;
    else if (!strcmp(method, "floor")) x = floor(x * scale) / scale;
    else if (!strcmp(method, "common")) {
        /* Python's round(): correctly rounded, ties to even. */
        char buf[400];
        if (prec >= 0 && prec < 300) {
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            x = strtod(buf, NULL);
        } else {
            x = nearbyint(x * scale) / scale;
        }
    } else {
        return jx_fail(ctx, "method must be common, ceil or floor");
    }
    *out = jx_float(x);
    return true;
}

static bool f_first_last(jx_ctx *ctx, jx_value v, bool last, jx_value *out) {
    jx_value items;
    if (jx_iterator(v) && last) return jx_fail(ctx, "'%s' object is not reversible", jx_iterator(v));
    if (jx_iterator(v)) { /* next(iter(value)): only the first item is used up */
        *out = v.u.o->u.list.n ? jx_ref(v.u.o->u.list.v[0]) : JX_UNDEFINED;
        if (v.u.o->u.list.n) jx_drain(v, 1);
        return true;
    }
    if (!jx_to_list(ctx, v, &items)) return false;
    size_t n = items.u.o->u.list.n;
    *out = n ? jx_ref(items.u.o->u.list.v[last ? n - 1 : 0]) : JX_UNDEFINED;
    jx_unref(items);
    return true;
}

static bool f_reverse(jx_ctx *ctx, jx_value v, jx_value *out) {
    jx_value items;
    if (!jx_to_list(ctx, v, &items)) return false;
    jx_obj *o = items.u.o;
    for (size_t i = 0, j = o->u.list.n ? o->u.list.n - 1 : 0; i < j; i++, j--) {
        jx_value t = o->u.list.v[i];
        o->u.list.v[i] = o->u.list.v[j];
        o->u.list.v[j] = t;
    }
    /* reversed(): an iterator over a list or dict; what reversed() cannot
     * take (an iterator) comes back as a list. */
    if (v.t == JX_LIST && !jx_iterator(v)) items.u.o->u.list.iterator = JX_LIST_REVERSE;
    if (jx_is_map(v)) items.u.o->u.list.iterator = JX_DICT_REVERSE;
    if (v.t != JX_STR) return *out = items, true;
    sp_strbuf b = jx_strbuf();
    for (size_t i = 0; i < o->u.list.n; i++) jx_write_str(&b, o->u.list.v[i]);
    jx_unref(items);
    return jx_str_from_buf(ctx, &b, out);
}

bool jx_escape(jx_ctx *ctx, jx_value v, bool force, jx_value *out) {
    if (jx_is_markup(v) && !force) return *out = jx_ref(v), true;
    jx_value s;
    if (!as_str(ctx, v, &s)) return false;
    sp_strbuf b = jx_strbuf();
    for (size_t i = 0; i < jx_slen(s); i++) {
        char c = jx_s(s)[i];
        switch (c) {
        case '&': sp_strbuf_add(&b, "&amp;", 5); break;
        case '<': sp_strbuf_add(&b, "&lt;", 4); break;
        case '>': sp_strbuf_add(&b, "&gt;", 4); break;
        case '"': sp_strbuf_add(&b, "&#34;", 5); break;
        case '\'': sp_strbuf_add(&b, "&#39;", 5); break;
        default: sp_strbuf_addc(&b, c);
        }
    }
    jx_unref(s);
    if (!jx_str_from_buf(ctx, &b, out)) return false;
    out->u.o->u.str.markup = true;
    return true;
}

bool jx_mark_safe(jx_ctx *ctx, jx_value v, jx_value *out) {
    if (jx_is_markup(v)) return *out = jx_ref(v), true;
    jx_value s;
    if (!as_str(ctx, v, &s)) return false;
    /* A fresh copy: the plain string may be shared. */
    bool ok = jx_str_new(jx_s(s), jx_slen(s), out);
    jx_unref(s);
    if (!ok) return jx_fail(ctx, "out of memory");
    out->u.o->u.str.markup = true;
    return true;
}

static bool f_wordcount(jx_ctx *ctx, jx_value v, jx_value *out) {
    jx_value s;
    if (!as_str(ctx, v, &s)) return false;
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < jx_slen(s);) {
        int len;
        uint32_t c = sp_utf8_next(jx_s(s) + i, jx_slen(s) - i, &len);
        i += (size_t)len;
        bool w = jx_word_char(c);
        if (w && !in_word) words++;
        in_word = w;
    }
    jx_unref(s);
    *out = jx_int(words);
    return true;
}

static bool f_batch(jx_ctx *ctx, jx_value v, const jx_args *a, jx_value *out) {
    const jx_value *cnt = jx_arg(a, 0, "linecount"), *fill = jx_arg(a, 1, "fill_with");
    if (!cnt || cnt->t != JX_INT || cnt->u.i <= 0) return jx_fail(ctx, "batch needs a positive count");
    jx_value items, row = JX_UNDEFINED;
    if (!jx_to_list(ctx, v, &items)) return false;
    if (!jx_list_new(0, false, out)) return jx_unref(items), jx_fail(ctx, "out of memory");
    size_t n = items.u.o->u.list.n, k = (size_t)cnt->u.i;
    for (size_t i = 0; i < n; i++) {
        if (i % k == 0) {
            if (!jx_list_new(k, false, &row)) break;
            jx_list_push(*out, row);
        }
        jx_list_push(row, jx_ref(items.u.o->u.list.v[i]));
    }
    if (fill && fill->t != JX_NONE && n % k)
        for (size_t i = n % k; i < k; i++) jx_list_push(row, jx_ref(*fill));
    jx_unref(items);
    return true;
}

static bool f_minmax_sum(jx_ctx *ctx, const char *name, jx_value v, const jx_args *a, jx_value *out) {
    jx_value items;
    const jx_value *attr = jx_arg(a, name[0] == 's' ? 0 : 1, "attribute");
    const jx_value *cs = name[0] == 's' ? NULL : jx_arg(a, 0, "case_sensitive");
    if (!jx_to_list(ctx, v, &items)) return false;
    bool ok = true;
    size_t n = items.u.o->u.list.n;
    if (name[0] == 's') {
        const jx_value *start = jx_arg(a, 1, "start");
        jx_value acc = start ? jx_ref(*start) : jx_int(0);
        for (size_t i = 0; ok && i < n; i++) {
            jx_value x, r;
            ok = attr ? attr_path(ctx, items.u.o->u.list.v[i], *attr, &x) : (x = jx_ref(items.u.o->u.list.v[i]), true);
            if (!ok) break;
            if (!jx_is_num(x) || !jx_is_num(acc)) {
                ok = jx_fail(ctx, "sum expects numbers");
                jx_unref(x);
                break;
            }
            double fa = jx_num_of(acc);
            double fx = jx_num_of(x);
            int64_t isum;
            if (acc.t != JX_FLOAT && x.t != JX_FLOAT &&
                !__builtin_add_overflow(jx_int_of(acc), jx_int_of(x), &isum))
                r = jx_int(isum);
            else r = jx_float(fa + fx);
            jx_unref(x);
            acc = r;
        }
        jx_unref(items);
        *out = ok ? acc : JX_UNDEFINED;
        return ok;
    }
    *out = JX_UNDEFINED;
    jx_value best_key = JX_UNDEFINED;
    for (size_t i = 0; ok && i < n; i++) {
        jx_value it = items.u.o->u.list.v[i], key;
        ok = attr ? attr_path(ctx, it, *attr, &key) : (key = jx_ref(it), true);
        if (!ok) break;
        int c = i ? cmp_values(ctx, key, best_key, cs && jx_truthy(*cs), &ok) : 0;
        if (i == 0 || (name[1] == 'i' ? c < 0 : c > 0)) {
            jx_unref(best_key);
            jx_unref(*out);
            best_key = key;
            *out = jx_ref(it);
        } else {
            jx_unref(key);
        }
    }
    jx_unref(best_key);
    jx_unref(items);
    return ok;
}

/* Every filter with its parameters in order ("" none, "*" any), so that
 * calls are checked as Python checks them. */
static const struct {
    const char *name, *params;
} FILTERS[] = {
    {"tojson", "ensure_ascii,indent,separators,sort_keys"}, {"safe", ""},
    {"default", "default_value,boolean"}, {"d", "default_value,boolean"}, {"length", ""},
    {"count", ""}, {"trim", "chars"}, {"upper", ""}, {"lower", ""}, {"title", ""},
    {"capitalize", ""}, {"replace", "old,new,count"}, {"string", ""}, {"join", "d,attribute"},
    {"first", ""}, {"last", ""}, {"items", ""}, {"list", ""}, {"int", "default,base"},
    {"float", "default"}, {"abs", ""}, {"round", "precision,method"}, {"selectattr", "*"},
    {"rejectattr", "*"}, {"select", "*"}, {"reject", "*"}, {"map", "*"},
    {"unique", "case_sensitive,attribute"}, {"indent", "width,first,blank"}, {"e", ""},
    {"escape", ""}, {"forceescape", ""}, {"reverse", ""},
    {"sort", "reverse,case_sensitive,attribute"}, {"dictsort", "case_sensitive,by,reverse"},
    {"wordcount", ""}, {"batch", "linecount,fill_with"}, {"min", "case_sensitive,attribute"},
    {"max", "case_sensitive,attribute"}, {"sum", "attribute,start"}, {"attr", "name"}};

static int filter_index(const char *name) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (!strcmp(FILTERS[i].name, name)) return (int)i;
    return -1;
}

static bool param_at(const char *params, const char *name, size_t *index) {
    size_t n = strlen(name), i = 0;
    for (const char *p = params; *p; i++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !memcmp(p, name, n)) return *index = i, true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static bool check_filter_args(jx_ctx *ctx, const char *name, const char *params, const jx_args *a) {
    if (!strcmp(params, "*")) return true;
    size_t nparams = *params ? 1 : 0;
    for (const char *p = params; *p; p++) nparams += *p == ',';
    if (a->npos > nparams)
        return jx_fail(ctx, "%s() takes %zu argument(s) but %zu were given", name, nparams, a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i;
        if (!param_at(params, a->kwnames[k], &i))
            return jx_fail(ctx, "%s() got an unexpected keyword argument '%s'", name, a->kwnames[k]);
        if (i < a->npos)
            return jx_fail(ctx, "%s() got multiple values for argument '%s'", name, a->kwnames[k]);
    }
    return true;
}

static const char *const TESTS[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true",
    "false", "mapping", "iterable", "sequence", "callable", "lower", "upper", "escaped", "odd",
    "even", "divisibleby", "equalto", "eq", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=",
    "gt", "greaterthan", ">", "ge", ">=", "in", "sameas", NULL};

bool jx_known_filter(const char *name, bool test) {
    if (!test) return filter_index(name) >= 0;
    for (const char *const *n = TESTS; *n; n++)
        if (!strcmp(*n, name)) return true;
    return false;
}

/* A list result that jinja2 gives as a generator (its filter yields). */
static bool generator(bool ok, jx_value *out) {
    if (ok) out->u.o->u.list.iterator = JX_GENERATOR;
    return ok;
}

bool jx_apply_filter(jx_ctx *ctx, const char *name, jx_value v, const jx_args *a, jx_value *out) {
    *out = JX_UNDEFINED;
    jx_value s;
    int fi = filter_index(name);
    if (fi < 0) return jx_fail(ctx, "No filter named '%s' found.", name);
    if (!check_filter_args(ctx, name, FILTERS[fi].params, a)) return false;
    if (is_name(name, "tojson")) return f_tojson(ctx, v, a, out);
    if (is_name(name, "safe")) return jx_mark_safe(ctx, v, out);
    if (is_name(name, "default") || is_name(name, "d")) {
        const jx_value *d = jx_arg(a, 0, "default_value"), *b = jx_arg(a, 1, "boolean");
        bool use = v.t == JX_UNDEF || (b && jx_truthy(*b) && !jx_truthy(v));
        if (!use) return *out = jx_ref(v), true;
        if (d) *out = jx_ref(*d);
        else if (!jx_str_cstr("", out)) return jx_fail(ctx, "out of memory");
        return true;
    }
    if (is_name(name, "length") || is_name(name, "count")) {
        int64_t n = 0;
        if (!length_of(ctx, v, &n)) return false;
        return *out = jx_int(n), true;
    }
    if (is_name(name, "trim") || is_name(name, "upper") || is_name(name, "lower") ||
        is_name(name, "title") || is_name(name, "capitalize") || is_name(name, "replace") ||
        is_name(name, "string")) {
        if (!as_str(ctx, v, &s)) return false;
        bool ok = true;
        if (is_name(name, "trim")) ok = jx_strip(ctx, s, jx_arg(a, 0, "chars"), true, true, out);
        else if (is_name(name, "upper")) ok = jx_case(ctx, s, 'u', out);
        else if (is_name(name, "lower")) ok = jx_case(ctx, s, 'l', out);
        else if (is_name(name, "title")) ok = jx_case(ctx, s, 'j', out);
        else if (is_name(name, "capitalize")) ok = jx_case(ctx, s, 'c', out);
        else if (is_name(name, "string")) *out = jx_ref(s);
        else {
            const jx_value *o = jx_arg(a, 0, "old"), *n = jx_arg(a, 1, "new"), *c = jx_arg(a, 2, "count");
            if (!o || !n) ok = jx_fail(ctx, "replace needs old and new");
            else ok = jx_replace(ctx, s, *o, *n, c && c->t == JX_INT ? c->u.i : -1, out);
        }
        jx_unref(s);
        /* These work on soft_str(value): a Markup subject stays Markup. */
        if (ok && jx_is_markup(v) && out->t == JX_STR && !jx_is_markup(*out) &&
            (is_name(name, "trim") || is_name(name, "upper") || is_name(name, "lower") ||
             is_name(name, "capitalize"))) {
            jx_value plain = *out;
            ok = jx_mark_safe(ctx, plain, out);
            jx_unref(plain);
        }
        return ok;
    }
    if (is_name(name, "join")) return f_join(ctx, v, a, out);
    if (is_name(name, "first")) return f_first_last(ctx, v, false, out);
    if (is_name(name, "last")) return f_first_last(ctx, v, true, out);
    if (is_name(name, "items")) {
        if (v.t == JX_UNDEF) return generator(jx_list_new(0, false, out) || jx_fail(ctx, "out of memory"), out);
        if (!jx_is_map(v)) return jx_fail(ctx, "items filter expects a mapping, got %s", jx_type_name(v));
        return generator(jx_dict_items(ctx, v, out), out);
    }
    if (is_name(name, "list")) return jx_to_list(ctx, v, out);
    if (is_name(name, "int")) return to_number(ctx, v, true, a, out);
    if (is_name(name, "float")) return to_number(ctx, v, false, a, out);
    if (is_name(name, "abs")) {
        if (v.t == JX_INT && v.u.i == INT64_MIN) return *out = jx_float(-(double)v.u.i), true;
        if (v.t == JX_INT) return *out = jx_int(v.u.i < 0 ? -v.u.i : v.u.i), true;
        if (v.t == JX_FLOAT) return *out = jx_float(fabs(v.u.f)), true;
        if (v.t == JX_BOOL) return *out = jx_int(v.u.b), true;
        return jx_fail(ctx, "bad operand type for abs(): '%s'", jx_type_name(v));
    }
    if (is_name(name, "round")) return f_round(ctx, v, a, out);
    if (is_name(name, "selectattr")) return f_select(ctx, v, a, true, true, out);
    if (is_name(name, "rejectattr")) return f_select(ctx, v, a, true, false, out);
    if (is_name(name, "select")) return f_select(ctx, v, a, false, true, out);
    if (is_name(name, "reject")) return f_select(ctx, v, a, false, false, out);
    if (is_name(name, "map")) return f_map(ctx, v, a, out);
    if (is_name(name, "unique")) return generator(f_unique(ctx, v, a, out), out);
    if (is_name(name, "indent")) return f_indent(ctx, v, a, out);
    if (is_name(name, "e") || is_name(name, "escape") || is_name(name, "forceescape"))
        return jx_escape(ctx, v, is_name(name, "forceescape"), out);
    if (is_name(name, "reverse")) return f_reverse(ctx, v, out);
    if (is_name(name, "sort")) return f_sort(ctx, v, a, false, out);
    if (is_name(name, "dictsort")) return f_sort(ctx, v, a, true, out);
    if (is_name(name, "wordcount")) return f_wordcount(ctx, v, out);
    if (is_name(name, "batch")) return generator(f_batch(ctx, v, a, out), out);
    if (is_name(name, "min") || is_name(name, "max") || is_name(name, "sum"))
        return f_minmax_sum(ctx, name, v, a, out);
    if (is_name(name, "attr")) {
        const jx_value *n = jx_arg(a, 0, "name");
        if (!n) return jx_fail(ctx, "attr needs a name");
        return jx_getattr(ctx, v, *n, out);
    }
    return jx_fail(ctx, "No filter named '%s'.", name);
}

/* ------------------------------------------------------------------- tests */

bool jx_apply_test(jx_ctx *ctx, const char *name, jx_value v, const jx_args *a, bool *out) {
    const jx_value *x = jx_arg(a, 0, NULL);
    *out = false;
    if (is_name(name, "defined")) return *out = v.t != JX_UNDEF, true;
    if (is_name(name, "undefined")) return *out = v.t == JX_UNDEF, true;
    if (is_name(name, "none")) return *out = v.t == JX_NONE, true;
    if (is_name(name, "string")) return *out = v.t == JX_STR, true;
    if (is_name(name, "number")) return *out = jx_is_num(v), true;
    if (is_name(name, "integer")) return *out = v.t == JX_INT, true;
    if (is_name(name, "float")) return *out = v.t == JX_FLOAT, true;
    if (is_name(name, "boolean")) return *out = v.t == JX_BOOL, true;
    if (is_name(name, "true")) return *out = v.t == JX_BOOL && v.u.b, true;
    if (is_name(name, "false")) return *out = v.t == JX_BOOL && !v.u.b, true;
    if (is_name(name, "mapping")) return *out = v.t == JX_DICT, true;
    if (is_name(name, "iterable") || is_name(name, "sequence"))
        return *out = v.t == JX_STR || v.t == JX_DICT || v.t == JX_UNDEF ||
                      (v.t == JX_LIST && !(is_name(name, "sequence") && jx_iterator(v))),
               true;
    if (is_name(name, "callable")) return *out = v.t == JX_FUNC, true;
    if (is_name(name, "lower") || is_name(name, "upper")) {
        if (v.t != JX_STR) return true;
        jx_value c;
        if (!jx_case(ctx, v, name[0] == 'l' ? 'l' : 'u', &c)) return false;
        *out = jx_equal(c, v);
        jx_unref(c);
        return true;
    }
    if (is_name(name, "escaped")) return true;
    if (is_name(name, "odd") || is_name(name, "even") || is_name(name, "divisibleby")) {
        if (v.t != JX_INT && v.t != JX_BOOL) return jx_fail(ctx, "%s test expects an integer", name);
        int64_t i = jx_int_of(v);
        if (name[0] == 'o') return *out = (i % 2) != 0, true;
        if (name[0] == 'e') return *out = (i % 2) == 0, true;
        if (!x || x->t != JX_INT || x->u.i == 0) return jx_fail(ctx, "divisibleby expects a non-zero integer");
        return *out = x->u.i == -1 || i % x->u.i == 0, true;   /* INT64_MIN % -1 overflows */
    }
    if (!x) return jx_fail(ctx, "No test named '%s' without arguments.", name);
    int op = 0;
    if (is_name(name, "equalto") || is_name(name, "eq") || is_name(name, "==")) op = '=';
    else if (is_name(name, "ne") || is_name(name, "!=")) op = '!';
    else if (is_name(name, "lt") || is_name(name, "lessthan") || is_name(name, "<")) op = '<';
    else if (is_name(name, "le") || is_name(name, "<=")) op = 'l';
    else if (is_name(name, "gt") || is_name(name, "greaterthan") || is_name(name, ">")) op = '>';
    else if (is_name(name, "ge") || is_name(name, ">=")) op = 'g';
    else if (is_name(name, "in")) op = 'i';
    if (op) return jx_compare(ctx, op, v, *x, out);
    if (is_name(name, "sameas")) {
        if (v.t != x->t) return true;
        *out = v.t < JX_STR ? jx_equal(v, *x) : v.u.o == x->u.o;
        return true;
    }
    return jx_fail(ctx, "No test named '%s'.", name);
}
