/* Jinja lexer. Mirrors jinja2.lexer with trim_blocks=True and
 * lstrip_blocks=True: newlines are normalized to "\n" and one trailing
 * newline dropped, "-" strips whitespace beside a tag, "+" keeps it, a block
 * or comment end eats the newline after it, and a block or comment alone on
 * its line loses its indentation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "template/jinja_impl.h"

typedef struct lexer {
    const char *s;
    size_t n, pos;
    int line;
    size_t line_start;
    jx_tokens *out;
    spindle_error *err;
} lexer;

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

static void advance_to(lexer *lx, size_t to) {
    for (size_t i = lx->pos; i < to && i < lx->n; i++)
        if (lx->s[i] == '\n') {
            lx->line++;
            lx->line_start = i + 1;
        }
    lx->pos = to;
}

static spindle_status lex_fail(lexer *lx, size_t at, const char *msg) {
    int line = 1;
    size_t ls = 0;
    for (size_t i = 0; i < at && i < lx->n; i++)
        if (lx->s[i] == '\n') {
            line++;
            ls = i + 1;
        }
    return sp_fail(lx->err, SPINDLE_ERR_TEMPLATE,
                   "template line %d, column %zu: %s", line, at - ls + 1, msg);
}

static bool push(lexer *lx, jx_tok_type type, size_t at, const char *s,
                 size_t len) {
    jx_tokens *t = lx->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        jx_token *v = realloc(t->v, cap * sizeof *v);
        if (!v) return false;
        t->v = v;
        t->cap = cap;
    }
    int line = 1;
    size_t ls = 0;
    /* Tokens are pushed in order, so `at` is at or after the cursor line
     * unless it precedes it (text runs); recount cheaply from the cursor. */
    if (at >= lx->line_start) {
        line = lx->line;
        ls = lx->line_start;
        for (size_t i = lx->line_start; i < at; i++)
            if (lx->s[i] == '\n') {
                line++;
                ls = i + 1;
            }
    } else {
        for (size_t i = 0; i < at; i++)
            if (lx->s[i] == '\n') {
                line++;
                ls = i + 1;
            }
    }
    jx_token *tk = &t->v[t->n++];
    memset(tk, 0, sizeof *tk);
    tk->type = type;
    tk->line = line;
    tk->col = (int)(at - ls + 1);
    tk->s = s;
    tk->len = len;
    return true;
}

/* Python's "unicode-escape" decoding of a string literal body. */
static char *unescape(const char *s, size_t n, size_t *out_len) {
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i];
            continue;
        }
        char c = s[++i];
        uint32_t cp = 0;
        int digits = 0;
        switch (c) {
        case 'n': o[k++] = '\n'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'r': o[k++] = '\r'; continue;
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'v': o[k++] = '\v'; continue;
        case '\n': continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (c >= '0' && c <= '7') {
                int m = 0;
                while (m < 3 && i < n && s[i] >= '0' && s[i] <= '7') {
                    cp = cp * 8 + (uint32_t)(s[i] - '0');
                    i++;
                    m++;
                }
                i--;
                k += sp_utf8_encode(cp, o + k);
                continue;
            }
            o[k++] = '\\';
            o[k++] = c;
            continue;
        }
        int m = 0;
        while (m < digits && i + 1 < n) {
            char h = s[i + 1];
            int d = (h >= '0' && h <= '9')   ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (d < 0) break;
            cp = cp * 16 + (uint32_t)d;
            i++;
            m++;
        }
        if (m < digits || cp > 0x10FFFF) {
            free(o);
            return NULL;
        }
        /* An escape is at most 10 bytes and encodes to at most 4. */
        k += sp_utf8_encode(cp, o + k);
    }
    o[k] = '\0';
    *out_len = k;
    return o;
}

/* The end of the number literal at s: digits and '_', then an optional
 * fraction and exponent. Sets *is_float when either is there. */
