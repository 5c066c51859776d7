/* Jinja parser: tokens -> AST. The grammar and operator precedence follow
 * jinja2.parser (conditional < or < and < not < comparisons < + - < ~ <
 * * / // % < ** < unary, with filters and tests binding to the unary
 * operand), so that templates mean the same thing as in Python. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "template/jinja_parser.h"

void *jx_tpl_alloc(sp_jinja_template *tpl, size_t size) {
    if (tpl->nblocks == tpl->capblocks) {
        size_t cap = tpl->capblocks ? tpl->capblocks * 2 : 64;
        void **b = realloc(tpl->blocks, cap * sizeof *b);
        if (!b) return NULL;
        tpl->blocks = b;
        tpl->capblocks = cap;
    }
    void *p = calloc(1, size ? size : 1);
    if (p) tpl->blocks[tpl->nblocks++] = p;
    return p;
}

void *jxp_fail_at(parser *p, const jx_token *t, const char *fmt, ...) {
    if (p->failed) return NULL;
    p->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sp_fail(p->err, SPINDLE_ERR_TEMPLATE, "template line %d, column %d: %s",
            t->line, t->col, msg);
    return NULL;
}

const char *jxp_tok_desc(const jx_token *t, char *buf, size_t n) {
    switch (t->type) {
    case JT_EOF: return "end of template";
    case JT_VAR_END: return "end of print statement";
    case JT_BLOCK_END: return "end of statement block";
    case JT_VAR_BEGIN: return "begin of print statement";
    case JT_BLOCK_BEGIN: return "begin of statement block";
    case JT_STRING: return "string";
    default:
        {
            size_t k = t->len > 40 ? 40 : t->len;
            while (k < t->len && k > 0 && sp_utf8_is_continuation((unsigned char)t->s[k])) k--;
            snprintf(buf, n, "'%.*s'", (int)k, t->s);
        }
        return buf;
    }
}

void *jxp_unexpected(parser *p) {
    char b[64];
    return jxp_fail_at(p, cur(p), "unexpected %s", jxp_tok_desc(cur(p), b, sizeof b));
}

bool jxp_expect_op(parser *p, const char *s) {
    if (is_op(p, s)) {
        next(p);
        return true;
    }
    char b[64];
    jxp_fail_at(p, cur(p), "expected '%s', got %s", s, jxp_tok_desc(cur(p), b, sizeof b));
    return false;
}

bool jxp_expect_type(parser *p, jx_tok_type type, const char *what) {
    if (cur(p)->type == type) {
        next(p);
        return true;
    }
    char b[64];
    jxp_fail_at(p, cur(p), "expected %s, got %s", what, jxp_tok_desc(cur(p), b, sizeof b));
    return false;
}

jx_node *jxp_node(parser *p, jx_node_kind kind, const jx_token *at) {
    jx_nodes *all = &p->tpl->nodes;
    if (all->n == all->cap) {
        size_t cap = all->cap ? all->cap * 2 : 64;
        jx_node **v = realloc(all->v, cap * sizeof *v);
        if (!v) return jxp_fail_at(p, at, "out of memory");
        all->v = v;
        all->cap = cap;
    }
    jx_node *n = jx_tpl_alloc(p->tpl, sizeof *n);
    if (!n) return jxp_fail_at(p, at, "out of memory");
    all->v[all->n++] = n;
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

const char *jxp_name_copy(parser *p, const char *s, size_t len) {
    char *c = jx_tpl_alloc(p->tpl, len + 1);
    if (!c) return jxp_fail_at(p, cur(p), "out of memory");
    memcpy(c, s, len);
    return c;
}

bool jxp_push_node(parser *p, jx_nodes *l, jx_node *n) {
    if (!n) return false;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jx_node **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            jxp_fail_at(p, cur(p), "out of memory");
            return false;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
    return true;
}

bool jxp_push_kwname(parser *p, jx_node *n, const char *name) {
    const char **v = realloc((void *)n->kwnames, (n->nkw + 1) * sizeof *v);
    if (!v || !name) {
        if (v) n->kwnames = v;
        jxp_fail_at(p, cur(p), "out of memory");
        return false;
    }
    n->kwnames = v;
    v[n->nkw++] = name;
    return true;
}

static jx_node *parse_unary(parser *p, bool with_filter);
static jx_node *parse_primary(parser *p);
static jx_node *parse_postfix(parser *p, jx_node *n);

/* extra_end: a name that also ends a tuple ("in" for for-loop targets). */
jx_node *jxp_parse_tuple(parser *p, bool simplified, bool with_condexpr,
                            const char *extra_end, bool explicit_parens) {
    const jx_token *start = cur(p);
    jx_node *tup = jxp_node(p, JN_TUPLE, start);
    if (!tup) return NULL;
    bool is_tuple = false;
    for (;;) {
        if (tup->list.n && !jxp_expect_op(p, ",")) return NULL;
        const jx_token *t = cur(p);
        if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || t->type == JT_EOF ||
            tok_is(t, JT_OP, ")") || (extra_end && tok_is(t, JT_NAME, extra_end)))
            break;
        jx_node *e = simplified ? parse_primary(p) : jxp_parse_expression(p, with_condexpr);
        if (!jxp_push_node(p, &tup->list, e)) return NULL;
        if (is_op(p, ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (tup->list.n) {
            jx_node *only = tup->list.v[0];
            free(tup->list.v);
            tup->list.v = NULL;
            tup->list.n = tup->list.cap = 0;
            return only;
        }
        if (!explicit_parens) {
            char b[64];
            return jxp_fail_at(p, cur(p), "expected an expression, got %s",
                           jxp_tok_desc(cur(p), b, sizeof b));
        }
    }
    return tup;
}

static bool parse_call_args(parser *p, jx_node *call) {
    if (!jxp_expect_op(p, "(")) return false;
    while (!is_op(p, ")")) {
        if (call->list.n || call->nkw) {
            if (!jxp_expect_op(p, ",")) return false;
            if (is_op(p, ")")) break;
        }
        if (is_op(p, "*") || is_op(p, "**")) {
            jxp_fail_at(p, cur(p), "*args and **kwargs in calls are not supported");
            return false;
        }
        if (cur(p)->type == JT_NAME && tok_is(peek(p, 1), JT_OP, "=")) {
            const char *kn = jxp_name_copy(p, cur(p)->s, cur(p)->len);
            next(p);
            next(p);
            if (!jxp_push_kwname(p, call, kn)) return false;
            if (!jxp_push_node(p, &call->list2, jxp_parse_expression(p, true))) return false;
        } else {
            if (call->nkw) {
                jxp_fail_at(p, cur(p), "invalid syntax for function call expression");
                return false;
            }
            if (!jxp_push_node(p, &call->list, jxp_parse_expression(p, true))) return false;
        }
    }
    next(p);
    return true;
}

static const char *parse_dotted_name(parser *p) {
    if (cur(p)->type != JT_NAME) {
        char b[64];
        return jxp_fail_at(p, cur(p), "expected a name, got %s", jxp_tok_desc(cur(p), b, sizeof b));
    }
    const char *start = cur(p)->s;
    const char *end = start + cur(p)->len;
    next(p);
    while (is_op(p, ".") && peek(p, 1)->type == JT_NAME) {
        next(p);
        end = cur(p)->s + cur(p)->len;
        next(p);
    }
    return jxp_name_copy(p, start, (size_t)(end - start));
}

jx_node *jxp_parse_filter(parser *p, jx_node *subject, bool start_inline) {
    while (is_op(p, "|") || start_inline) {
        if (!start_inline) next(p);
        start_inline = false;
        jx_node *f = jxp_node(p, JN_FILTER, cur(p));
        if (!f) return NULL;
        f->name = parse_dotted_name(p);
        if (!f->name) return NULL;
        f->a = subject;
        if (is_op(p, "(") && !parse_call_args(p, f)) return NULL;
        subject = f;
    }
    return subject;
}

static jx_node *parse_test(parser *p, jx_node *subject) {
    jx_node *t = jxp_node(p, JN_TEST, cur(p));
    if (!t) return NULL;
    next(p); /* is */
    if (is_name(p, "not")) {
        next(p);
        t->flag = true;
    }
    t->line = cur(p)->line;
    t->col = cur(p)->col;
    t->name = parse_dotted_name(p);
    if (!t->name) return NULL;
    t->a = subject;
    const jx_token *c = cur(p);
    if (is_op(p, "(")) {
        if (!parse_call_args(p, t)) return NULL;
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT ||
                c->type == JT_FLOAT || tok_is(c, JT_OP, "[") || tok_is(c, JT_OP, "{")) &&
               !tok_is(c, JT_NAME, "else") && !tok_is(c, JT_NAME, "or") &&
               !tok_is(c, JT_NAME, "and")) {
        if (tok_is(c, JT_NAME, "is"))
            return jxp_fail_at(p, c, "You cannot chain multiple tests with is");
        jx_node *arg = parse_postfix(p, parse_primary(p));
        if (!jxp_push_node(p, &t->list, arg)) return NULL;
    }
    return t;
}

