/* Jinja evaluator: walks the AST with a chain of variable frames. Scoping
 * follows Jinja: a for loop body, a macro call and a with block get their own
 * frame (so `set` inside a loop does not leak out, hence namespace()), while
 * if blocks share their parent's. Undefined values behave like jinja2's
 * default Undefined: they print as nothing, are false, iterate as empty,
 * and fail when used in arithmetic or when an attribute is read from them. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "template/jinja_impl.h"
#include "template/jinja_str.h"

enum { EX_OK = 0, EX_ERR = -1, EX_BREAK = 1, EX_CONTINUE = 2 };

bool jx_fail(jx_ctx *ctx, const char *fmt, ...) {
    if (ctx->failed) return false;
    ctx->failed = true;
    char msg[440];
    jx_budget *budget = jx_budget_current();
    if (budget && budget->exceeded) {
        /* the "out of memory" of a value the budget refused */
        snprintf(msg, sizeof msg,
                 "the template's values exceed the limit (%zu bytes in all, %zu per string)",
                 budget->max_live, budget->max_string);
        sp_fail(ctx->err, SPINDLE_ERR_LIMIT, "template line %d, column %d: %s", ctx->line,
                ctx->col, msg);
        return false;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sp_fail(ctx->err, SPINDLE_ERR_TEMPLATE, "template line %d, column %d: %s",
            ctx->line, ctx->col, msg);
    return false;
}

bool jx_limit_fail(jx_ctx *ctx, const char *what) {
    bool first = !ctx->failed;
    jx_fail(ctx, "%s", what);
    if (first && ctx->err) ctx->err->status = SPINDLE_ERR_LIMIT;
    return false;
}

#define AT(ctx, n) ((ctx)->line = (n)->line, (ctx)->col = (n)->col)

/* ------------------------------------------------------------------ frames */

bool jx_frame_push(jx_frame *f, jx_frame *parent) {
    f->parent = parent;
    return jx_dict_new(JX_DICT, &f->vars);
}

void jx_frame_pop(jx_frame *f) { jx_unref(f->vars); }

const jx_value *jx_frame_lookup(jx_frame *f, const char *name) {
    size_t len = strlen(name);
    for (; f; f = f->parent) {
        const jx_value *v = jx_dict_get_cstr(f->vars, name, len);
        if (v) return v;
    }
    return NULL;
}

bool jx_frame_assign(jx_ctx *ctx, jx_frame *f, const char *name, jx_value v) {
    if (!jx_dict_set_cstr(f->vars, name, v)) return jx_fail(ctx, "out of memory");
    return true;
}

/* -------------------------------------------------------------- attributes */

static const char *const STR_METHODS[] = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
    "upper", "lower", "replace", "title", "format", "capitalize", "count",
    "find", "rfind", "index", "join", "splitlines", "isdigit", "isalpha",
    "isalnum", "isspace", "islower", "isupper", "removeprefix", "removesuffix",
    NULL};
static const char *const DICT_METHODS[] = {
    "get", "items", "keys", "values", "copy", "pop", "popitem", "update",
    "setdefault", "clear", NULL};
static const char *const LIST_METHODS[] = {
    "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear",
    "index", "count", "copy", NULL};

static bool method_trampoline(jx_ctx *ctx, const jx_value *self,
                              const jx_args *args, jx_value *out);

static bool bound_method(jx_ctx *ctx, jx_value obj, const char *name, jx_value *out) {
    jx_obj *o = calloc(1, sizeof *o);
    if (!o) return jx_fail(ctx, "out of memory");
    o->rc = 1;
    o->type = JX_FUNC;
    o->u.fn.kind = JX_FN_BUILTIN;
    o->u.fn.name = name;
    o->u.fn.fn = method_trampoline;
    o->u.fn.self = jx_ref(obj);
    out->t = JX_FUNC;
    out->u.o = o;
    return true;
}

/* Method names point at the static tables above, so the bound function can
 * keep them without copying. */