static size_t number_end(const char *s, size_t left, bool *is_float) {
    size_t q = 0;
    *is_float = false;
    while (q < left && ((s[q] >= '0' && s[q] <= '9') || s[q] == '_')) q++;
    if (q + 1 < left && s[q] == '.' && s[q + 1] >= '0' && s[q + 1] <= '9') {
        *is_float = true;
        q++;
        while (q < left && ((s[q] >= '0' && s[q] <= '9') || s[q] == '_')) q++;
    }
    if (q < left && (s[q] == 'e' || s[q] == 'E')) {
        size_t r = q + 1;
        if (r < left && (s[r] == '+' || s[r] == '-')) r++;
        if (r < left && s[r] >= '0' && s[r] <= '9') {
            *is_float = true;
            q = r;
            while (q < left && ((s[q] >= '0' && s[q] <= '9') || s[q] == '_')) q++;
        }
    }
    return q;
}

/* A number literal at offset p (s = the source there, left = bytes to its
 * end): one JT_INT or JT_FLOAT token. The digits are copied whole, without
 * the '_' separators, so a literal of any length keeps its value (a float
 * past DBL_MAX is inf, as Python's float() makes it). */
static spindle_status lex_number(lexer *lx, size_t p, const char *s, size_t left) {
    bool is_float;
    size_t q = number_end(s, left, &is_float);
    char small[128];
    char *num = q < sizeof small ? small : malloc(q + 1);
    if (!num) return SPINDLE_ERR_MEMORY;
    size_t k = 0;
    for (size_t i = 0; i < q; i++)
        if (s[i] != '_') num[k++] = s[i];
    num[k] = '\0';
    spindle_status st = SPINDLE_OK;
    if (!push(lx, is_float ? JT_FLOAT : JT_INT, p, s, q)) {
        st = SPINDLE_ERR_MEMORY;
    } else {
        jx_token *tk = &lx->out->v[lx->out->n - 1];
        if (is_float) {
            tk->fval = strtod(num, NULL);
        } else {
            unsigned long long u = strtoull(num, NULL, 10);
            if (k > 18 && (u > (unsigned long long)INT64_MAX || k > 19))
                st = lex_fail(lx, p, "integer literal too large");
            else
                tk->ival = (int64_t)u;
        }
    }
    if (num != small) free(num);
    if (st == SPINDLE_OK) advance_to(lx, p + q);
    return st;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char OPS1[] = "+-/*%~[](){}<>=.:|,;";

/* Inside {{ }} or {% %}: emit tokens up to and including the end tag. */
static spindle_status lex_tag(lexer *lx, bool block, bool *line_starting) {
    const char end0 = block ? '%' : '}';
    char stack[256]; /* expected closing brackets */
    int depth = 0;
    for (;;) {
        size_t p = lx->pos;
        while (p < lx->n && is_ws(lx->s[p])) p++;
        advance_to(lx, p);
        if (p >= lx->n)
            return lex_fail(lx, p, block ? "unexpected end of template, "
                                           "expected end of block tag"
                                         : "unexpected end of template, "
                                           "expected '}}'");
        const char *s = lx->s + p;
        size_t left = lx->n - p;
        if (depth == 0) {
            size_t tl = 0;
            char sign = 0;
            if (left >= 3 && (s[0] == '-' || s[0] == '+') && s[1] == end0 &&
                s[2] == '}') {
                sign = s[0];
                tl = 3;
            } else if (left >= 2 && s[0] == end0 && s[1] == '}') {
                tl = 2;
            }
            if (tl) {
                if (sign == '+' && !block) { /* "+}}" is not an end tag */
                } else {
                    if (!push(lx, block ? JT_BLOCK_END : JT_VAR_END, p, s, tl))
                        return SPINDLE_ERR_MEMORY;
                    size_t q = p + tl;
                    if (sign == '-') {
                        while (q < lx->n && is_ws(lx->s[q])) q++;
                    } else if (block && sign == 0 && q < lx->n &&
                               lx->s[q] == '\n') {
                        q++;
                    }
                    *line_starting = q > 0 && lx->s[q - 1] == '\n';
                    advance_to(lx, q);
                    return SPINDLE_OK;
                }
            }
        }
        char c = s[0];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t q = 1;
            while (q < left && ((s[q] >= 'a' && s[q] <= 'z') ||
                                (s[q] >= 'A' && s[q] <= 'Z') ||
                                (s[q] >= '0' && s[q] <= '9') || s[q] == '_'))
                q++;
            if (!push(lx, JT_NAME, p, s, q)) return SPINDLE_ERR_MEMORY;
            advance_to(lx, p + q);
        } else if (c >= '0' && c <= '9') {
            spindle_status st = lex_number(lx, p, s, left);
            if (st != SPINDLE_OK) return st;
        } else if (c == '\'' || c == '"') {
            size_t q = 1;
            while (q < left && s[q] != c) {
                if (s[q] == '\\') q++;
                q++;
            }
            if (q >= left) return lex_fail(lx, p, "unexpected char '\"' (unterminated string)");
            size_t ulen = 0;
            char *u = unescape(s + 1, q - 1, &ulen);
            if (!u) return lex_fail(lx, p, "invalid escape in string literal");
            if (!push(lx, JT_STRING, p, u, ulen)) {
                free(u);
                return SPINDLE_ERR_MEMORY;
            }
            advance_to(lx, p + q + 1);
        } else {
            size_t q = 0;
            for (int i = 0; OPS2[i]; i++)
                if (left >= 2 && s[0] == OPS2[i][0] && s[1] == OPS2[i][1]) q = 2;
            if (!q && strchr(OPS1, c) && c) q = 1;
            if (!q) {
                char msg[64];
                int k;
                sp_utf8_next(s, left, &k);
                snprintf(msg, sizeof msg, "unexpected char '%.*s'", (int)k, s);
                return lex_fail(lx, p, msg);
            }
            if (q == 1 && (c == '(' || c == '[' || c == '{')) {
                if (depth == (int)sizeof stack)
                    return lex_fail(lx, p, "brackets nested too deeply");
                stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            }
            if (q == 1 && (c == ')' || c == ']' || c == '}')) {
                char msg[64];
                if (depth == 0) {
                    snprintf(msg, sizeof msg, "unexpected '%c'", c);
                    return lex_fail(lx, p, msg);
                }
                if (stack[depth - 1] != c) {
                    snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", c, stack[depth - 1]);
                    return lex_fail(lx, p, msg);
                }
                depth--;
            }
            if (!push(lx, JT_OP, p, s, q)) return SPINDLE_ERR_MEMORY;
            advance_to(lx, p + q);
        }
    }
}