/* `callee(args)`: errors of a call point at what is called. */
static jx_node *parse_call(parser *p, jx_node *callee) {
    jx_node *call = jxp_node(p, JN_CALL, cur(p));
    if (!call) return NULL;
    call->line = callee->line;
    call->col = callee->col;
    call->a = callee;
    return parse_call_args(p, call) ? call : NULL;
}

static jx_node *parse_filter_expr(parser *p, jx_node *n) {
    while (n) {
        if (is_op(p, "|")) {
            n = jxp_parse_filter(p, n, false);
        } else if (is_name(p, "is")) {
            n = parse_test(p, n);
        } else if (is_op(p, "(")) {
            n = parse_call(p, n);
        } else {
            break;
        }
    }
    return n;
}

static jx_node *parse_subscript(parser *p, jx_node *obj) {
    const jx_token *at = cur(p);
    next(p); /* [ */
    jx_node *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (is_op(p, ":")) {
            slice = true;
            if (++k > 2) return jxp_unexpected(p);
            next(p);
            continue;
        }
        if (is_op(p, "]")) break;
        if (parts[k]) return jxp_unexpected(p);
        parts[k] = jxp_parse_expression(p, true);
        if (!parts[k]) return NULL;
        if (!slice && !is_op(p, ":")) break;
    }
    if (!jxp_expect_op(p, "]")) return NULL;
    jx_node *n = jxp_node(p, slice ? JN_SLICE : JN_ITEM, at);
    if (!n) return NULL;
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    if (!slice && !parts[0]) return jxp_fail_at(p, at, "expected an expression in subscript");
    return n;
}

