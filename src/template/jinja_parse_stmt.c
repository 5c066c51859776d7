/* Jinja statement parser: the template body, block tags (if, for, set,
 * macro, call, filter, with, generation), the unknown-name check that Jinja
 * does at compile time, and the parse entry point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "template/jinja_parser.h"

/* ------------------------------------------------------------- statements */

static jx_node *parse_statement(parser *p);

/* Parse nodes until a block tag whose name is in `ends` (left unconsumed,
 * the cursor on its name). `ends` NULL: to the end of the template. */
static bool parse_body(parser *p, jx_nodes *body, const char *const *ends) {
    for (;;) {
        const jx_token *t = cur(p);
        if (t->type == JT_EOF) {
            if (!ends) return true;
            char want[200] = "";
            for (int i = 0; ends[i]; i++) {
                size_t l = strlen(want);
                snprintf(want + l, sizeof want - l, "%s'%s'", i ? " or " : "", ends[i]);
            }
            jxp_fail_at(p, t, "unexpected end of template, expected %s", want);
            return false;
        }
        if (t->type == JT_TEXT) {
            jx_node *n = jxp_node(p, JN_TEXT, t);
            if (!n || !jx_str_new(t->s, t->len, &n->value)) {
                jxp_fail_at(p, t, "out of memory");
                return false;
            }
            if (!jxp_push_node(p, body, n)) return false;
            next(p);
        } else if (t->type == JT_VAR_BEGIN) {
            next(p);
            jx_node *n = jxp_node(p, JN_OUTPUT, t);
            if (!n) return false;
            n->a = jxp_parse_tuple(p, false, true, NULL, false);
            if (!n->a || !jxp_expect_type(p, JT_VAR_END, "'}}'")) return false;
            if (!jxp_push_node(p, body, n)) return false;
        } else if (t->type == JT_BLOCK_BEGIN) {
            const jx_token *nm = peek(p, 1);
            if (ends && nm->type == JT_NAME)
                for (int i = 0; ends[i]; i++)
                    if (tok_is(nm, JT_NAME, ends[i])) {
                        next(p);
                        return true;
                    }
            next(p);
            if (!jxp_push_node(p, body, parse_statement(p))) return false;
        } else {
            jxp_unexpected(p);
            return false;
        }
    }
}

/* After an end tag's name: "{% endfor %}". */
static bool end_tag(parser *p) {
    next(p);
    return jxp_expect_type(p, JT_BLOCK_END, "end of statement block");
}

static jx_node *parse_assign_target(parser *p, bool with_namespace, const char *extra_end) {
    const jx_token *t = cur(p);
    jx_node *target;
    if (with_namespace && t->type == JT_NAME && tok_is(peek(p, 1), JT_OP, ".") &&
        peek(p, 2)->type == JT_NAME) {
        target = jxp_node(p, JN_ATTR, t);
        jx_node *ns = jxp_node(p, JN_NAME, t);
        if (!target || !ns) return NULL;
        ns->name = jxp_name_copy(p, t->s, t->len);
        target->a = ns;
        target->name = jxp_name_copy(p, peek(p, 2)->s, peek(p, 2)->len);
        next(p);
        next(p);
        next(p);
        return target;
    }
    target = jxp_parse_tuple(p, true, false, extra_end, false);
    if (!target) return NULL;
    if (target->kind == JN_NAME) return target;
    if (target->kind == JN_TUPLE) {
        bool ok = target->list.n > 0;
        for (size_t i = 0; i < target->list.n; i++)
            ok = ok && target->list.v[i]->kind == JN_NAME;
        if (ok) return target;
    }
    return jxp_fail_at(p, t, "can't assign to this expression");
}

