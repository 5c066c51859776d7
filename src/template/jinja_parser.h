/* The Jinja parser's shared state and helpers, used by the expression
 * parser (jinja_parse.c) and the statement parser (jinja_parse_stmt.c). */
#ifndef SP_INPUT_JINJA_PARSER_H
#define SP_INPUT_JINJA_PARSER_H

#include <string.h>

#include "template/jinja_impl.h"

#define MAX_PARSE_DEPTH 200

typedef struct parser {
    const jx_tokens *t;
    size_t i;
    sp_jinja_template *tpl;
    spindle_error *err;
    bool failed;
    int depth;
} parser;

static inline const jx_token *cur(parser *p) { return &p->t->v[p->i]; }
static inline const jx_token *peek(parser *p, size_t k) {
    size_t j = p->i + k;
    return &p->t->v[j < p->t->n ? j : p->t->n - 1];
}
static inline void next(parser *p) {
    if (p->i + 1 < p->t->n) p->i++;
}

static inline bool tok_is(const jx_token *t, jx_tok_type type, const char *s) {
    if (t->type != type) return false;
    if (!s) return true;
    size_t n = strlen(s);
    return t->len == n && memcmp(t->s, s, n) == 0;
}
static inline bool is_op(parser *p, const char *s) { return tok_is(cur(p), JT_OP, s); }
static inline bool is_name(parser *p, const char *s) { return tok_is(cur(p), JT_NAME, s); }

void *jxp_fail_at(parser *p, const jx_token *t, const char *fmt, ...) SP_PRINTF(3, 4);
const char *jxp_tok_desc(const jx_token *t, char *buf, size_t n);
void *jxp_unexpected(parser *p);
bool jxp_expect_op(parser *p, const char *s);
bool jxp_expect_type(parser *p, jx_tok_type type, const char *what);
jx_node *jxp_node(parser *p, jx_node_kind kind, const jx_token *at);
const char *jxp_name_copy(parser *p, const char *s, size_t len);
bool jxp_push_node(parser *p, jx_nodes *l, jx_node *n);
bool jxp_push_kwname(parser *p, jx_node *n, const char *name);
jx_node *jxp_parse_expression(parser *p, bool with_condexpr);
/* extra_end: a name that also ends a tuple ("in" for for-loop targets). */
jx_node *jxp_parse_tuple(parser *p, bool simplified, bool with_condexpr,
                         const char *extra_end, bool explicit_parens);
/* A filter chain; `subject` NULL stands for a block's rendered body. */
jx_node *jxp_parse_filter(parser *p, jx_node *subject, bool start_inline);

#endif