static jx_node *parse_postfix(parser *p, jx_node *n) {
    while (n) {
        if (is_op(p, ".")) {
            const jx_token *at = cur(p);
            next(p);
            const jx_token *t = cur(p);
            if (t->type == JT_NAME) {
                jx_node *a = jxp_node(p, JN_ATTR, t);
                if (!a) return NULL;
                a->a = n;
                a->name = jxp_name_copy(p, t->s, t->len);
                next(p);
                n = a;
            } else if (t->type == JT_INT) {
                jx_node *a = jxp_node(p, JN_ITEM, at);
                jx_node *k = jxp_node(p, JN_CONST, t);
                if (!a || !k) return NULL;
                k->value = jx_int(t->ival);
                a->a = n;
                a->b = k;
                next(p);
                n = a;
            } else {
                return jxp_fail_at(p, t, "expected name or number after '.'");
            }
        } else if (is_op(p, "[")) {
            n = parse_subscript(p, n);
        } else if (is_op(p, "(")) {
            n = parse_call(p, n);
        } else {
            break;
        }
    }
    return n;
}

static jx_node *parse_primary(parser *p) {
    if (++p->depth > MAX_PARSE_DEPTH)
        return jxp_fail_at(p, cur(p), "expression nested too deeply");
    const jx_token *t = cur(p);
    jx_node *n = NULL;
    if (t->type == JT_NAME) {
        n = jxp_node(p, JN_CONST, t);
        if (!n) return NULL;
        if (tok_is(t, JT_NAME, "true") || tok_is(t, JT_NAME, "True")) n->value = jx_bool(true);
        else if (tok_is(t, JT_NAME, "false") || tok_is(t, JT_NAME, "False")) n->value = jx_bool(false);
        else if (tok_is(t, JT_NAME, "none") || tok_is(t, JT_NAME, "None")) n->value = JX_NONEV;
        else {
            n->kind = JN_NAME;
            n->name = jxp_name_copy(p, t->s, t->len);
        }
        next(p);
    } else if (t->type == JT_STRING) {
        sp_strbuf b = {0};
        while (cur(p)->type == JT_STRING) {
            sp_strbuf_add(&b, cur(p)->s, cur(p)->len);
            next(p);
        }
        n = jxp_node(p, JN_CONST, t);
        if (!n || b.oom || !jx_str_new(b.p ? b.p : "", b.len, &n->value)) {
            sp_strbuf_free(&b);
            return jxp_fail_at(p, t, "out of memory");
        }
        sp_strbuf_free(&b);
    } else if (t->type == JT_INT || t->type == JT_FLOAT) {
        n = jxp_node(p, JN_CONST, t);
        if (!n) return NULL;
        n->value = t->type == JT_INT ? jx_int(t->ival) : jx_float(t->fval);
        next(p);
    } else if (tok_is(t, JT_OP, "(")) {
        next(p);
        n = jxp_parse_tuple(p, false, true, NULL, true);
        if (!n || !jxp_expect_op(p, ")")) return NULL;
    } else if (tok_is(t, JT_OP, "[")) {
        next(p);
        n = jxp_node(p, JN_LIST, t);
        if (!n) return NULL;
        while (!is_op(p, "]")) {
            if (n->list.n && !jxp_expect_op(p, ",")) return NULL;
            if (is_op(p, "]")) break;
            if (!jxp_push_node(p, &n->list, jxp_parse_expression(p, true))) return NULL;
        }
        next(p);
    } else if (tok_is(t, JT_OP, "{")) {
        next(p);
        n = jxp_node(p, JN_DICT, t);
        if (!n) return NULL;
        while (!is_op(p, "}")) {
            if (n->list.n && !jxp_expect_op(p, ",")) return NULL;
            if (is_op(p, "}")) break;
            if (!jxp_push_node(p, &n->list, jxp_parse_expression(p, true))) return NULL;
            if (!jxp_expect_op(p, ":")) return NULL;
            if (!jxp_push_node(p, &n->list2, jxp_parse_expression(p, true))) return NULL;
        }
        next(p);
    } else {
        return jxp_unexpected(p);
    }
    p->depth--;
    return n;
}

