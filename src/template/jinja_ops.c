/* Jinja's operators on values: arithmetic (+ - * / // % ** with Python's
 * int/float rules and overflow to float), string and list repetition,
 * Markup-aware concatenation, and the comparisons (== != < <= > >= in). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "template/jinja_impl.h"
#include "template/jinja_str.h"

/* ---------------------------------------------------------------- operators */

/* x ** y by squaring (y >= 0); false when the result passes int64. */
static bool int_pow(int64_t x, int64_t y, int64_t *out) {
    int64_t acc = 1;
    for (;;) {
        if ((y & 1) && __builtin_mul_overflow(acc, x, &acc)) return false;
        y >>= 1;
        if (!y) break;
        if (__builtin_mul_overflow(x, x, &x)) return false;
    }
    *out = acc;
    return true;
}

static bool num_binop(jx_ctx *ctx, int op, jx_value a, jx_value b, jx_value *out) {
    bool ints = a.t != JX_FLOAT && b.t != JX_FLOAT;
    int64_t x = jx_int_of(a), y = jx_int_of(b);
    double fx = a.t == JX_FLOAT ? a.u.f : (double)x, fy = b.t == JX_FLOAT ? b.u.f : (double)y;
    int64_t r;
    switch (op) {
    case '+':
        if (ints && !__builtin_add_overflow(x, y, &r)) return *out = jx_int(r), true;
        return *out = jx_float(fx + fy), true;
    case '-':
        if (ints && !__builtin_sub_overflow(x, y, &r)) return *out = jx_int(r), true;
        return *out = jx_float(fx - fy), true;
    case '*':
        if (ints && !__builtin_mul_overflow(x, y, &r)) return *out = jx_int(r), true;
        return *out = jx_float(fx * fy), true;
    case '/':
        if (fy == 0) return jx_fail(ctx, "division by zero");
        return *out = jx_float(fx / fy), true;
    case 'f':
    case '%':
        if (ints) {
            if (y == 0) return jx_fail(ctx, "integer division or modulo by zero");
            /* (INT64_MIN // -1 passes int64: a float, as + - * do) */
            if (y == -1 && op == 'f' && x == INT64_MIN) return *out = jx_float(-(double)x), true;
            if (y == -1) return *out = jx_int(op == 'f' ? -x : 0), true;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return *out = jx_int(op == 'f' ? q : m), true;
        }
        if (fy == 0) return jx_fail(ctx, "float division by zero");
        {
            /* CPython's float_divmod: floor(fx / fy) would round 7 // 0.1
             * to 70.0 where Python gives 69.0. */
            double m = fmod(fx, fy), div = (fx - m) / fy;
            if (m != 0 && ((m < 0) != (fy < 0))) {
                m += fy;
                div -= 1.0;
            }
            if (op == '%') return *out = jx_float(m), true;
            double q = div != 0 ? floor(div) : copysign(0.0, fx / fy);
            if (div != 0 && div - q > 0.5) q += 1.0;
            return *out = jx_float(q), true;
        }
    case 'p':
        if (ints && y >= 0 && int_pow(x, y, &r)) return *out = jx_int(r), true;
        return *out = jx_float(pow(fx, fy)), true;
    }
    return jx_fail(ctx, "bad operator");
}

static const char *op_name(int op) {
    switch (op) {
    case 'f': return "//";
    case 'p': return "**";
    case '+': return "+";
    case '-': return "-";
    case '*': return "*";
    case '/': return "/";
    default: return "%";
    }
}

static bool repeat(jx_ctx *ctx, jx_value seq, int64_t n, jx_value *out) {
    if (n < 0) n = 0;
    if (seq.t == JX_STR) {
        size_t len = jx_slen(seq);
        if (len && (uint64_t)n > (ctx->limits->max_output ? ctx->limits->max_output : SIZE_MAX) / len)
            return jx_limit_fail(ctx, "string repetition exceeds the output limit");
        sp_strbuf b = jx_strbuf();
        for (int64_t i = 0; i < n; i++) sp_strbuf_add(&b, jx_s(seq), len);
        bool ok = jx_strbuf_ok(&b) && jx_str_new(b.p ? b.p : "", b.len, out);
        sp_strbuf_free(&b);
        return ok || jx_fail(ctx, "out of memory");
    }
    jx_obj *o = seq.u.o;
    if (o->u.list.n && (uint64_t)n > 1000000 / o->u.list.n)
        return jx_limit_fail(ctx, "list repetition too large");
    if (!jx_list_new(0, o->u.list.tuple, out)) return jx_fail(ctx, "out of memory");
    for (int64_t i = 0; i < n; i++)
        for (size_t j = 0; j < o->u.list.n; j++) jx_list_push(*out, jx_ref(o->u.list.v[j]));
    return true;
}

/* Markup.__add__ / __radd__: the plain operand is escaped, the sum is Markup. */
static bool markup_add(jx_ctx *ctx, jx_value a, jx_value b, jx_value *out) {
    jx_value ea, eb;
    if (!jx_escape(ctx, a, false, &ea)) return false;
    if (!jx_escape(ctx, b, false, &eb)) return jx_unref(ea), false;
    sp_strbuf buf = jx_strbuf();
    sp_strbuf_add(&buf, jx_s(ea), jx_slen(ea));
    sp_strbuf_add(&buf, jx_s(eb), jx_slen(eb));
    jx_unref(ea);
    jx_unref(eb);
    if (!jx_str_from_buf(ctx, &buf, out)) return false;
    out->u.o->u.str.markup = true;
    return true;
}