static jx_node *parse_if(parser *p, const jx_token *at) {
    jx_node *n = jxp_node(p, JN_IF, at);
    if (!n) return NULL;
    next(p);
    n->a = jxp_parse_tuple(p, false, true, NULL, false);
    if (!n->a || !jxp_expect_type(p, JT_BLOCK_END, "end of statement block")) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!parse_body(p, &n->list, ends)) return NULL;
    if (is_name(p, "elif")) {
        jx_node *e = parse_if(p, cur(p));
        return jxp_push_node(p, &n->list2, e) ? n : NULL;
    }
    if (is_name(p, "else")) {
        if (!end_tag(p)) return NULL;
        static const char *const ends2[] = {"endif", NULL};
        if (!parse_body(p, &n->list2, ends2)) return NULL;
    }
    return end_tag(p) ? n : NULL;
}

static jx_node *parse_for(parser *p, const jx_token *at) {
    jx_node *n = jxp_node(p, JN_FOR, at);
    if (!n) return NULL;
    next(p);
    n->a = parse_assign_target(p, false, "in");
    if (!n->a) return NULL;
    if (!is_name(p, "in")) return jxp_fail_at(p, cur(p), "expected 'in' in for loop");
    next(p);
    n->b = jxp_parse_tuple(p, false, false, "recursive", false);
    if (!n->b) return NULL;
    if (is_name(p, "recursive")) return jxp_fail_at(p, cur(p), "recursive loops are not supported");
    if (is_name(p, "if")) {
        next(p);
        n->c = jxp_parse_expression(p, true);
        if (!n->c) return NULL;
    }
    if (!jxp_expect_type(p, JT_BLOCK_END, "end of statement block")) return NULL;
    static const char *const ends[] = {"endfor", "else", NULL};
    if (!parse_body(p, &n->list, ends)) return NULL;
    if (is_name(p, "else")) {
        n->flag = true;
        if (!end_tag(p)) return NULL;
        static const char *const ends2[] = {"endfor", NULL};
        if (!parse_body(p, &n->list2, ends2)) return NULL;
    }
    return end_tag(p) ? n : NULL;
}

static jx_node *parse_set(parser *p, const jx_token *at) {
    next(p);
    jx_node *target = parse_assign_target(p, true, NULL);
    if (!target) return NULL;
    if (is_op(p, "=")) {
        next(p);
        jx_node *n = jxp_node(p, JN_SET, at);
        if (!n) return NULL;
        n->a = target;
        n->b = jxp_parse_tuple(p, false, true, NULL, false);
        if (!n->b || !jxp_expect_type(p, JT_BLOCK_END, "end of statement block")) return NULL;
        return n;
    }
    jx_node *n = jxp_node(p, JN_SETBLOCK, at);
    if (!n) return NULL;
    n->a = target;
    if (is_op(p, "|")) {
        /* The filters are applied to a placeholder that stands for the
         * rendered body (a NULL subject). */
        n->b = jxp_parse_filter(p, NULL, false);
        if (!n->b) return NULL;
    }
    if (!jxp_expect_type(p, JT_BLOCK_END, "end of statement block")) return NULL;
    static const char *const ends[] = {"endset", NULL};
    if (!parse_body(p, &n->list, ends)) return NULL;
    return end_tag(p) ? n : NULL;
}

/* Macro parameters "(a, b=1)" into n->kwnames / n->list3 (defaults). */
static bool parse_signature(parser *p, jx_node *n) {
    if (!jxp_expect_op(p, "(")) return false;
    while (!is_op(p, ")")) {
        if (n->nkw && !jxp_expect_op(p, ",")) return false;
        if (cur(p)->type != JT_NAME) {
            jxp_unexpected(p);
            return false;
        }
        if (!jxp_push_kwname(p, n, jxp_name_copy(p, cur(p)->s, cur(p)->len))) return false;
        next(p);
        jx_node *def = NULL;
        if (is_op(p, "=")) {
            next(p);
            def = jxp_parse_expression(p, true);
            if (!def) return false;
        } else {
            def = jxp_node(p, JN_CONST, cur(p));
            if (!def) return false;
            def->value = JX_UNDEFINED;
            def->flag = true; /* marks "no default" */
        }
        if (!jxp_push_node(p, &n->list3, def)) return false;
    }
    next(p);
    return true;
}