static jx_node *parse_unary(parser *p, bool with_filter) {
    const jx_token *t = cur(p);
    jx_node *n;
    if (++p->depth > MAX_PARSE_DEPTH)
        return jxp_fail_at(p, t, "expression nested too deeply");
    if (tok_is(t, JT_OP, "-") || tok_is(t, JT_OP, "+")) {
        next(p);
        n = jxp_node(p, tok_is(t, JT_OP, "-") ? JN_NEG : JN_POS, t);
        if (!n) return NULL;
        n->a = parse_unary(p, false);
        if (!n->a) return NULL;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static jx_node *binop(parser *p, const jx_token *at, int op, jx_node *l, jx_node *r) {
    if (!l || !r) return NULL;
    jx_node *n = jxp_node(p, JN_BINOP, at);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jx_node *parse_pow(parser *p) {
    jx_node *l = parse_unary(p, true);
    while (l && is_op(p, "**")) {
        const jx_token *at = cur(p);
        next(p);
        l = binop(p, at, 'p', l, parse_unary(p, true));
    }
    return l;
}

static jx_node *parse_math2(parser *p) {
    jx_node *l = parse_pow(p);
    while (l) {
        const jx_token *at = cur(p);
        int op = is_op(p, "*") ? '*' : is_op(p, "/") ? '/' : is_op(p, "//") ? 'f'
               : is_op(p, "%") ? '%' : 0;
        if (!op) break;
        next(p);
        l = binop(p, at, op, l, parse_pow(p));
    }
    return l;
}

static jx_node *parse_concat(parser *p) {
    jx_node *l = parse_math2(p);
    if (!l || !is_op(p, "~")) return l;
    jx_node *n = jxp_node(p, JN_CONCAT, cur(p));
    if (!n || !jxp_push_node(p, &n->list, l)) return NULL;
    while (is_op(p, "~")) {
        next(p);
        if (!jxp_push_node(p, &n->list, parse_math2(p))) return NULL;
    }
    return n;
}

static jx_node *parse_math1(parser *p) {
    jx_node *l = parse_concat(p);
    while (l && (is_op(p, "+") || is_op(p, "-"))) {
        const jx_token *at = cur(p);
        int op = is_op(p, "+") ? '+' : '-';
        next(p);
        l = binop(p, at, op, l, parse_concat(p));
    }
    return l;
}

static jx_node *parse_compare(parser *p) {
    const jx_token *start = cur(p);
    jx_node *l = parse_math1(p);
    if (!l) return NULL;
    jx_node *cmp = NULL;
    for (;;) {
        const char *op = NULL;
        static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
        for (int i = 0; ops[i]; i++)
            if (is_op(p, ops[i])) op = ops[i];
        if (op) {
            next(p);
        } else if (is_name(p, "in")) {
            op = "in";
            next(p);
        } else if (is_name(p, "not") && tok_is(peek(p, 1), JT_NAME, "in")) {
            op = "notin";
            next(p);
            next(p);
        } else {
            break;
        }
        if (!cmp) {
            cmp = jxp_node(p, JN_COMPARE, start);
            if (!cmp) return NULL;
            cmp->a = l;
        }
        if (!jxp_push_kwname(p, cmp, op)) return NULL;
        if (!jxp_push_node(p, &cmp->list, parse_math1(p))) return NULL;
    }
    return cmp ? cmp : l;
}

static jx_node *parse_not(parser *p) {
    if (is_name(p, "not")) {
        jx_node *n = jxp_node(p, JN_NOT, cur(p));
        if (!n) return NULL;
        next(p);
        if (++p->depth > MAX_PARSE_DEPTH)
            return jxp_fail_at(p, cur(p), "expression nested too deeply");
        n->a = parse_not(p);
        p->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(p);
}

static jx_node *parse_and(parser *p) {
    jx_node *l = parse_not(p);
    while (l && is_name(p, "and")) {
        jx_node *n = jxp_node(p, JN_AND, cur(p));
        next(p);
        if (!n) return NULL;
        n->a = l;
        n->b = parse_not(p);
        l = n->b ? n : NULL;
    }
    return l;
}

static jx_node *parse_or(parser *p) {
    jx_node *l = parse_and(p);
    while (l && is_name(p, "or")) {
        jx_node *n = jxp_node(p, JN_OR, cur(p));
        next(p);
        if (!n) return NULL;
        n->a = l;
        n->b = parse_and(p);
        l = n->b ? n : NULL;
    }
    return l;
}

jx_node *jxp_parse_expression(parser *p, bool with_condexpr) {
    jx_node *e = parse_or(p);
    if (!with_condexpr) return e;
    while (e && is_name(p, "if")) {
        jx_node *c = jxp_node(p, JN_COND, cur(p));
        if (!c) return NULL;
        next(p);
        c->a = e;
        c->b = parse_or(p);
        if (!c->b) return NULL;
        if (is_name(p, "else")) {
            next(p);
            c->c = jxp_parse_expression(p, true);
            if (!c->c) return NULL;
        }
        e = c;
    }
    return e;
}
