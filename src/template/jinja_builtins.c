/* Jinja globals (range, namespace, dict, raise_exception, strftime_now, as
 * transformers defines them) and the Python methods of str, dict and list
 * that the immutable sandbox allows. Mutating methods (list.append,
 * dict.update, ...) are refused as the sandbox refuses them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja_impl.h"
#include "template/jinja_str.h"

const jx_value *jx_arg(const jx_args *a, size_t i, const char *name) {
    if (i < a->npos) return &a->pos[i];
    for (size_t k = 0; name && k < a->nkw; k++)
        if (!strcmp(a->kwnames[k], name)) return &a->kw[k];
    return NULL;
}

static bool int_arg(jx_ctx *ctx, const jx_value *v, int64_t dflt, int64_t *out) {
    if (!v || v->t == JX_NONE) {
        *out = dflt;
        return true;
    }
    if (v->t == JX_INT || v->t == JX_BOOL) {
        *out = jx_int_of(*v);
        return true;
    }
    return jx_fail(ctx, "'%s' object cannot be interpreted as an integer", jx_type_name(*v));
}

/* ----------------------------------------------------------------- globals */

static bool g_range(jx_ctx *ctx, const jx_value *self, const jx_args *a, jx_value *out) {
    int64_t start = 0, stop = 0, step = 1;
    if (a->npos == 0 || a->npos > 3) return jx_fail(ctx, "range expected 1 to 3 arguments");
    if (a->npos == 1) {
        if (!int_arg(ctx, &a->pos[0], 0, &stop)) return false;
    } else if (!int_arg(ctx, &a->pos[0], 0, &start) || !int_arg(ctx, &a->pos[1], 0, &stop) ||
               (a->npos == 3 && !int_arg(ctx, &a->pos[2], 1, &step))) {
        return false;
    }
    if (step == 0) return jx_fail(ctx, "range() arg 3 must not be zero");
    /* ceil(|stop - start| / |step|) in uint64: the int64 difference can
     * overflow (range(-9e18, 9e18)). */
    uint64_t span = step > 0 ? (stop > start ? (uint64_t)stop - (uint64_t)start : 0)
                             : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
    uint64_t by = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
    uint64_t count = span / by + (span % by != 0);
    if (count > 100000)
        return jx_fail(ctx, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    if (!jx_list_new((size_t)count, false, out)) return jx_fail(ctx, "out of memory");
    for (int64_t i = 0; i < (int64_t)count; i++) jx_list_push(*out, jx_int(start + i * step));
    return true;
}

static bool fill_mapping(jx_ctx *ctx, jx_value d, const jx_args *a, bool ns) {
    if (a->npos > 1) return jx_fail(ctx, "expected at most 1 positional argument");
    if (a->npos == 1) {
        jx_value src = a->pos[0];
        if (!jx_is_map(src)) return jx_fail(ctx, "cannot convert '%s' to a dict", jx_type_name(src));
        for (size_t i = 0; i < src.u.o->u.dict.n; i++)
            jx_dict_set(d, jx_ref(src.u.o->u.dict.k[i]), jx_ref(src.u.o->u.dict.v[i]));
    }
    for (size_t k = 0; k < a->nkw; k++) {
        if (ns && a->kwnames[k][0] == '_')
            return jx_fail(ctx, "Chat templates cannot store underscore-prefixed attributes on a "
                                "namespace, but got '%s'. Please rename the attribute.", a->kwnames[k]);
        if (!jx_dict_set_cstr(d, a->kwnames[k], jx_ref(a->kw[k]))) return jx_fail(ctx, "out of memory");
    }
    return true;
}

static bool g_namespace(jx_ctx *ctx, const jx_value *self, const jx_args *a, jx_value *out) {
    if (!jx_dict_new(JX_NS, out)) return jx_fail(ctx, "out of memory");
    return fill_mapping(ctx, *out, a, true) || (jx_unref(*out), *out = JX_UNDEFINED, false);
}

static bool g_dict(jx_ctx *ctx, const jx_value *self, const jx_args *a, jx_value *out) {
    if (!jx_dict_new(JX_DICT, out)) return jx_fail(ctx, "out of memory");
    return fill_mapping(ctx, *out, a, false) || (jx_unref(*out), *out = JX_UNDEFINED, false);
}

static bool g_raise(jx_ctx *ctx, const jx_value *self, const jx_args *a, jx_value *out) {
    sp_strbuf b = {.limit = 400};
    const jx_value *m = jx_arg(a, 0, "message");
    if (m) jx_write_str(&b, *m);
    jx_fail(ctx, "%s", b.p ? b.p : "");
    sp_strbuf_free(&b);
    return false;
}

static bool g_strftime(jx_ctx *ctx, const jx_value *self, const jx_args *a, jx_value *out) {
    const jx_value *f = jx_arg(a, 0, "format");
    if (!f || f->t != JX_STR) return jx_fail(ctx, "strftime_now() expects a format string");
    time_t t = ctx->limits->now >= 0 ? (time_t)ctx->limits->now : time(NULL);
    struct tm tm;
    if (!localtime_r(&t, &tm)) return jx_fail(ctx, "strftime_now: bad time");
    char buf[512];
    size_t n = jx_slen(*f) ? strftime(buf, sizeof buf, jx_s(*f), &tm) : 0;
    if (n == 0 && jx_slen(*f)) return jx_fail(ctx, "strftime_now: format too long");
    return jx_str_new(buf, n, out) || jx_fail(ctx, "out of memory");
}

static const struct {
    const char *name;
    jx_builtin_fn fn;
} GLOBALS[] = {{"range", g_range},          {"namespace", g_namespace}, {"dict", g_dict},
               {"raise_exception", g_raise}, {"strftime_now", g_strftime}};

bool jx_lookup_global(const char *name, jx_value *out) {
    *out = JX_UNDEFINED;
    for (size_t i = 0; i < sizeof GLOBALS / sizeof GLOBALS[0]; i++) {
        if (strcmp(GLOBALS[i].name, name) != 0) continue;
        jx_obj *o = calloc(1, sizeof *o);
        if (!o) return false;
        o->rc = 1;
        o->type = JX_FUNC;
        o->u.fn.kind = JX_FN_BUILTIN;
        o->u.fn.name = GLOBALS[i].name;
        o->u.fn.fn = GLOBALS[i].fn;
        out->t = JX_FUNC;
        out->u.o = o;
        return true;
    }
    return true;
}

/* ----------------------------------------------------------------- methods */

static bool need_str(jx_ctx *ctx, const jx_value *v, const char *what) {
    if (v && v->t == JX_STR) return true;
    return jx_fail(ctx, "%s argument must be str, not %s", what, v ? jx_type_name(*v) : "nothing");
}

/* startswith/endswith accept a str or a tuple of str. */
static bool affix(jx_ctx *ctx, jx_value s, const jx_value *arg, bool end, bool *out) {
    if (arg && arg->t == JX_LIST) {
        *out = false;
        for (size_t i = 0; i < arg->u.o->u.list.n && !*out; i++)
            if (!affix(ctx, s, &arg->u.o->u.list.v[i], end, out)) return false;
        return true;
    }
    if (!need_str(ctx, arg, end ? "endswith" : "startswith")) return false;
    size_t n = jx_slen(s), k = jx_slen(*arg);
    *out = k <= n && memcmp(jx_s(s) + (end ? n - k : 0), jx_s(*arg), k) == 0;
    return true;
}

static int64_t cp_index(jx_value s, const char *at) {
    return (int64_t)sp_utf8_count(jx_s(s), (size_t)(at - jx_s(s)));
}

bool jx_call_str_method(jx_ctx *ctx, jx_value s, const char *m, const jx_args *a, jx_value *out,
                        bool *found) {
    const jx_value *a0 = jx_arg(a, 0, NULL), *a1 = jx_arg(a, 1, NULL);
    *found = true;
    bool r;
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (!affix(ctx, s, a0, m[0] == 'e', &r)) return false;
        *out = jx_bool(r);
        return true;
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        const jx_value *sep = jx_arg(a, 0, "sep");
        int64_t maxsplit = -1;
        if (!int_arg(ctx, jx_arg(a, 1, "maxsplit"), -1, &maxsplit)) return false;
        if (sep && sep->t != JX_STR && sep->t != JX_NONE) return need_str(ctx, sep, "split");
        return jx_split(ctx, s, sep, maxsplit, m[0] == 'r', out);
    }
    if (!strcmp(m, "strip")) return jx_strip(ctx, s, a0, true, true, out);
    if (!strcmp(m, "lstrip")) return jx_strip(ctx, s, a0, true, false, out);
    if (!strcmp(m, "rstrip")) return jx_strip(ctx, s, a0, false, true, out);
    if (!strcmp(m, "upper")) return jx_case(ctx, s, 'u', out);
    if (!strcmp(m, "lower")) return jx_case(ctx, s, 'l', out);
    if (!strcmp(m, "title")) return jx_case(ctx, s, 't', out);
    if (!strcmp(m, "capitalize")) return jx_case(ctx, s, 'c', out);
    if (!strcmp(m, "replace")) {
        int64_t count = -1;
        if (!a0 || !a1) return jx_fail(ctx, "replace() takes at least 2 arguments");
        if (!int_arg(ctx, jx_arg(a, 2, "count"), -1, &count)) return false;
        return jx_replace(ctx, s, *a0, *a1, count, out);
    }
    if (!strcmp(m, "format")) return jx_str_format(ctx, s, a, out);
    if (!strcmp(m, "count") || !strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index")) {
        if (!need_str(ctx, a0, m)) return false;
        const char *p = jx_s(s), *q = jx_s(*a0);
        size_t n = jx_slen(s), k = jx_slen(*a0);
        if (m[0] == 'c') {
            int64_t c = 0;
            if (k == 0) c = (int64_t)sp_utf8_count(p, n) + 1;
            else
                for (const char *h = p; (h = memmem(h, n - (size_t)(h - p), q, k)); h += k) c++;
            *out = jx_int(c);
            return true;
        }
        const char *hit = NULL;
        if (m[0] == 'r') {
            for (size_t i = n + 1; i-- > 0;)
                if (i + k <= n && memcmp(p + i, q, k) == 0) {
                    hit = p + i;
                    break;
                }
        } else {
            hit = k == 0 ? p : memmem(p, n, q, k);
        }
        if (!hit && m[0] == 'i') return jx_fail(ctx, "substring not found");
        *out = jx_int(hit ? cp_index(s, hit) : -1);
        return true;
    }
    if (!strcmp(m, "join")) {
        jx_value items;
        if (!a0) return jx_fail(ctx, "join() takes exactly one argument");
        if (!jx_to_list(ctx, *a0, &items)) return false;
        sp_strbuf b = jx_strbuf();
        for (size_t i = 0; i < items.u.o->u.list.n; i++) {
            jx_value it = items.u.o->u.list.v[i];
            if (it.t != JX_STR) {
                sp_strbuf_free(&b);
                jx_unref(items);
                return jx_fail(ctx, "sequence item %zu: expected str instance, %s found", i, jx_type_name(it));
            }
            if (i) sp_strbuf_add(&b, jx_s(s), jx_slen(s));
            sp_strbuf_add(&b, jx_s(it), jx_slen(it));
        }
        jx_unref(items);
        return jx_str_from_buf(ctx, &b, out);
    }
    if (!strcmp(m, "splitlines")) return jx_splitlines(ctx, s, out);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (!need_str(ctx, a0, m)) return false;
        bool end = m[6] == 's';
        if (!affix(ctx, s, a0, end, &r)) return false;
        size_t n = jx_slen(s), k = r ? jx_slen(*a0) : 0;
        return jx_str_new(jx_s(s) + (end ? 0 : k), n - k, out) || jx_fail(ctx, "out of memory");
    }
    if (jx_str_predicate(s, m, &r)) {
        *out = jx_bool(r);
        return true;
    }
    *found = false;
    return true;
}