static const char *method_name(jx_value obj, const char *s, size_t n) {
    const char *const *tables[3] = {
        obj.t == JX_STR ? STR_METHODS : NULL,
        obj.t == JX_DICT ? DICT_METHODS : NULL,
        obj.t == JX_LIST ? LIST_METHODS : NULL};
    for (int t = 0; t < 3; t++)
        for (int i = 0; tables[t] && tables[t][i]; i++)
            if (strlen(tables[t][i]) == n && memcmp(tables[t][i], s, n) == 0)
                return tables[t][i];
    return NULL;
}

static bool method_trampoline(jx_ctx *ctx, const jx_value *self,
                              const jx_args *args, jx_value *out) {
    bool found = false;
    /* The method name is carried by the function object that holds self. */
    const jx_obj *fn = (const jx_obj *)((const char *)self - offsetof(jx_obj, u.fn.self));
    if (!jx_call_method(ctx, *self, fn->u.fn.name, args, out, &found)) return false;
    if (!found)
        return jx_fail(ctx, "access to attribute '%s' of '%s' object is unsafe.",
                       fn->u.fn.name, jx_type_name(*self));
    return true;
}

/* obj.name / obj[key]: Jinja tries the attribute first for `.` and the item
 * first for `[]`; here attributes are the Python methods of str/dict/list. */
static bool get_item(jx_ctx *ctx, jx_value obj, jx_value key, bool attr_first,
                     jx_value *out) {
    *out = JX_UNDEFINED;
    if (obj.t == JX_UNDEF) {
        if (key.t == JX_STR)
            return jx_fail(ctx, "'%s' is undefined (attribute of an undefined value)", jx_s(key));
        return jx_fail(ctx, "item of an undefined value");
    }
    const char *mname = key.t == JX_STR ? method_name(obj, jx_s(key), jx_slen(key)) : NULL;
    if (attr_first && mname) return bound_method(ctx, obj, mname, out);
    if (jx_iterator(obj)) {
        /* An iterator has no items to subscript: undefined, as in jinja2. */
    } else if (jx_is_map(obj)) {
        const jx_value *v = jx_dict_get(obj, key);
        if (v) {
            *out = jx_ref(*v);
            return true;
        }
    } else if ((obj.t == JX_LIST || obj.t == JX_STR) && (key.t == JX_INT || key.t == JX_BOOL)) {
        int64_t i = jx_int_of(key);
        size_t n = obj.t == JX_LIST ? obj.u.o->u.list.n : sp_utf8_count(jx_s(obj), jx_slen(obj));
        if (i < 0) i += (int64_t)n;
        if (i >= 0 && (size_t)i < n) {
            if (obj.t == JX_LIST) {
                *out = jx_ref(obj.u.o->u.list.v[i]);
                return true;
            }
            size_t a = sp_utf8_offset(jx_s(obj), jx_slen(obj), (size_t)i);
            size_t b = sp_utf8_offset(jx_s(obj), jx_slen(obj), (size_t)i + 1);
            if (!jx_str_new(jx_s(obj) + a, b - a, out)) return jx_fail(ctx, "out of memory");
            return true;
        }
    }
    if (mname) return bound_method(ctx, obj, mname, out);
    return true;
}

bool jx_getattr(jx_ctx *ctx, jx_value obj, jx_value key, jx_value *out) {
    return get_item(ctx, obj, key, false, out);
}

/* ---------------------------------------------------------------- iterables */

/* Take the first n items out of an iterator: what was iterated is gone. */
void jx_drain(jx_value it, size_t n) {
    jx_obj *o = it.u.o;
    if (n == 0) return; /* an empty list may have no storage to move */
    for (size_t i = 0; i < n; i++) jx_unref(o->u.list.v[i]);
    memmove(o->u.list.v, o->u.list.v + n, (o->u.list.n - n) * sizeof *o->u.list.v);
    o->u.list.n -= n;
}

