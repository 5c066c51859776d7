/* Jinja statements: output, if, for (with the loop object), set, macros,
 * call blocks, filter and with blocks, and the render entry point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "template/jinja_impl.h"

enum { EX_OK = 0, EX_ERR = -1, EX_BREAK = 1, EX_CONTINUE = 2 };

#define AT(ctx, n) ((ctx)->line = (n)->line, (ctx)->col = (n)->col)

sp_jinja_limits sp_jinja_default_limits(void) {
    return (sp_jinja_limits){.max_depth = 400,
                             .max_iterations = 1000000,
                             .max_output = 64u << 20,
                             .max_value_bytes = 512u << 20,
                             .now = -1};
}

static int exec_body(jx_ctx *ctx, jx_frame *frame, const jx_nodes *body);

static bool emit(jx_ctx *ctx, jx_value v) {
    if (jx_write_str(ctx->out, v)) return true;
    if (ctx->out->overflow) {
        char msg[96];
        snprintf(msg, sizeof msg, "rendered output exceeds the limit of %zu bytes",
                 ctx->out->limit);
        return jx_limit_fail(ctx, msg);
    }
    return ctx->out->oom ? jx_fail(ctx, "out of memory") : true;
}

/* Render `body` into a string value instead of the output. */
static bool capture(jx_ctx *ctx, jx_frame *frame, const jx_nodes *body, jx_value *out) {
    sp_strbuf buf = {.limit = ctx->limits->max_output};
    sp_strbuf *saved = ctx->out;
    ctx->out = &buf;
    int r = exec_body(ctx, frame, body);
    ctx->out = saved;
    bool ok = r != EX_ERR && jx_str_new(buf.p ? buf.p : "", buf.len, out);
    sp_strbuf_free(&buf);
    if (r == EX_ERR) return false;
    return ok || jx_fail(ctx, "out of memory");
}

/* Bind a for/set target (a name or a tuple of names). */
static bool bind(jx_ctx *ctx, jx_frame *f, const jx_node *target, jx_value v) {
    if (target->kind == JN_NAME) return jx_frame_assign(ctx, f, target->name, jx_ref(v));
    jx_value items;
    if (v.t == JX_LIST) items = jx_ref(v);
    else if (!jx_to_list(ctx, v, &items)) return false;
    size_t n = items.u.o->u.list.n, want = target->list.n;
    bool ok = true;
    if (n != want) {
        AT(ctx, target);
        ok = n > want ? jx_fail(ctx, "too many values to unpack (expected %zu)", want)
                      : jx_fail(ctx, "not enough values to unpack (expected %zu, got %zu)", want, n);
    }
    for (size_t i = 0; ok && i < n; i++)
        ok = jx_frame_assign(ctx, f, target->list.v[i]->name, jx_ref(items.u.o->u.list.v[i]));
    jx_unref(items);
    return ok;
}

static bool loop_cycle(jx_ctx *ctx, const jx_value *self, const jx_args *args, jx_value *out) {
    if (args->npos == 0) return jx_fail(ctx, "no items for cycling given");
    *out = jx_ref(args->pos[self->u.i % (int64_t)args->npos]);
    return true;
}

static bool make_fn(jx_ctx *ctx, jx_func_kind kind, const char *name, jx_value *out) {
    jx_obj *o = calloc(1, sizeof *o);
    if (!o) return jx_fail(ctx, "out of memory");
    o->rc = 1;
    o->type = JX_FUNC;
    o->u.fn.kind = kind;
    o->u.fn.name = name;
    out->t = JX_FUNC;
    out->u.o = o;
    return true;
}

static bool loop_object(jx_ctx *ctx, jx_value items, size_t i, jx_value *out) {
    size_t n = items.u.o->u.list.n;
    const jx_value *v = items.u.o->u.list.v;
    jx_value cyc;
    if (!jx_dict_new(JX_DICT, out)) return jx_fail(ctx, "out of memory");
    if (!make_fn(ctx, JX_FN_BUILTIN, "cycle", &cyc)) return jx_unref(*out), false;
    cyc.u.o->u.fn.fn = loop_cycle;
    cyc.u.o->u.fn.self = jx_int((int64_t)i);
    bool ok = jx_dict_set_cstr(*out, "index", jx_int((int64_t)i + 1)) &&
              jx_dict_set_cstr(*out, "index0", jx_int((int64_t)i)) &&
              jx_dict_set_cstr(*out, "revindex", jx_int((int64_t)(n - i))) &&
              jx_dict_set_cstr(*out, "revindex0", jx_int((int64_t)(n - i - 1))) &&
              jx_dict_set_cstr(*out, "first", jx_bool(i == 0)) &&
              jx_dict_set_cstr(*out, "last", jx_bool(i + 1 == n)) &&
              jx_dict_set_cstr(*out, "length", jx_int((int64_t)n)) &&
              jx_dict_set_cstr(*out, "depth", jx_int(1)) &&
              jx_dict_set_cstr(*out, "depth0", jx_int(0)) &&
              jx_dict_set_cstr(*out, "previtem", i > 0 ? jx_ref(v[i - 1]) : JX_UNDEFINED) &&
              jx_dict_set_cstr(*out, "nextitem", i + 1 < n ? jx_ref(v[i + 1]) : JX_UNDEFINED) &&
              jx_dict_set_cstr(*out, "cycle", cyc);
    return ok || (jx_unref(*out), jx_fail(ctx, "out of memory"));
}