static bool only_ws(const char *s, size_t n) {
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (!is_ws(s[i])) return false;
    return true;
}

/* `{% raw %}` at p (after the "{%" and sign)? Returns the end of the tag. */
static size_t match_word_tag(const char *s, size_t n, size_t p,
                             const char *word, char *end_sign) {
    while (p < n && is_ws(s[p])) p++;
    size_t wl = strlen(word);
    if (p + wl > n || memcmp(s + p, word, wl) != 0) return 0;
    p += wl;
    while (p < n && is_ws(s[p])) p++;
    if (p + 3 <= n && (s[p] == '-' || s[p] == '+') && s[p + 1] == '%' && s[p + 2] == '}') {
        *end_sign = s[p];
        return p + 3;
    }
    if (p + 2 <= n && s[p] == '%' && s[p + 1] == '}') {
        *end_sign = 0;
        return p + 2;
    }
    return 0;
}

static spindle_status lex_root(lexer *lx) {
    bool line_starting = true;
    while (lx->pos < lx->n) {
        const char *s = lx->s;
        size_t p = lx->pos, m = p;
        int kind = 0; /* 1 var, 2 block, 3 comment */
        for (; m + 1 < lx->n; m++) {
            if (s[m] != '{') continue;
            if (s[m + 1] == '{') kind = 1;
            else if (s[m + 1] == '%') kind = 2;
            else if (s[m + 1] == '#') kind = 3;
            if (kind) break;
        }
        if (!kind) {
            if (!push(lx, JT_TEXT, p, s + p, lx->n - p)) return SPINDLE_ERR_MEMORY;
            advance_to(lx, lx->n);
            break;
        }
        size_t after = m + 2;
        char sign = 0;
        if (after < lx->n && (s[after] == '-' || s[after] == '+')) sign = s[after++];
        size_t text_len = m - p;
        if (sign == '-') {
            while (text_len > 0 && is_ws(s[p + text_len - 1])) text_len--;
        } else if (sign != '+' && kind != 1) {
            size_t l_pos = text_len;
            while (l_pos > 0 && s[p + l_pos - 1] != '\n') l_pos--;
            if ((l_pos > 0 || line_starting) &&
                only_ws(s + p + l_pos, text_len - l_pos))
                text_len = l_pos;
        }
        if (text_len && !push(lx, JT_TEXT, p, s + p, text_len))
            return SPINDLE_ERR_MEMORY;
        char esign = 0;
        size_t raw_end = kind == 2 ? match_word_tag(s, lx->n, after, "raw", &esign) : 0;
        if (raw_end) {
            size_t q = raw_end;
            if (esign == '-') while (q < lx->n && is_ws(s[q])) q++;
            /* The raw body runs to the next {% endraw %}. */
            for (size_t r = q; r + 1 < lx->n; r++) {
                if (s[r] != '{' || s[r + 1] != '%') continue;
                size_t a2 = r + 2;
                char sg = 0;
                if (a2 < lx->n && (s[a2] == '-' || s[a2] == '+')) sg = s[a2++];
                char es2 = 0;
                size_t e2 = match_word_tag(s, lx->n, a2, "endraw", &es2);
                if (!e2) continue;
                size_t body_end = r;
                if (sg == '-') while (body_end > q && is_ws(s[body_end - 1])) body_end--;
                if (body_end > q && !push(lx, JT_TEXT, q, s + q, body_end - q))
                    return SPINDLE_ERR_MEMORY;
                if (es2 == '-') while (e2 < lx->n && is_ws(s[e2])) e2++;
                else if (es2 == 0 && e2 < lx->n && s[e2] == '\n') e2++;
                line_starting = s[e2 - 1] == '\n';
                advance_to(lx, e2);
                goto next;
            }
            return lex_fail(lx, m, "missing end of raw directive");
        }
        if (kind == 3) {
            size_t q = after;
            for (; q + 1 < lx->n; q++)
                if (s[q] == '#' && s[q + 1] == '}') break;
            if (q + 1 >= lx->n) return lex_fail(lx, m, "missing end of comment tag");
            char cs = q > after ? s[q - 1] : 0;
            q += 2;
            if (cs == '-') while (q < lx->n && is_ws(s[q])) q++;
            else if (cs != '+' && q < lx->n && s[q] == '\n') q++;
            line_starting = s[q - 1] == '\n';
            advance_to(lx, q);
            continue;
        }
        if (!push(lx, kind == 1 ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, m, s + m, after - m))
            return SPINDLE_ERR_MEMORY;
        advance_to(lx, after);
        spindle_status st = lex_tag(lx, kind == 2, &line_starting);
        if (st) return st;
    next:;
    }
    return push(lx, JT_EOF, lx->n, lx->s + lx->n, 0) ? SPINDLE_OK : SPINDLE_ERR_MEMORY;
}

spindle_status jx_lex(const char *src, size_t len, jx_tokens *out,
                      spindle_error *err) {
    memset(out, 0, sizeof *out);
    char *norm = malloc(len + 1);
    if (!norm) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory lexing template");
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[k++] = src[i];
        }
    }
    if (k > 0 && norm[k - 1] == '\n') k--; /* keep_trailing_newline=False */
    norm[k] = '\0';
    out->norm = norm;
    lexer lx = {.s = norm, .n = k, .line = 1, .out = out, .err = err};
    spindle_status st = lex_root(&lx);
    if (st == SPINDLE_ERR_MEMORY)
        sp_fail(err, st, "out of memory lexing template");
    if (st) jx_tokens_free(out);
    return st;
}

void jx_tokens_free(jx_tokens *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].type == JT_STRING) free((char *)t->v[i].s);
    free(t->v);
    free(t->norm);
    memset(t, 0, sizeof *t);
}
