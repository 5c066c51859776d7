/* Internals shared by the Jinja modules: values, tokens, the AST and the
 * render state. Not for use outside src/input/jinja_*.c. */
#ifndef SP_INPUT_JINJA_IMPL_H
#define SP_INPUT_JINJA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "template/jinja.h"

/* ------------------------------------------------------------------ values */

typedef enum jx_type {
    JX_UNDEF, JX_NONE, JX_BOOL, JX_INT, JX_FLOAT,
    JX_STR, JX_LIST, JX_DICT, JX_NS, JX_FUNC
} jx_type;

typedef struct jx_obj jx_obj;
struct jx_ctx;
struct jx_node;

/* Values are small and passed by value; strings, lists, dicts, namespaces
 * and functions point at a reference-counted jx_obj. */
typedef struct jx_value {
    jx_type t;
    union {
        bool b;
        int64_t i;
        double f;
        jx_obj *o;
    } u;
} jx_value;

typedef struct jx_args {
    const jx_value *pos;
    size_t npos;
    const char *const *kwnames;
    const jx_value *kw;
    size_t nkw;
} jx_args;

typedef bool (*jx_builtin_fn)(struct jx_ctx *ctx, const jx_value *self,
                              const jx_args *args, jx_value *out);

typedef enum jx_func_kind { JX_FN_BUILTIN, JX_FN_MACRO, JX_FN_CALLER } jx_func_kind;

struct jx_obj {
    int rc;
    jx_type type;
    size_t charged; /* bytes counted against the render's value budget */
    union {
        /* markup: a jinja2 Markup string (from safe or escape), whose `+`
         * escapes a plain operand. */
        struct { size_t len; char *s; bool markup; } str;
        /* iterator: the Python type of the one-shot iterator that a
         * jinja2 filter returns (map's generator, reverse's
         * list_reverseiterator), NULL for a list or tuple. Iterating it
         * drains it; json.dumps rejects it and len() refuses it. */
        struct { size_t n, cap; jx_value *v; bool tuple; const char *iterator; } list;
        /* JX_DICT and JX_NS: ordered, linear lookup (chat data is small). */
        struct { size_t n, cap; jx_value *k, *v; } dict;
        struct {
            jx_func_kind kind;
            const char *name;
            jx_builtin_fn fn;
            jx_value self;             /* bound value for builtins */
            const struct jx_node *node;/* macro / call block */
            struct jx_frame *frame;    /* caller's frame (NULL once dead) */
        } fn;
    } u;
};

#define JX_UNDEFINED ((jx_value){.t = JX_UNDEF})
#define JX_NONEV ((jx_value){.t = JX_NONE})
static inline jx_value jx_bool(bool b) { jx_value v = {.t = JX_BOOL}; v.u.b = b; return v; }
static inline jx_value jx_int(int64_t i) { jx_value v = {.t = JX_INT}; v.u.i = i; return v; }
static inline jx_value jx_float(double f) { jx_value v = {.t = JX_FLOAT}; v.u.f = f; return v; }
/* Whether a float truncates to an int64 (casting one that does not, NaN
 * and infinities included, is undefined behaviour). */
static inline bool jx_float_fits_int(double f) {
    return f >= -9223372036854775808.0 && f < 9223372036854775808.0;
}

jx_value jx_ref(jx_value v);
void jx_unref(jx_value v);
/* Constructors return JX_UNDEF with t == JX_UNDEF on allocation failure is
 * not distinguishable, so they return false instead. */
bool jx_str_new(const char *s, size_t len, jx_value *out);

/* The value budget of the render running on this thread (sp_jinja_render
 * enters it): the bytes its strings and list/dict slots hold at once, and
 * the longest string. A value that would pass either is refused as if
 * memory ran out, and `exceeded` turns that failure into a limit error, so
 * a template whose values double in a loop fails cleanly instead of taking
 * the machine's memory. Values made outside a render are not counted. */
typedef struct jx_budget {
    size_t live, max_live, max_string;
    bool exceeded;
} jx_budget;
void jx_budget_enter(jx_budget *b);
void jx_budget_leave(void);
/* The current render's budget, NULL outside a render. */
jx_budget *jx_budget_current(void);
/* A string builder held to the longest string a value may be. */
sp_strbuf jx_strbuf(void);
/* Whether `b` was built whole: false (and the budget marked exceeded when
 * the limit cut it) after an allocation failure or the limit. */