static bool count_iteration(jx_ctx *ctx) {
    if (++ctx->iterations > ctx->limits->max_iterations) {
        char msg[96];
        snprintf(msg, sizeof msg, "more than %lld loop iterations",
                 (long long)ctx->limits->max_iterations);
        return jx_limit_fail(ctx, msg);
    }
    return true;
}

static int exec_for(jx_ctx *ctx, jx_frame *frame, const jx_node *n) {
    jx_value iter, items;
    if (!jx_eval(ctx, frame, n->b, &iter)) return EX_ERR;
    AT(ctx, n->b);
    bool ok = jx_to_list(ctx, iter, &items);
    jx_unref(iter);
    if (!ok) return EX_ERR;
    if (n->c) { /* `for x in y if cond`: filter first, loop.length counts the rest */
        jx_value kept;
        if (!jx_list_new(0, false, &kept)) return jx_unref(items), jx_fail(ctx, "out of memory"), EX_ERR;
        for (size_t i = 0; ok && i < items.u.o->u.list.n; i++) {
            jx_frame f;
            jx_value c;
            if (!count_iteration(ctx) || !jx_frame_push(&f, frame)) {
                ok = false;
                break;
            }
            jx_value item = items.u.o->u.list.v[i];
            ok = bind(ctx, &f, n->a, item) && jx_eval(ctx, &f, n->c, &c);
            if (ok && jx_truthy(c)) jx_list_push(kept, jx_ref(item));
            if (ok) jx_unref(c);
            jx_frame_pop(&f);
        }
        jx_unref(items);
        items = kept;
        if (!ok) return jx_unref(items), EX_ERR;
    }
    size_t count = items.u.o->u.list.n;
    int r = EX_OK;
    for (size_t i = 0; i < count; i++) {
        jx_frame f;
        jx_value loop;
        if (!count_iteration(ctx)) {
            r = EX_ERR;
            break;
        }
        if (!jx_frame_push(&f, frame)) {
            jx_fail(ctx, "out of memory");
            r = EX_ERR;
            break;
        }
        if (!bind(ctx, &f, n->a, items.u.o->u.list.v[i]) || !loop_object(ctx, items, i, &loop) ||
            !jx_frame_assign(ctx, &f, "loop", loop)) {
            jx_frame_pop(&f);
            r = EX_ERR;
            break;
        }
        r = exec_body(ctx, &f, &n->list);
        jx_frame_pop(&f);
        if (r == EX_CONTINUE) r = EX_OK;
        if (r != EX_OK) break;
    }
    if (r == EX_BREAK) r = EX_OK;
    if (r == EX_OK && count == 0 && n->flag) {
        jx_frame f;
        if (!jx_frame_push(&f, frame)) r = EX_ERR;
        else {
            r = exec_body(ctx, &f, &n->list2);
            jx_frame_pop(&f);
        }
    }
    jx_unref(items);
    return r;
}

static bool assign_target(jx_ctx *ctx, jx_frame *frame, const jx_node *t, jx_value v) {
    if (t->kind != JN_ATTR) return bind(ctx, frame, t, v);
    const jx_value *ns = jx_frame_lookup(frame, t->a->name);
    AT(ctx, t);
    if (!ns || ns->t != JX_NS)
        return jx_fail(ctx, "can only set attributes on namespace objects ('%s' is not one)", t->a->name);
    if (t->name[0] == '_')
        return jx_fail(ctx, "Chat templates cannot store underscore-prefixed attributes on a "
                            "namespace, but got '%s'.", t->name);
    return jx_dict_set_cstr(*ns, t->name, jx_ref(v)) || jx_fail(ctx, "out of memory");
}