bool jx_arith(jx_ctx *ctx, int op, jx_value a, jx_value b, jx_value *out) {
    if (op == '%' && jx_is_markup(a)) return jx_markup_percent(ctx, a, b, out);
    if (op == '%' && a.t == JX_STR) return jx_percent_format(ctx, a, b, out);
    if (a.t == JX_UNDEF || b.t == JX_UNDEF)
        return jx_fail(ctx, "unsupported operand: an operand of '%s' is undefined", op_name(op));
    if (jx_is_num(a) && jx_is_num(b)) return num_binop(ctx, op, a, b, out);
    if (op == '+' && a.t == JX_STR && b.t == JX_STR && (jx_is_markup(a) || jx_is_markup(b)))
        return markup_add(ctx, a, b, out);
    if (op == '+' && a.t == JX_STR && b.t == JX_STR) {
        sp_strbuf buf = jx_strbuf();
        sp_strbuf_add(&buf, jx_s(a), jx_slen(a));
        sp_strbuf_add(&buf, jx_s(b), jx_slen(b));
        bool ok = jx_strbuf_ok(&buf) && jx_str_new(buf.p ? buf.p : "", buf.len, out);
        sp_strbuf_free(&buf);
        return ok || jx_fail(ctx, "out of memory");
    }
    if (op == '+' && a.t == JX_LIST && b.t == JX_LIST &&
        a.u.o->u.list.tuple == b.u.o->u.list.tuple) {
        if (!jx_list_new(0, a.u.o->u.list.tuple, out)) return jx_fail(ctx, "out of memory");
        for (size_t i = 0; i < a.u.o->u.list.n; i++) jx_list_push(*out, jx_ref(a.u.o->u.list.v[i]));
        for (size_t i = 0; i < b.u.o->u.list.n; i++) jx_list_push(*out, jx_ref(b.u.o->u.list.v[i]));
        return true;
    }
    if (op == '*' && (a.t == JX_STR || a.t == JX_LIST) && (b.t == JX_INT || b.t == JX_BOOL))
        return repeat(ctx, a, jx_int_of(b), out);
    if (op == '*' && (b.t == JX_STR || b.t == JX_LIST) && (a.t == JX_INT || a.t == JX_BOOL))
        return repeat(ctx, b, jx_int_of(a), out);
    return jx_fail(ctx, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op),
                   jx_type_name(a), jx_type_name(b));
}

static int order(jx_ctx *ctx, jx_value a, jx_value b, bool *ok) {
    *ok = true;
    if (jx_is_num(a) && jx_is_num(b)) {
        if (a.t != JX_FLOAT && b.t != JX_FLOAT) {
            int64_t x = jx_int_of(a), y = jx_int_of(b);
            return (x > y) - (x < y);
        }
        double x = jx_num_of(a);
        double y = jx_num_of(b);
        return (x > y) - (x < y);
    }
    if (a.t == JX_STR && b.t == JX_STR) {
        size_t la = jx_slen(a), lb = jx_slen(b);
        int c = memcmp(jx_s(a), jx_s(b), la < lb ? la : lb);
        return c ? (c > 0) - (c < 0) : (la > lb) - (la < lb);
    }
    if (a.t == JX_LIST && b.t == JX_LIST) {
        jx_obj *x = a.u.o, *y = b.u.o;
        for (size_t i = 0; i < x->u.list.n && i < y->u.list.n; i++) {
            if (jx_equal(x->u.list.v[i], y->u.list.v[i])) continue;
            return order(ctx, x->u.list.v[i], y->u.list.v[i], ok);
        }
        return (x->u.list.n > y->u.list.n) - (x->u.list.n < y->u.list.n);
    }
    *ok = false;
    return 0;
}

bool jx_compare(jx_ctx *ctx, int op, jx_value a, jx_value b, bool *out) {
    switch (op) {
    case '=': *out = jx_equal(a, b); return true;
    case '!': *out = !jx_equal(a, b); return true;
    case 'i':
    case 'n': {
        bool r = false;
        if (b.t == JX_STR) {
            if (a.t != JX_STR)
                return jx_fail(ctx, "'in <string>' requires string as left operand, not %s", jx_type_name(a));
            r = jx_slen(a) == 0 || memmem(jx_s(b), jx_slen(b), jx_s(a), jx_slen(a)) != NULL;
        } else if (b.t == JX_LIST) {
            for (size_t i = 0; i < b.u.o->u.list.n && !r; i++) r = jx_equal(a, b.u.o->u.list.v[i]);
        } else if (jx_is_map(b)) {
            r = jx_dict_get(b, a) != NULL;
        } else if (b.t == JX_UNDEF) {
            r = false; /* Undefined iterates as empty */
        } else {
            return jx_fail(ctx, "argument of type '%s' is not iterable", jx_type_name(b));
        }
        *out = op == 'i' ? r : !r;
        return true;
    }
    default: {
        bool ok;
        int c = order(ctx, a, b, &ok);
        if (!ok)
            return jx_fail(ctx, "'%s' not supported between instances of '%s' and '%s'",
                           op == '<' ? "<" : op == 'l' ? "<=" : op == '>' ? ">" : ">=",
                           jx_type_name(a), jx_type_name(b));
        *out = op == '<' ? c < 0 : op == 'l' ? c <= 0 : op == '>' ? c > 0 : c >= 0;
        return true;
    }
    }
}

int jx_compare_code(const char *s) {
    if (!strcmp(s, "==")) return '=';
    if (!strcmp(s, "!=")) return '!';
    if (!strcmp(s, "<")) return '<';
    if (!strcmp(s, "<=")) return 'l';
    if (!strcmp(s, ">")) return '>';
    if (!strcmp(s, ">=")) return 'g';
    if (!strcmp(s, "in")) return 'i';
    return 'n';
}