bool jx_to_list(jx_ctx *ctx, jx_value v, jx_value *out) {
    switch (v.t) {
    case JX_UNDEF:
        return jx_list_new(0, false, out) || jx_fail(ctx, "out of memory");
    case JX_LIST: {
        jx_obj *o = v.u.o;
        if (!jx_list_new(o->u.list.n, false, out)) return jx_fail(ctx, "out of memory");
        for (size_t i = 0; i < o->u.list.n; i++) jx_list_push(*out, jx_ref(o->u.list.v[i]));
        if (o->u.list.iterator) jx_drain(v, o->u.list.n);
        return true;
    }
    case JX_DICT: {
        jx_obj *o = v.u.o;
        if (!jx_list_new(o->u.dict.n, false, out)) return jx_fail(ctx, "out of memory");
        for (size_t i = 0; i < o->u.dict.n; i++) jx_list_push(*out, jx_ref(o->u.dict.k[i]));
        return true;
    }
    case JX_STR: {
        const char *s = jx_s(v);
        size_t n = jx_slen(v);
        if (!jx_list_new(n, false, out)) return jx_fail(ctx, "out of memory");
        for (size_t i = 0; i < n;) {
            int k;
            sp_utf8_next(s + i, n - i, &k);
            jx_value c;
            if (!jx_str_new(s + i, k, &c) || !jx_list_push(*out, c)) {
                jx_unref(*out);
                return jx_fail(ctx, "out of memory");
            }
            i += k;
        }
        return true;
    }
    default:
        return jx_fail(ctx, "'%s' object is not iterable", jx_type_name(v));
    }
}

/* -------------------------------------------------------------- expressions */

typedef struct ev {
    jx_ctx *ctx;
    jx_frame *frame;
} ev;

static bool eval(ev *e, const jx_node *n, jx_value *out);

/* Evaluated call arguments; released with args_free. */
typedef struct argv_t {
    jx_value pos[16], kw[16];
    size_t npos, nkw;
    jx_args a;
} argv_t;

static void args_free(argv_t *av) {
    for (size_t i = 0; i < av->npos; i++) jx_unref(av->pos[i]);
    for (size_t i = 0; i < av->nkw; i++) jx_unref(av->kw[i]);
    av->npos = av->nkw = 0;
}

static bool eval_args(ev *e, const jx_node *n, argv_t *av) {
    av->npos = av->nkw = 0;
    if (n->list.n > 16 || n->list2.n > 16) return jx_fail(e->ctx, "too many arguments");
    for (size_t i = 0; i < n->list.n; i++) {
        if (!eval(e, n->list.v[i], &av->pos[i])) return args_free(av), false;
        av->npos++;
    }
    for (size_t i = 0; i < n->list2.n; i++) {
        if (!eval(e, n->list2.v[i], &av->kw[i])) return args_free(av), false;
        av->nkw++;
    }
    av->a = (jx_args){av->pos, av->npos, n->kwnames, av->kw, av->nkw};
    return true;
}

static bool eval_filter(ev *e, const jx_node *n, const jx_value *subject, jx_value *out) {
    jx_value v;
    if (n->a) {
        if (!eval(e, n->a, &v)) return false;
    } else if (subject) {
        v = jx_ref(*subject);
    } else {
        return jx_fail(e->ctx, "filter without a subject");
    }
    argv_t av;
    if (!eval_args(e, n, &av)) return jx_unref(v), false;
    AT(e->ctx, n);
    bool ok = jx_apply_filter(e->ctx, n->name, v, &av.a, out);
    args_free(&av);
    jx_unref(v);
    return ok;
}

/* A filter chain whose innermost subject is `subject` (block set/filter). */
static bool eval_filter_chain(ev *e, const jx_node *n, jx_value subject, jx_value *out) {
    if (n->a) {
        jx_value inner;
        if (!eval_filter_chain(e, n->a, subject, &inner)) return false;
        argv_t av;
        if (!eval_args(e, n, &av)) return jx_unref(inner), false;
        AT(e->ctx, n);
        bool ok = jx_apply_filter(e->ctx, n->name, inner, &av.a, out);
        args_free(&av);
        jx_unref(inner);
        return ok;
    }
    return eval_filter(e, n, &subject, out);
}

/* i + step, or hi (the end) when that passes int64 ([1::2**63-1]). */
static int64_t next_index(int64_t i, int64_t step, int64_t hi) {
    int64_t next;
    return __builtin_add_overflow(i, step, &next) ? hi : next;
}