static int exec_stmt(jx_ctx *ctx, jx_frame *frame, const jx_node *n) {
    jx_value v;
    switch (n->kind) {
    case JN_TEXT: return emit(ctx, n->value) ? EX_OK : EX_ERR;
    case JN_OUTPUT: {
        if (!jx_eval(ctx, frame, n->a, &v)) return EX_ERR;
        AT(ctx, n->a);
        bool ok = emit(ctx, v);
        jx_unref(v);
        return ok ? EX_OK : EX_ERR;
    }
    case JN_BODY: return exec_body(ctx, frame, &n->list);
    case JN_IF: {
        if (!jx_eval(ctx, frame, n->a, &v)) return EX_ERR;
        bool t = jx_truthy(v);
        jx_unref(v);
        return exec_body(ctx, frame, t ? &n->list : &n->list2);
    }
    case JN_FOR: return exec_for(ctx, frame, n);
    case JN_SET: {
        if (!jx_eval(ctx, frame, n->b, &v)) return EX_ERR;
        bool ok = assign_target(ctx, frame, n->a, v);
        jx_unref(v);
        return ok ? EX_OK : EX_ERR;
    }
    case JN_SETBLOCK:
    case JN_FILTERBLOCK: {
        jx_value body, r;
        if (!capture(ctx, frame, &n->list, &body)) return EX_ERR;
        if (n->b) {
            bool ok = jx_eval_filters(ctx, frame, n->b, body, &r);
            jx_unref(body);
            if (!ok) return EX_ERR;
            body = r;
        }
        bool ok = n->kind == JN_SETBLOCK ? assign_target(ctx, frame, n->a, body) : emit(ctx, body);
        jx_unref(body);
        return ok ? EX_OK : EX_ERR;
    }
    case JN_MACRO: {
        if (!make_fn(ctx, JX_FN_MACRO, n->name, &v)) return EX_ERR;
        v.u.o->u.fn.node = n;
        return jx_frame_assign(ctx, frame, n->name, v) ? EX_OK : EX_ERR;
    }
    case JN_CALLBLOCK: {
        jx_value caller, r;
        if (!make_fn(ctx, JX_FN_CALLER, "caller", &caller)) return EX_ERR;
        caller.u.o->u.fn.node = n;
        caller.u.o->u.fn.frame = frame;
        bool ok = jx_eval_call(ctx, frame, n->a, "caller", caller, &r);
        /* The frame dies with this statement; a stored caller must not
         * reach it afterwards. */
        caller.u.o->u.fn.frame = NULL;
        jx_unref(caller);
        if (!ok) return EX_ERR;
        ok = emit(ctx, r);
        jx_unref(r);
        return ok ? EX_OK : EX_ERR;
    }
    case JN_WITH: {
        jx_frame f;
        if (!jx_frame_push(&f, frame)) return jx_fail(ctx, "out of memory"), EX_ERR;
        bool ok = true;
        for (size_t i = 0; ok && i < n->list2.n; i++) {
            ok = jx_eval(ctx, frame, n->list2.v[i], &v);
            if (ok) {
                ok = bind(ctx, &f, n->list3.v[i], v);
                jx_unref(v);
            }
        }
        int r = ok ? exec_body(ctx, &f, &n->list) : EX_ERR;
        jx_frame_pop(&f);
        return r;
    }
    case JN_BREAK: return EX_BREAK;
    case JN_CONTINUE: return EX_CONTINUE;
    default:
        AT(ctx, n);
        jx_fail(ctx, "expression used as a statement");
        return EX_ERR;
    }
}

static int exec_body(jx_ctx *ctx, jx_frame *frame, const jx_nodes *body) {
    if (++ctx->depth > ctx->limits->max_depth) {
        if (body->n) AT(ctx, body->v[0]);
        jx_limit_fail(ctx, "maximum recursion depth exceeded");
        return EX_ERR;
    }
    int r = EX_OK;
    for (size_t i = 0; i < body->n && r == EX_OK; i++) r = exec_stmt(ctx, frame, body->v[i]);
    ctx->depth--;
    return r;
}