static bool pairs(jx_ctx *ctx, jx_value d, int which, jx_value *out) {
    jx_obj *o = d.u.o;
    if (!jx_list_new(o->u.dict.n, false, out)) return jx_fail(ctx, "out of memory");
    for (size_t i = 0; i < o->u.dict.n; i++) {
        jx_value item;
        if (which == 'k') item = jx_ref(o->u.dict.k[i]);
        else if (which == 'v') item = jx_ref(o->u.dict.v[i]);
        else {
            if (!jx_list_new(2, true, &item)) return jx_unref(*out), jx_fail(ctx, "out of memory");
            jx_list_push(item, jx_ref(o->u.dict.k[i]));
            jx_list_push(item, jx_ref(o->u.dict.v[i]));
        }
        if (!jx_list_push(*out, item)) return jx_unref(*out), jx_fail(ctx, "out of memory");
    }
    return true;
}

bool jx_dict_items(jx_ctx *ctx, jx_value d, jx_value *out) { return pairs(ctx, d, 'i', out); }

static const char *const NO_ARG_METHODS[] = {
    "upper", "lower", "title", "capitalize", "isdigit", "isalpha", "isalnum", "isspace",
    "islower", "isupper", "items", "keys", "values", "copy", NULL};

bool jx_call_method(jx_ctx *ctx, jx_value self, const char *m, const jx_args *a, jx_value *out,
                    bool *found) {
    *out = JX_UNDEFINED;
    *found = true;
    for (const char *const *n = NO_ARG_METHODS; *n; n++)
        if (!strcmp(*n, m) && a->npos + a->nkw > 0)
            return jx_fail(ctx, "%s.%s() takes no arguments (%zu given)", jx_type_name(self), m,
                           a->npos + a->nkw);
    if (jx_is_markup(self) && jx_markup_method(m)) return jx_call_markup_method(ctx, self, m, a, out, found);
    if (self.t == JX_STR) return jx_call_str_method(ctx, self, m, a, out, found);
    if (self.t == JX_DICT) {
        if (!strcmp(m, "get")) {
            const jx_value *k = jx_arg(a, 0, "key"), *d = jx_arg(a, 1, "default");
            if (!k) return jx_fail(ctx, "get expected at least 1 argument");
            const jx_value *v = jx_dict_get(self, *k);
            *out = v ? jx_ref(*v) : d ? jx_ref(*d) : JX_NONEV;
            return true;
        }
        if (!strcmp(m, "items")) return pairs(ctx, self, 'i', out);
        if (!strcmp(m, "keys")) return pairs(ctx, self, 'k', out);
        if (!strcmp(m, "values")) return pairs(ctx, self, 'v', out);
        if (!strcmp(m, "copy")) {
            if (!jx_dict_new(JX_DICT, out)) return jx_fail(ctx, "out of memory");
            for (size_t i = 0; i < self.u.o->u.dict.n; i++)
                jx_dict_set(*out, jx_ref(self.u.o->u.dict.k[i]), jx_ref(self.u.o->u.dict.v[i]));
            return true;
        }
    }
    if (self.t == JX_LIST) {
        const jx_value *x = jx_arg(a, 0, NULL);
        if (!strcmp(m, "index") || !strcmp(m, "count")) {
            if (!x) return jx_fail(ctx, "%s() takes exactly one argument", m);
            int64_t c = 0, at = -1;
            for (size_t i = 0; i < self.u.o->u.list.n; i++)
                if (jx_equal(self.u.o->u.list.v[i], *x)) {
                    if (at < 0) at = (int64_t)i;
                    c++;
                }
            if (m[0] == 'i' && at < 0) return jx_fail(ctx, "value is not in list");
            *out = jx_int(m[0] == 'i' ? at : c);
            return true;
        }
        if (!strcmp(m, "copy")) return jx_to_list(ctx, self, out);
    }
    *found = false;
    return true;
}