bool jx_strbuf_ok(const sp_strbuf *b);
bool jx_str_cstr(const char *s, jx_value *out);
bool jx_list_new(size_t cap, bool tuple, jx_value *out);
bool jx_dict_new(jx_type type, jx_value *out);
/* Takes ownership of `item`. */
bool jx_list_push(jx_value list, jx_value item);
/* Takes ownership of key and val; replaces an existing equal key. */
bool jx_dict_set(jx_value dict, jx_value key, jx_value val);
bool jx_dict_set_cstr(jx_value dict, const char *key, jx_value val);
/* Borrowed; NULL when absent. */
const jx_value *jx_dict_get(jx_value dict, jx_value key);
const jx_value *jx_dict_get_cstr(jx_value dict, const char *key, size_t len);

static inline const char *jx_s(jx_value v) { return v.u.o->u.str.s; }
static inline size_t jx_slen(jx_value v) { return v.u.o->u.str.len; }
static inline bool jx_is_markup(jx_value v) { return v.t == JX_STR && v.u.o->u.str.markup; }
/* The iterator types (list.iterator). */
#define JX_GENERATOR "generator"
#define JX_LIST_REVERSE "list_reverseiterator"
#define JX_DICT_REVERSE "dict_reversekeyiterator"
static inline const char *jx_iterator(jx_value v) {
    return v.t == JX_LIST ? v.u.o->u.list.iterator : NULL;
}
static inline bool jx_is_seq(jx_value v) { return v.t == JX_LIST; }
static inline bool jx_is_map(jx_value v) { return v.t == JX_DICT || v.t == JX_NS; }
static inline bool jx_is_num(jx_value v) { return v.t == JX_INT || v.t == JX_FLOAT || v.t == JX_BOOL; }

/* The value of an int or a bool (0 for any other type: the union holds
 * something else). */
static inline int64_t jx_int_of(jx_value v) {
    return v.t == JX_INT ? v.u.i : v.t == JX_BOOL ? (int64_t)v.u.b : 0;
}
/* The value of a number (int, bool or float) as a double. */
static inline double jx_num_of(jx_value v) { return v.t == JX_FLOAT ? v.u.f : (double)jx_int_of(v); }

bool jx_truthy(jx_value v);
bool jx_equal(jx_value a, jx_value b);
const char *jx_type_name(jx_value v);

/* Python str() / repr() of a value. */
bool jx_write_str(sp_strbuf *b, jx_value v);
bool jx_write_repr(sp_strbuf *b, jx_value v);
void jx_format_float(double d, char out[40]);
/* The json.dumps options tojson passes on; `indent` NULL for none. */
typedef struct jx_json_style {
    const char *indent, *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} jx_json_style;
/* json.dumps(v, ...). Returns false with a message in `why` for values JSON
 * cannot hold. */
bool jx_write_json(sp_strbuf *b, jx_value v, const jx_json_style *style, int depth,
                   const char **why);
/* A value converted to a new string (str()). */
bool jx_to_str(jx_value v, jx_value *out);

/* cJSON -> value. */
bool jx_from_json(const cJSON *j, jx_value *out, int depth);

/* Python's str.isspace(). */
bool jx_is_space_cp(uint32_t c);

/* ------------------------------------------------------------------- lexer */

typedef enum jx_tok_type {
    JT_EOF, JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP
} jx_tok_type;

typedef struct jx_token {
    jx_tok_type type;
    int line, col;
    const char *s;   /* TEXT/NAME/OP: source bytes; STRING: unescaped, owned */
    size_t len;
    int64_t ival;
    double fval;
} jx_token;

typedef struct jx_tokens {
    jx_token *v;
    size_t n, cap;
    char *norm;      /* newline-normalized source the tokens point into */
} jx_tokens;

spindle_status jx_lex(const char *src, size_t len, jx_tokens *out,
                      spindle_error *err);
void jx_tokens_free(jx_tokens *t);

/* --------------------------------------------------------------------- AST */

typedef enum jx_node_kind {
    /* expressions */
    JN_CONST, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE,
    JN_CALL, JN_FILTER, JN_TEST, JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR,
    JN_BINOP, JN_COMPARE, JN_COND, JN_CONCAT,
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_BODY, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK,
    JN_MACRO, JN_CALLBLOCK, JN_FILTERBLOCK, JN_BREAK, JN_CONTINUE, JN_WITH
} jx_node_kind;

typedef struct jx_nodes {
    struct jx_node **v;
    size_t n, cap;
} jx_nodes;