static jx_node *parse_statement(parser *p) {
    const jx_token *t = cur(p);
    if (t->type != JT_NAME) return jxp_fail_at(p, t, "tag name expected");
    if (++p->depth > MAX_PARSE_DEPTH) return jxp_fail_at(p, t, "blocks nested too deeply");
    jx_node *n = NULL;
    if (tok_is(t, JT_NAME, "if")) {
        n = parse_if(p, t);
    } else if (tok_is(t, JT_NAME, "for")) {
        n = parse_for(p, t);
    } else if (tok_is(t, JT_NAME, "set")) {
        n = parse_set(p, t);
    } else if (tok_is(t, JT_NAME, "break") || tok_is(t, JT_NAME, "continue")) {
        n = jxp_node(p, tok_is(t, JT_NAME, "break") ? JN_BREAK : JN_CONTINUE, t);
        if (n && !end_tag(p)) return NULL;
    } else if (tok_is(t, JT_NAME, "macro")) {
        next(p);
        n = jxp_node(p, JN_MACRO, t);
        if (!n) return NULL;
        if (cur(p)->type != JT_NAME) return jxp_unexpected(p);
        n->name = jxp_name_copy(p, cur(p)->s, cur(p)->len);
        next(p);
        if (!parse_signature(p, n) || !jxp_expect_type(p, JT_BLOCK_END, "end of statement block"))
            return NULL;
        static const char *const ends[] = {"endmacro", NULL};
        if (!parse_body(p, &n->list, ends) || !end_tag(p)) return NULL;
    } else if (tok_is(t, JT_NAME, "call")) {
        next(p);
        n = jxp_node(p, JN_CALLBLOCK, t);
        if (!n) return NULL;
        if (is_op(p, "(") && !parse_signature(p, n)) return NULL;
        n->a = jxp_parse_expression(p, true);
        if (!n->a) return NULL;
        if (n->a->kind != JN_CALL) return jxp_fail_at(p, t, "expected call");
        if (!jxp_expect_type(p, JT_BLOCK_END, "end of statement block")) return NULL;
        static const char *const ends[] = {"endcall", NULL};
        if (!parse_body(p, &n->list, ends) || !end_tag(p)) return NULL;
    } else if (tok_is(t, JT_NAME, "filter")) {
        next(p);
        n = jxp_node(p, JN_FILTERBLOCK, t);
        if (!n) return NULL;
        n->b = jxp_parse_filter(p, NULL, true);
        if (!n->b || !jxp_expect_type(p, JT_BLOCK_END, "end of statement block")) return NULL;
        static const char *const ends[] = {"endfilter", NULL};
        if (!parse_body(p, &n->list, ends) || !end_tag(p)) return NULL;
    } else if (tok_is(t, JT_NAME, "with")) {
        next(p);
        n = jxp_node(p, JN_WITH, t);
        if (!n) return NULL;
        while (cur(p)->type != JT_BLOCK_END) {
            if (n->list2.n && !jxp_expect_op(p, ",")) return NULL;
            jx_node *target = parse_assign_target(p, false, NULL);
            if (!target || !jxp_expect_op(p, "=")) return NULL;
            if (!jxp_push_node(p, &n->list3, target)) return NULL;
            if (!jxp_push_node(p, &n->list2, jxp_parse_expression(p, true))) return NULL;
        }
        next(p);
        static const char *const ends[] = {"endwith", NULL};
        if (!parse_body(p, &n->list, ends) || !end_tag(p)) return NULL;
    } else if (tok_is(t, JT_NAME, "generation")) {
        /* transformers' AssistantTracker tag: renders its body as is. */
        n = jxp_node(p, JN_BODY, t);
        if (!n || !end_tag(p)) return NULL;
        static const char *const ends[] = {"endgeneration", NULL};
        if (!parse_body(p, &n->list, ends) || !end_tag(p)) return NULL;
    } else if (tok_is(t, JT_NAME, "include") || tok_is(t, JT_NAME, "import") ||
               tok_is(t, JT_NAME, "from") || tok_is(t, JT_NAME, "extends")) {
        return jxp_fail_at(p, t, "'%.*s' is not supported: templates cannot load files",
                       (int)t->len, t->s);
    } else {
        return jxp_fail_at(p, t, "Encountered unknown tag '%.*s'", (int)t->len, t->s);
    }
    p->depth--;
    return n;
}