static bool slice(jx_ctx *ctx, jx_value obj, const jx_value *bounds, jx_value *out) {
    if (obj.t != JX_LIST && obj.t != JX_STR) {
        if (obj.t == JX_UNDEF) return jx_fail(ctx, "cannot slice an undefined value");
        return jx_fail(ctx, "'%s' object is not subscriptable", jx_type_name(obj));
    }
    int64_t v[3];
    for (int i = 0; i < 3; i++) {
        if (bounds[i].t == JX_NONE || bounds[i].t == JX_UNDEF) v[i] = INT64_MIN;
        else if (bounds[i].t == JX_INT || bounds[i].t == JX_BOOL)
            v[i] = jx_int_of(bounds[i]);
        else return jx_fail(ctx, "slice indices must be integers or None");
    }
    int64_t step = v[2] == INT64_MIN ? 1 : v[2];
    if (step == 0) return jx_fail(ctx, "slice step cannot be zero");
    int64_t n = obj.t == JX_LIST ? (int64_t)obj.u.o->u.list.n
                                 : (int64_t)sp_utf8_count(jx_s(obj), jx_slen(obj));
    /* CPython's PySlice_AdjustIndices. */
    int64_t lo = v[0], hi = v[1];
    if (lo == INT64_MIN) lo = step < 0 ? n - 1 : 0;
    else {
        if (lo < 0) lo += n;
        if (lo < 0) lo = step < 0 ? -1 : 0;
        else if (lo >= n) lo = step < 0 ? n - 1 : n;
    }
    if (hi == INT64_MIN) hi = step < 0 ? -1 : n;
    else {
        if (hi < 0) hi += n;
        if (hi < 0) hi = step < 0 ? -1 : 0;
        else if (hi >= n) hi = step < 0 ? n - 1 : n;
    }
    if (obj.t == JX_LIST) {
        if (!jx_list_new(0, obj.u.o->u.list.tuple, out)) return jx_fail(ctx, "out of memory");
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i = next_index(i, step, hi))
            jx_list_push(*out, jx_ref(obj.u.o->u.list.v[i]));
        return true;
    }
    const char *s = jx_s(obj);
    size_t len = jx_slen(obj);
    sp_strbuf b = jx_strbuf();
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i = next_index(i, step, hi)) {
        size_t a = sp_utf8_offset(s, len, (size_t)i), z = sp_utf8_offset(s, len, (size_t)i + 1);
        sp_strbuf_add(&b, s + a, z - a);
    }
    bool ok = jx_strbuf_ok(&b) && jx_str_new(b.p ? b.p : "", b.len, out);
    sp_strbuf_free(&b);
    return ok || jx_fail(ctx, "out of memory");
}

/* [..], (..,) and {..: ..} literals. */
static bool eval_container(ev *e, const jx_node *n, jx_value *out) {
    jx_ctx *ctx = e->ctx;
    jx_value a, b;
    if (n->kind == JN_DICT) {
        if (!jx_dict_new(JX_DICT, out)) return jx_fail(ctx, "out of memory");
        for (size_t i = 0; i < n->list.n; i++) {
            if (!eval(e, n->list.v[i], &a)) return jx_unref(*out), false;
            if (!eval(e, n->list2.v[i], &b)) return jx_unref(a), jx_unref(*out), false;
            jx_dict_set(*out, a, b);
        }
        return true;
    }
    if (!jx_list_new(n->list.n, n->kind == JN_TUPLE, out)) return jx_fail(ctx, "out of memory");
    for (size_t i = 0; i < n->list.n; i++) {
        if (!eval(e, n->list.v[i], &a)) return jx_unref(*out), false;
        jx_list_push(*out, a);
    }
    return true;
}

