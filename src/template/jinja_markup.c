/* jinja2's Markup strings (markupsafe) beyond `+`: the str methods, `%`
 * and the filters that keep a Markup subject Markup, escaping the plain
 * strings they take in, as markupsafe's wrappers do. */
#include <string.h>

#include "template/jinja_impl.h"
#include "template/jinja_str.h"

/* The str methods whose result markupsafe makes Markup again (split and
 * its kin: each part). Of their arguments only format's fields, join's
 * items and replace's replacement are escaped. */
static const char *const MARKUP_METHODS[] = {
    "strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize", "replace", "format",
    "join", "removeprefix", "removesuffix", "split", "rsplit", "splitlines", NULL};

static bool listed(const char *const *names, const char *name) {
    for (; *names; names++)
        if (!strcmp(*names, name)) return true;
    return false;
}

bool jx_markup_method(const char *name) { return listed(MARKUP_METHODS, name); }

/* An argument as markupsafe hands it on: strings escaped, and for format
 * and `%` (whose fields are escaped after str()) lists and dicts too. */
static bool escape_arg(jx_ctx *ctx, jx_value v, bool containers, jx_value *out) {
    if (v.t == JX_STR || (containers && (v.t == JX_LIST || jx_is_map(v))))
        return jx_escape(ctx, v, false, out);
    return *out = jx_ref(v), true;
}

static void unref_all(jx_value *v, size_t n) {
    for (size_t i = 0; i < n; i++) jx_unref(v[i]);
}

/* v[i] replaced by its escaped form. */
static bool escape_in_place(jx_ctx *ctx, jx_value *v, bool containers) {
    jx_value e;
    if (!escape_arg(ctx, *v, containers, &e)) return false;
    jx_unref(*v);
    *v = e;
    return true;
}

/* A string result as Markup, or each string of a list result. */
static bool mark_result(jx_ctx *ctx, jx_value *v) {
    jx_value m;
    if (v->t == JX_STR) {
        if (!jx_mark_safe(ctx, *v, &m)) return false;
        jx_unref(*v);
        *v = m;
        return true;
    }
    if (v->t != JX_LIST) return true;
    for (size_t i = 0; i < v->u.o->u.list.n; i++) {
        jx_value *it = &v->u.o->u.list.v[i];
        if (it->t != JX_STR) continue;
        if (!jx_mark_safe(ctx, *it, &m)) return false;
        jx_unref(*it);
        *it = m;
    }
    return true;
}

bool jx_call_markup_method(jx_ctx *ctx, jx_value self, const char *m, const jx_args *a,
                           jx_value *out, bool *found) {
    jx_value args[16], plain = JX_UNDEFINED;
    size_t n = a->npos + a->nkw;
    if (n > 16) return jx_fail(ctx, "too many arguments to %s()", m);
    for (size_t i = 0; i < a->npos; i++) args[i] = jx_ref(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) args[a->npos + i] = jx_ref(a->kw[i]);
    bool ok = true;
    if (!strcmp(m, "format")) {
        for (size_t i = 0; ok && i < n; i++) ok = escape_in_place(ctx, &args[i], true);
    } else if (!strcmp(m, "replace") && a->npos >= 2) {
        ok = escape_in_place(ctx, &args[1], false);
    } else if (!strcmp(m, "join") && a->npos == 1) {
        jx_value items = JX_UNDEFINED;
        ok = jx_to_list(ctx, args[0], &items);
        if (!ok) items = JX_UNDEFINED;
        for (size_t i = 0; ok && i < items.u.o->u.list.n; i++)
            ok = escape_in_place(ctx, &items.u.o->u.list.v[i], false);
        jx_unref(args[0]);
        args[0] = items;
    }
    jx_args escaped = {args, a->npos, a->kwnames, args + a->npos, a->nkw};
    ok = ok && (jx_str_new(jx_s(self), jx_slen(self), &plain) || jx_fail(ctx, "out of memory"));
    ok = ok && jx_call_str_method(ctx, plain, m, &escaped, out, found);
    jx_unref(plain);
    unref_all(args, n);
    return ok && mark_result(ctx, out);
}

static bool escape_tuple(jx_ctx *ctx, jx_value args, jx_value *out) {
    if (!jx_list_new(args.u.o->u.list.n, true, out)) return jx_fail(ctx, "out of memory");
    for (size_t i = 0; i < args.u.o->u.list.n; i++) {
        jx_value e;
        if (!escape_arg(ctx, args.u.o->u.list.v[i], true, &e)) return jx_unref(*out), false;
        jx_list_push(*out, e);
    }
    return true;
}

/* Markup % args: each argument (a tuple's items) escaped after str(), the
 * result Markup. */
bool jx_markup_percent(jx_ctx *ctx, jx_value fmt, jx_value args, jx_value *out) {
    jx_value esc, plain = JX_UNDEFINED;
    bool ok = args.t == JX_LIST && args.u.o->u.list.tuple ? escape_tuple(ctx, args, &esc)
                                                          : escape_arg(ctx, args, true, &esc);
    if (!ok) return false;
    ok = jx_str_new(jx_s(fmt), jx_slen(fmt), &plain) || jx_fail(ctx, "out of memory");
    ok = ok && jx_percent_format(ctx, plain, esc, out);
    jx_unref(plain);
    jx_unref(esc);
    return ok && mark_result(ctx, out);
}