bool jx_call_macro(jx_ctx *ctx, jx_obj *fn, const jx_args *args, jx_value *out) {
    const jx_node *n = fn->u.fn.node;
    bool is_caller = fn->u.fn.kind == JX_FN_CALLER;
    jx_frame *parent = is_caller ? fn->u.fn.frame : ctx->root;
    if (!parent) return jx_fail(ctx, "caller() used after its call block ended");
    const char *what = is_caller ? "caller" : n->name;
    if (args->npos > n->nkw)
        return jx_fail(ctx, "macro '%s' takes not more than %zu argument(s)", what, n->nkw);
    jx_frame f;
    if (!jx_frame_push(&f, parent)) return jx_fail(ctx, "out of memory");
    bool ok = true;
    bool *set = calloc(n->nkw + 1, sizeof *set);
    if (!set) ok = jx_fail(ctx, "out of memory");
    for (size_t i = 0; ok && i < args->npos; i++) {
        ok = jx_frame_assign(ctx, &f, n->kwnames[i], jx_ref(args->pos[i]));
        set[i] = true;
    }
    for (size_t k = 0; ok && k < args->nkw; k++) {
        size_t i = 0;
        while (i < n->nkw && strcmp(n->kwnames[i], args->kwnames[k]) != 0) i++;
        if (i == n->nkw && strcmp(args->kwnames[k], "caller") != 0) {
            ok = jx_fail(ctx, "macro '%s' takes no keyword argument '%s'", what, args->kwnames[k]);
            break;
        }
        if (i < n->nkw && set[i]) {
            ok = jx_fail(ctx, "macro '%s' got multiple values for argument '%s'", what, n->kwnames[i]);
            break;
        }
        if (i < n->nkw) set[i] = true;
        ok = jx_frame_assign(ctx, &f, args->kwnames[k], jx_ref(args->kw[k]));
    }
    for (size_t i = 0; ok && i < n->nkw; i++) {
        if (set[i]) continue;
        const jx_node *def = n->list3.v[i];
        jx_value dv = JX_UNDEFINED;
        if (!def->flag) ok = jx_eval(ctx, &f, def, &dv);
        if (ok) ok = jx_frame_assign(ctx, &f, n->kwnames[i], dv);
    }
    free(set);
    ok = ok && capture(ctx, &f, &n->list, out);
    jx_frame_pop(&f);
    return ok;
}

bool jx_call_value(jx_ctx *ctx, jx_value fn, const jx_args *args, jx_value *out) {
    *out = JX_UNDEFINED;
    if (fn.t == JX_UNDEF) return jx_fail(ctx, "called an undefined value");
    if (fn.t != JX_FUNC) return jx_fail(ctx, "'%s' object is not callable", jx_type_name(fn));
    jx_obj *o = fn.u.o;
    if (o->u.fn.kind == JX_FN_BUILTIN) return o->u.fn.fn(ctx, &o->u.fn.self, args, out);
    if (++ctx->depth > ctx->limits->max_depth) {
        ctx->depth--;
        return jx_limit_fail(ctx, "maximum recursion depth exceeded");
    }
    bool ok = jx_call_macro(ctx, o, args, out);
    ctx->depth--;
    return ok;
}

/* The context's variables in the root frame, then the template's body. */
static int render_body(const sp_jinja_template *tpl, const cJSON *context, jx_ctx *ctx) {
    jx_frame *root = ctx->root;
    if (!jx_frame_push(root, NULL)) return jx_fail(ctx, "out of memory"), EX_ERR;
    for (const cJSON *c = context ? context->child : NULL; c; c = c->next) {
        jx_value v;
        if (!jx_from_json(c, &v, 0) || !jx_dict_set_cstr(root->vars, c->string ? c->string : "", v)) {
            jx_frame_pop(root);
            jx_fail(ctx, "template context: out of memory or nested too deeply");
            if (!jx_budget_current()->exceeded) ctx->err->status = SPINDLE_ERR_MEMORY;
            return EX_ERR;
        }
    }
    int r = exec_body(ctx, root, &tpl->root->list);
    jx_frame_pop(root);
    return r;
}

spindle_status sp_jinja_render(const sp_jinja_template *tpl, const cJSON *context,
                               const sp_jinja_limits *limits, char **out,
                               size_t *out_len, spindle_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!tpl) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "template is NULL");
    if (context && !cJSON_IsObject(context))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "template context must be a JSON object");
    sp_jinja_limits lim = limits ? *limits : sp_jinja_default_limits();
    if (lim.max_depth <= 0) lim.max_depth = 1;
    spindle_error local;
    if (!err) err = &local;
    sp_strbuf buf = {.limit = lim.max_output};
    jx_frame root;
    jx_ctx ctx = {.limits = &lim, .err = err, .out = &buf, .root = &root, .line = 1, .col = 1};
    jx_budget budget = {.max_live = lim.max_value_bytes ? lim.max_value_bytes : SIZE_MAX,
                        .max_string = lim.max_output ? lim.max_output : SIZE_MAX};
    jx_budget_enter(&budget);
    int r = render_body(tpl, context, &ctx);
    if (budget.exceeded && !ctx.failed) {
        /* a refusal that no caller turned into an error (a dropped list
         * item): the output would be wrong, so it is the limit error */
        r = EX_ERR;
        jx_fail(&ctx, "out of memory");
    }
    jx_budget_leave();
    if (r == EX_ERR || ctx.failed) {
        sp_strbuf_free(&buf);
        if (!ctx.failed) return sp_fail(err, SPINDLE_ERR_TEMPLATE, "template: render failed");
        return err->status ? err->status : SPINDLE_ERR_TEMPLATE;
    }
    if (!buf.p && !sp_strbuf_add(&buf, "", 0)) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    *out = buf.p;
    if (out_len) *out_len = buf.len;
    return SPINDLE_OK;
}