/* x.name, x[key] and x[lo:hi:step]. */
static bool eval_access(ev *e, const jx_node *n, jx_value *out) {
    jx_ctx *ctx = e->ctx;
    jx_value a, b;
    if (!eval(e, n->a, &a)) return false;
    bool ok = true;
    if (n->kind == JN_SLICE) {
        jx_value bounds[3] = {JX_NONEV, JX_NONEV, JX_NONEV};
        const jx_node *parts[3] = {n->b, n->c, n->d};
        for (int i = 0; i < 3 && ok; i++)
            if (parts[i]) ok = eval(e, parts[i], &bounds[i]);
        AT(ctx, n);
        ok = ok && slice(ctx, a, bounds, out);
        for (int i = 0; i < 3; i++) jx_unref(bounds[i]);
        jx_unref(a);
        return ok;
    }
    if (n->kind == JN_ATTR) {
        AT(ctx, n);
        if (!jx_str_cstr(n->name, &b)) return jx_unref(a), jx_fail(ctx, "out of memory");
    } else if (!eval(e, n->b, &b)) {
        return jx_unref(a), false;
    }
    AT(ctx, n);
    ok = get_item(ctx, a, b, n->kind == JN_ATTR, out);
    jx_unref(a);
    jx_unref(b);
    return ok;
}

/* f(args) and `x is test(args)`. */
static bool eval_call(ev *e, const jx_node *n, jx_value *out) {
    jx_ctx *ctx = e->ctx;
    jx_value a;
    if (!eval(e, n->a, &a)) return false;
    argv_t av;
    if (!eval_args(e, n, &av)) return jx_unref(a), false;
    AT(ctx, n);
    bool ok;
    if (n->kind == JN_CALL) {
        ok = jx_call_value(ctx, a, &av.a, out);
    } else {
        bool r = false;
        ok = jx_apply_test(ctx, n->name, a, &av.a, &r);
        *out = jx_bool(n->flag ? !r : r);
    }
    args_free(&av);
    jx_unref(a);
    return ok;
}

/* -x, +x and `not x`. */
static bool eval_unary(ev *e, const jx_node *n, jx_value *out) {
    jx_ctx *ctx = e->ctx;
    jx_value a;
    if (!eval(e, n->a, &a)) return false;
    if (n->kind == JN_NOT) {
        *out = jx_bool(!jx_truthy(a));
        jx_unref(a);
        return true;
    }
    AT(ctx, n);
    if (!jx_is_num(a)) {
        bool r = jx_fail(ctx, "bad operand type for unary %s: '%s'",
                         n->kind == JN_NEG ? "-" : "+", jx_type_name(a));
        jx_unref(a);
        return r;
    }
    if (n->kind == JN_POS) *out = a.t == JX_BOOL ? jx_int(a.u.b) : a;
    else if (a.t == JX_FLOAT) *out = jx_float(-a.u.f);
    else {
        int64_t neg;
        /* -INT64_MIN does not fit: go to float, as num_binop does. */
        *out = __builtin_sub_overflow(0, jx_int_of(a), &neg) ? jx_float(-(double)jx_int_of(a))
                                                             : jx_int(neg);
    }
    return true;
}

/* a ~ b ~ c: every operand's string form, joined. */
static bool eval_concat(ev *e, const jx_node *n, jx_value *out) {
    jx_value a;
    sp_strbuf buf = jx_strbuf();
    for (size_t i = 0; i < n->list.n; i++) {
        if (!eval(e, n->list.v[i], &a)) return sp_strbuf_free(&buf), false;
        jx_write_str(&buf, a);
        jx_unref(a);
    }
    bool ok = jx_strbuf_ok(&buf) && jx_str_new(buf.p ? buf.p : "", buf.len, out);
    sp_strbuf_free(&buf);
    return ok || jx_fail(e->ctx, "out of memory");
}

/* a < b <= c ...: chained, each operand evaluated once, stopping at the
 * first false comparison as Python does. */
static bool eval_compare(ev *e, const jx_node *n, jx_value *out) {
    jx_ctx *ctx = e->ctx;
    jx_value a, b;
    if (!eval(e, n->a, &a)) return false;
    bool r = true;
    for (size_t i = 0; i < n->list.n && r; i++) {
        if (!eval(e, n->list.v[i], &b)) return jx_unref(a), false;
        AT(ctx, n);
        if (!jx_compare(ctx, jx_compare_code(n->kwnames[i]), a, b, &r))
            return jx_unref(a), jx_unref(b), false;
        jx_unref(a);
        a = b;
    }
    jx_unref(a);
    *out = jx_bool(r);
    return true;
}