void sp_jinja_free(sp_jinja_template *tpl) {
    if (!tpl) return;
    for (size_t i = 0; i < tpl->nodes.n; i++) {
        jx_node *n = tpl->nodes.v[i];
        free(n->list.v);
        free(n->list2.v);
        free(n->list3.v);
        free((void *)n->kwnames);
        jx_unref(n->value);
    }
    free(tpl->nodes.v);
    for (size_t i = 0; i < tpl->nblocks; i++) free(tpl->blocks[i]);
    free(tpl->blocks);
    free(tpl);
}

/* Jinja rejects unknown filter and test names when it compiles a template,
 * except inside if statements and conditional expressions ("soft" frames),
 * where the error waits until the code runs; loops, macros and with blocks
 * start hard frames again. */
static bool check_names(parser *p, const jx_node *n, bool soft) {
    if (!n) return true;
    if ((n->kind == JN_FILTER || n->kind == JN_TEST) && !soft &&
        !jx_known_filter(n->name, n->kind == JN_TEST)) {
        jx_token at = {.line = n->line, .col = n->col};
        jxp_fail_at(p, &at, "No %s named '%s'.", n->kind == JN_TEST ? "test" : "filter", n->name);
        return false;
    }
    bool inner = soft;
    if (n->kind == JN_IF || n->kind == JN_COND) inner = true;
    if (n->kind == JN_FOR || n->kind == JN_MACRO || n->kind == JN_WITH ||
        n->kind == JN_CALLBLOCK)
        inner = false;
    const jx_node *kids[4] = {n->a, n->b, n->c, n->d};
    for (int i = 0; i < 4; i++) {
        /* A loop's iterable and a call block's call run in the outer frame. */
        bool outer = (n->kind == JN_FOR && i == 1) || (n->kind == JN_CALLBLOCK && i == 0);
        if (!check_names(p, kids[i], outer ? soft : inner)) return false;
    }
    const jx_nodes *lists[3] = {&n->list, &n->list2, &n->list3};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < lists[k]->n; i++)
            if (!check_names(p, lists[k]->v[i], inner)) return false;
    return true;
}

spindle_status jx_parse(sp_jinja_template *tpl, const jx_tokens *toks,
                        spindle_error *err) {
    parser p = {.t = toks, .tpl = tpl, .err = err};
    tpl->root = jxp_node(&p, JN_BODY, &toks->v[0]);
    if (!tpl->root) return SPINDLE_ERR_MEMORY;
    if (!parse_body(&p, &tpl->root->list, NULL) || p.failed ||
        !check_names(&p, tpl->root, false)) {
        if (!p.failed) sp_fail(err, SPINDLE_ERR_TEMPLATE, "template: parse error");
        return SPINDLE_ERR_TEMPLATE;
    }
    return SPINDLE_OK;
}

spindle_status sp_jinja_parse(const char *source, size_t len,
                              sp_jinja_template **out, spindle_error *err) {
    *out = NULL;
    if (!source) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "template source is NULL");
    jx_tokens toks;
    spindle_status st = jx_lex(source, len, &toks, err);
    if (st) return st;
    sp_jinja_template *tpl = calloc(1, sizeof *tpl);
    if (!tpl) {
        jx_tokens_free(&toks);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory parsing template");
    }
    st = jx_parse(tpl, &toks, err);
    jx_tokens_free(&toks);
    if (st) {
        sp_jinja_free(tpl);
        return st;
    }
    *out = tpl;
    return SPINDLE_OK;
}