typedef struct jx_node {
    jx_node_kind kind;
    int line, col;
    int op;                 /* BINOP/COMPARE: operator token char code */
    bool flag;              /* TEST: negated; FOR: has else */
    const char *name;       /* NAME/ATTR/FILTER/TEST/MACRO; NUL-terminated */
    jx_value value;         /* CONST */
    struct jx_node *a, *b, *c, *d;
    jx_nodes list;          /* items / args / body / targets */
    jx_nodes list2;         /* dict values / kw values / else body */
    jx_nodes list3;         /* macro defaults */
    const char **kwnames;   /* CALL/FILTER/TEST kw names; MACRO param names */
    size_t nkw;
} jx_node;

struct sp_jinja_template {
    jx_node *root;
    /* Every node and name lives in these blocks, freed together. */
    void **blocks;
    size_t nblocks, capblocks;
    /* Every node made, reachable from the root or not (a parse error leaves
     * half-built ones behind), so that their lists and values are freed. */
    jx_nodes nodes;
};

spindle_status jx_parse(sp_jinja_template *tpl, const jx_tokens *toks,
                        spindle_error *err);
void *jx_tpl_alloc(sp_jinja_template *tpl, size_t size);

/* ------------------------------------------------------------------ render */

typedef struct jx_frame {
    struct jx_frame *parent;
    jx_value vars;   /* a dict */
} jx_frame;

typedef struct jx_ctx {
    const sp_jinja_limits *limits;
    spindle_error *err;
    bool failed;
    int line, col;          /* where the current operation is */
    int depth;
    int64_t iterations;
    jx_frame *root;
    sp_strbuf *out;
} jx_ctx;

/* Record an error at the current location; always returns false. */
bool jx_fail(jx_ctx *ctx, const char *fmt, ...) SP_PRINTF(2, 3);

/* Filters, tests, globals and methods (jinja_filters.c, jinja_builtins.c). */
bool jx_apply_filter(jx_ctx *ctx, const char *name, jx_value v,
                     const jx_args *args, jx_value *out);
/* Whether a filter (test == false) or test name exists; Jinja rejects
 * unknown names when it compiles the template. */
bool jx_known_filter(const char *name, bool test);
bool jx_apply_test(jx_ctx *ctx, const char *name, jx_value v,
                   const jx_args *args, bool *out);
bool jx_call_method(jx_ctx *ctx, jx_value self, const char *name,
                    const jx_args *args, jx_value *out, bool *found);
bool jx_lookup_global(const char *name, jx_value *out);
bool jx_call_value(jx_ctx *ctx, jx_value fn, const jx_args *args,
                   jx_value *out);
/* Attribute / item access with Python-and-Jinja rules (jinja_eval.c). */
bool jx_getattr(jx_ctx *ctx, jx_value obj, jx_value key, jx_value *out);
/* Iterable -> new list (dict: keys, str: characters, undefined: empty). */
bool jx_to_list(jx_ctx *ctx, jx_value v, jx_value *out);
void jx_drain(jx_value iterator, size_t n);
/* Operators (jinja_ops.c). op: the parser's code ('+', '-', '*', '/',
 * 'f' floor-div, '%', 'p' power) for jx_arith; jx_compare_code maps
 * "==" "!=" "<" "<=" ">" ">=" "in" "not in" to jx_compare's. *out is a new
 * reference on success. */
bool jx_arith(jx_ctx *ctx, int op, jx_value a, jx_value b, jx_value *out);
bool jx_compare(jx_ctx *ctx, int op, jx_value a, jx_value b, bool *out);
int jx_compare_code(const char *s);
/* Render a macro/caller body (jinja_eval.c). */
bool jx_call_macro(jx_ctx *ctx, jx_obj *fn, const jx_args *args,
                   jx_value *out);

/* Frames and evaluation entry points (jinja_eval.c). */
bool jx_frame_push(jx_frame *f, jx_frame *parent);
void jx_frame_pop(jx_frame *f);
const jx_value *jx_frame_lookup(jx_frame *f, const char *name);
bool jx_frame_assign(jx_ctx *ctx, jx_frame *f, const char *name, jx_value v);
bool jx_eval(jx_ctx *ctx, jx_frame *frame, const jx_node *n, jx_value *out);
bool jx_eval_filters(jx_ctx *ctx, jx_frame *frame, const jx_node *chain,
                     jx_value subject, jx_value *out);
/* Evaluate the JN_CALL `n` with one more keyword argument (call blocks). */
bool jx_eval_call(jx_ctx *ctx, jx_frame *frame, const jx_node *n,
                  const char *xname, jx_value xval, jx_value *out);
/* Like jx_fail, but the status becomes SPINDLE_ERR_LIMIT. */
bool jx_limit_fail(jx_ctx *ctx, const char *what);

/* Argument helpers: positional i or keyword `name`, else NULL. */
const jx_value *jx_arg(const jx_args *a, size_t i, const char *name);

#endif