/* and / or (short-circuit, yielding an operand), arithmetic. */
static bool eval_binary(ev *e, const jx_node *n, jx_value *out) {
    jx_ctx *ctx = e->ctx;
    jx_value a, b;
    if (!eval(e, n->a, &a)) return false;
    if (n->kind != JN_BINOP) {
        if (jx_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return true;
        }
        jx_unref(a);
        return eval(e, n->b, out);
    }
    if (!eval(e, n->b, &b)) return jx_unref(a), false;
    AT(ctx, n);
    bool ok = jx_arith(ctx, n->op, a, b, out);
    jx_unref(a);
    jx_unref(b);
    return ok;
}

static bool eval_inner(ev *e, const jx_node *n, jx_value *out) {
    jx_ctx *ctx = e->ctx;
    *out = JX_UNDEFINED;
    switch (n->kind) {
    case JN_CONST: *out = jx_ref(n->value); return true;
    case JN_NAME: {
        const jx_value *v = jx_frame_lookup(e->frame, n->name);
        if (v) *out = jx_ref(*v);
        else if (!jx_lookup_global(n->name, out)) return jx_fail(ctx, "out of memory");
        return true;
    }
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT: return eval_container(e, n, out);
    case JN_ATTR:
    case JN_ITEM:
    case JN_SLICE: return eval_access(e, n, out);
    case JN_CALL:
    case JN_TEST: return eval_call(e, n, out);
    case JN_FILTER: return eval_filter(e, n, NULL, out);
    case JN_NEG:
    case JN_POS:
    case JN_NOT: return eval_unary(e, n, out);
    case JN_AND:
    case JN_OR:
    case JN_BINOP: return eval_binary(e, n, out);
    case JN_CONCAT: return eval_concat(e, n, out);
    case JN_COMPARE: return eval_compare(e, n, out);
    case JN_COND: {
        jx_value a;
        if (!eval(e, n->b, &a)) return false;
        bool t = jx_truthy(a);
        jx_unref(a);
        if (t) return eval(e, n->a, out);
        if (n->c) return eval(e, n->c, out);
        return true;
    }
    default:
        AT(ctx, n);
        return jx_fail(ctx, "statement used as an expression");
    }
}

static bool eval(ev *e, const jx_node *n, jx_value *out) {
    jx_ctx *ctx = e->ctx;
    AT(ctx, n);
    if (++ctx->depth > ctx->limits->max_depth) {
        *out = JX_UNDEFINED;
        return jx_limit_fail(ctx, "maximum recursion depth exceeded");
    }
    bool ok = eval_inner(e, n, out);
    ctx->depth--;
    if (!ok) {
        *out = JX_UNDEFINED;
        if (!ctx->failed) jx_fail(ctx, "evaluation failed");
    }
    return ok;
}

bool jx_eval(jx_ctx *ctx, jx_frame *frame, const jx_node *n, jx_value *out) {
    ev e = {ctx, frame};
    return eval(&e, n, out);
}

bool jx_eval_filters(jx_ctx *ctx, jx_frame *frame, const jx_node *chain,
                     jx_value subject, jx_value *out) {
    ev e = {ctx, frame};
    return eval_filter_chain(&e, chain, subject, out);
}

bool jx_eval_call(jx_ctx *ctx, jx_frame *frame, const jx_node *n,
                  const char *xname, jx_value xval, jx_value *out) {
    ev e = {ctx, frame};
    jx_value fn;
    *out = JX_UNDEFINED;
    if (!eval(&e, n->a, &fn)) return false;
    argv_t av;
    if (!eval_args(&e, n, &av)) return jx_unref(fn), false;
    if (av.nkw >= 16) {
        args_free(&av);
        jx_unref(fn);
        return jx_fail(ctx, "too many arguments");
    }
    const char *names[17];
    for (size_t i = 0; i < av.nkw; i++) names[i] = n->kwnames[i];
    names[av.nkw] = xname;
    av.kw[av.nkw++] = jx_ref(xval);
    av.a = (jx_args){av.pos, av.npos, names, av.kw, av.nkw};
    AT(ctx, n);
    bool ok = jx_call_value(ctx, fn, &av.a, out);
    args_free(&av);
    jx_unref(fn);
    return ok;
}
