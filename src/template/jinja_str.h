/* String helpers shared by the Jinja filters and methods (jinja_strings.c). */
#ifndef SP_INPUT_JINJA_STR_H
#define SP_INPUT_JINJA_STR_H

#include "template/jinja_impl.h"

/* Turn a buffer into a string value (the buffer is released). */
bool jx_str_from_buf(jx_ctx *ctx, sp_strbuf *b, jx_value *out);
/* jinja2's escape(): HTML-escaped Markup; Markup stays as it is unless
 * `force`. */
bool jx_escape(jx_ctx *ctx, jx_value v, bool force, jx_value *out);
/* Markup(v): str(v) marked safe. */
bool jx_mark_safe(jx_ctx *ctx, jx_value v, jx_value *out);
/* str.strip/lstrip/rstrip; `chars` NULL or None: whitespace. */
bool jx_strip(jx_ctx *ctx, jx_value s, const jx_value *chars, bool left, bool right,
              jx_value *out);
/* 'u' upper, 'l' lower, 't' str.title, 'c' capitalize, 'j' Jinja title. */
bool jx_case(jx_ctx *ctx, jx_value s, int case_op, jx_value *out);
/* count < 0: all. */
bool jx_replace(jx_ctx *ctx, jx_value s, jx_value old, jx_value new_, int64_t count,
                jx_value *out);
bool jx_split(jx_ctx *ctx, jx_value s, const jx_value *sep, int64_t maxsplit, bool from_right,
              jx_value *out);
bool jx_str_format(jx_ctx *ctx, jx_value fmt, const jx_args *args, jx_value *out);
size_t jx_line_end(const char *s, size_t n, size_t i, size_t *next);
bool jx_splitlines(jx_ctx *ctx, jx_value s, jx_value *out);
/* isdigit, isalpha, isalnum, isspace, islower, isupper; false if unknown. */
bool jx_str_predicate(jx_value s, const char *name, bool *out);
bool jx_word_char(uint32_t c);
/* Python's `str % args` for %s %r %d %i %%. */
bool jx_percent_format(jx_ctx *ctx, jx_value fmt, jx_value args, jx_value *out);

/* The str methods (jinja_builtins.c). */
bool jx_call_str_method(jx_ctx *ctx, jx_value s, const char *m, const jx_args *a, jx_value *out,
                        bool *found);
/* Markup (jinja_markup.c): the str methods that markupsafe wraps (their
 * string arguments escaped, the result Markup) and `Markup % args`. */
bool jx_markup_method(const char *name);
bool jx_call_markup_method(jx_ctx *ctx, jx_value self, const char *m, const jx_args *a,
                           jx_value *out, bool *found);
bool jx_markup_percent(jx_ctx *ctx, jx_value fmt, jx_value args, jx_value *out);

#endif
