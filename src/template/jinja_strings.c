/* Python str methods for Jinja templates (startswith, split, strip, title,
 * format, ...), working on code points as CPython does. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "template/jinja_impl.h"
#include "template/jinja_str.h"

bool jx_str_from_buf(jx_ctx *ctx, sp_strbuf *b, jx_value *out) {
    bool ok = jx_strbuf_ok(b) && jx_str_new(b->p ? b->p : "", b->len, out);
    sp_strbuf_free(b);
    return ok || jx_fail(ctx, "out of memory");
}

static bool in_chars(uint32_t c, const jx_value *chars) {
    if (!chars || chars->t != JX_STR) return jx_is_space_cp(c);
    const char *s = jx_s(*chars);
    size_t n = jx_slen(*chars);
    for (size_t i = 0; i < n;) {
        int len;
        uint32_t d = sp_utf8_next(s + i, n - i, &len);
        i += (size_t)len;
        if (d == c) return true;
    }
    return false;
}

bool jx_strip(jx_ctx *ctx, jx_value s, const jx_value *chars, bool left, bool right,
              jx_value *out) {
    if (chars && chars->t != JX_STR && chars->t != JX_NONE && chars->t != JX_UNDEF)
        return jx_fail(ctx, "strip arg must be None or str");
    const char *p = jx_s(s);
    size_t n = jx_slen(s), a = 0, z = n;
    if (left)
        while (a < z) {
            int k;
            uint32_t c = sp_utf8_next(p + a, z - a, &k);
            if (!in_chars(c, chars)) break;
            a += k;
        }
    if (right)
        while (z > a) {
            size_t q = z - 1;
            while (q > a && sp_utf8_is_continuation((unsigned char)p[q])) q--;
            int len;
            uint32_t c = sp_utf8_next(p + q, z - q, &len);
            if (!in_chars(c, chars)) break;
            z = q;
        }
    return jx_str_new(p + a, z - a, out) || jx_fail(ctx, "out of memory");
}

/* case_op: 'u' upper, 'l' lower, 't' Python str.title, 'c' capitalize,
 * 'j' Jinja's title filter (words start after spaces, - ( { [ <). */
bool jx_case(jx_ctx *ctx, jx_value s, int case_op, jx_value *out) {
    const char *p = jx_s(s);
    size_t n = jx_slen(s);
    sp_strbuf b = jx_strbuf();
    bool prev_cased = false, first = true, word_start = true;
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t c = sp_utf8_next(p + i, n - i, &k);
        utf8proc_int32_t r = (utf8proc_int32_t)c;
        switch (case_op) {
        case 'u': r = utf8proc_toupper(r); break;
        case 'l': r = utf8proc_tolower(r); break;
        case 'c': r = first ? utf8proc_totitle(r) : utf8proc_tolower(r); break;
        case 't': {
            r = prev_cased ? utf8proc_tolower(r) : utf8proc_totitle(r);
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
            prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
                         cat == UTF8PROC_CATEGORY_LT;
            break;
        }
        case 'j': {
            bool sep = jx_is_space_cp(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
            r = sep ? r : word_start ? utf8proc_toupper(r) : utf8proc_tolower(r);
            word_start = sep;
            break;
        }
        }
        first = false;
        char enc[4];
        sp_strbuf_add(&b, enc, sp_utf8_encode((uint32_t)r, enc));
        i += k;
    }
    return jx_str_from_buf(ctx, &b, out);
}

bool jx_replace(jx_ctx *ctx, jx_value s, jx_value old, jx_value new_, int64_t count,
                jx_value *out) {
    if (old.t != JX_STR || new_.t != JX_STR)
        return jx_fail(ctx, "replace() arguments must be str");
    const char *p = jx_s(s), *o = jx_s(old);
    size_t n = jx_slen(s), on = jx_slen(old);
    sp_strbuf b = jx_strbuf();
    if (on == 0) {
        /* Python inserts `new` before every code point and at the end. */
        int64_t done = 0;
        for (size_t i = 0; i <= n;) {
            if (count < 0 || done < count) {
                sp_strbuf_add(&b, jx_s(new_), jx_slen(new_));
                done++;
            }
            if (i == n) break;
            int k;
            sp_utf8_next(p + i, n - i, &k);
            sp_strbuf_add(&b, p + i, k);
            i += k;
        }
        return jx_str_from_buf(ctx, &b, out);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < n) {
        const char *hit = (count < 0 || done < count) ? memmem(p + i, n - i, o, on) : NULL;
        if (!hit) break;
        sp_strbuf_add(&b, p + i, (size_t)(hit - (p + i)));
        sp_strbuf_add(&b, jx_s(new_), jx_slen(new_));
        i = (size_t)(hit - p) + on;
        done++;
    }
    sp_strbuf_add(&b, p + i, n - i);
    return jx_str_from_buf(ctx, &b, out);
}

static bool push_str(jx_ctx *ctx, jx_value list, const char *s, size_t n) {
    jx_value v;
    if (!jx_str_new(s, n, &v) || !jx_list_push(list, v)) return jx_fail(ctx, "out of memory");
    return true;
}

/* str.split / str.rsplit. */
bool jx_split(jx_ctx *ctx, jx_value s, const jx_value *sep, int64_t maxsplit, bool from_right,
              jx_value *out) {
    const char *p = jx_s(s);
    size_t n = jx_slen(s);
    if (!jx_list_new(0, false, out)) return jx_fail(ctx, "out of memory");
    if (sep && sep->t == JX_STR) {
        size_t sn = jx_slen(*sep);
        if (sn == 0) return jx_unref(*out), jx_fail(ctx, "empty separator");
        const char *q = jx_s(*sep);
        if (!from_right) {
            size_t i = 0;
            int64_t done = 0;
            for (;;) {
                const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(p + i, n - i, q, sn) : NULL;
                if (!hit) break;
                if (!push_str(ctx, *out, p + i, (size_t)(hit - p) - i)) return false;
                i = (size_t)(hit - p) + sn;
                done++;
            }
            return push_str(ctx, *out, p + i, n - i);
        }
        /* From the right: collect pieces backwards, then reverse. */
        size_t end = n;
        int64_t done = 0;
        while (maxsplit < 0 || done < maxsplit) {
            size_t j = end;
            bool found = false;
            while (j >= sn) {
                if (memcmp(p + j - sn, q, sn) == 0) {
                    found = true;
                    break;
                }
                j--;
            }
            if (!found) break;
            if (!push_str(ctx, *out, p + j, end - j)) return false;
            end = j - sn;
            done++;
        }
        if (!push_str(ctx, *out, p, end)) return false;
    } else {
        /* Whitespace split: runs of whitespace, no empty strings. */
        size_t i = 0;
        int64_t done = 0;
        if (!from_right) {
            for (;;) {
                while (i < n) {
                    int k;
                    uint32_t c = sp_utf8_next(p + i, n - i, &k);
                    if (!jx_is_space_cp(c)) break;
                    i += k;
                }
                if (i >= n) break;
                if (maxsplit >= 0 && done >= maxsplit) {
                    size_t z = n;
                    while (z > i) {
                        size_t q2 = z - 1;
                        while (q2 > i && sp_utf8_is_continuation((unsigned char)p[q2])) q2--;
                        int len;
                        uint32_t c = sp_utf8_next(p + q2, z - q2, &len);
                        if (!jx_is_space_cp(c)) break;
                        z = q2;
                    }
                    return push_str(ctx, *out, p + i, z - i);
                }
                size_t st = i;
                while (i < n) {
                    int k;
                    uint32_t c = sp_utf8_next(p + i, n - i, &k);
                    if (jx_is_space_cp(c)) break;
                    i += k;
                }
                if (!push_str(ctx, *out, p + st, i - st)) return false;
                done++;
            }
            return true;
        }
        /* rsplit() on whitespace: split all, then rejoin the head if needed. */
        jx_value all;
        if (!jx_split(ctx, s, NULL, -1, false, &all)) return jx_unref(*out), false;
        size_t cnt = all.u.o->u.list.n;
        if (maxsplit < 0 || (size_t)maxsplit >= cnt) {
            jx_unref(*out);
            *out = all;
            return true;
        }
        /* Keep the text before the last `maxsplit` words as one piece. */
        size_t keep = cnt - (size_t)maxsplit;
        size_t z = n, words = 0;
        while (words < (size_t)maxsplit) {
            while (z > 0 && jx_is_space_cp((unsigned char)p[z - 1])) z--;
            while (z > 0 && !jx_is_space_cp((unsigned char)p[z - 1])) z--;
            words++;
        }
        size_t a = 0;
        while (a < z && jx_is_space_cp((unsigned char)p[a])) a++;
        size_t e = z;
        while (e > a && jx_is_space_cp((unsigned char)p[e - 1])) e--;
        bool ok = push_str(ctx, *out, p + a, e - a);
        for (size_t i2 = keep; ok && i2 < cnt; i2++) ok = jx_list_push(*out, jx_ref(all.u.o->u.list.v[i2]));
        jx_unref(all);
        return ok;
    }
    /* Reverse the right-split pieces into reading order. */
    jx_obj *o = out->u.o;
    for (size_t i = 0, j = o->u.list.n ? o->u.list.n - 1 : 0; i < j; i++, j--) {
        jx_value t = o->u.list.v[i];
        o->u.list.v[i] = o->u.list.v[j];
        o->u.list.v[j] = t;
    }
    return true;
}

/* str.format with {}, {0}, {name} fields and no format specs. */
bool jx_str_format(jx_ctx *ctx, jx_value fmt, const jx_args *args, jx_value *out) {
    const char *p = jx_s(fmt);
    size_t n = jx_slen(fmt), auto_idx = 0;
    sp_strbuf b = jx_strbuf();
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') {
            sp_strbuf_addc(&b, '{');
            i++;
        } else if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') {
            sp_strbuf_addc(&b, '}');
            i++;
        } else if (p[i] == '{') {
            const char *close = memchr(p + i, '}', n - i);
            if (!close) return sp_strbuf_free(&b), jx_fail(ctx, "Single '{' encountered in format string");
            size_t fl = (size_t)(close - (p + i + 1));
            const char *f = p + i + 1;
            if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl))
                return sp_strbuf_free(&b), jx_fail(ctx, "format specs in str.format are not supported");
            const jx_value *v = NULL;
            if (fl == 0) {
                v = auto_idx < args->npos ? &args->pos[auto_idx] : NULL;
                auto_idx++;
            } else if (f[0] >= '0' && f[0] <= '9') {
                size_t k = (size_t)strtoul(f, NULL, 10);
                v = k < args->npos ? &args->pos[k] : NULL;
            } else {
                for (size_t k = 0; k < args->nkw; k++)
                    if (strlen(args->kwnames[k]) == fl && !memcmp(args->kwnames[k], f, fl)) v = &args->kw[k];
            }
            if (!v) return sp_strbuf_free(&b), jx_fail(ctx, "format field '%.*s' has no argument", (int)fl, f);
            jx_write_str(&b, *v);
            i = (size_t)(close - p);
        } else if (p[i] == '}') {
            return sp_strbuf_free(&b), jx_fail(ctx, "Single '}' encountered in format string");
        } else {
            sp_strbuf_addc(&b, p[i]);
        }
    }
    return jx_str_from_buf(ctx, &b, out);
}

/* str.splitlines() boundaries; returns the line end and sets *next. */
size_t jx_line_end(const char *s, size_t n, size_t i, size_t *next) {
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) {
            *next = i + 1;
            return i;
        }
        if (c == '\r') {
            *next = i + 1 < n && s[i + 1] == '\n' ? i + 2 : i + 1;
            return i;
        }
        if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85) {
            *next = i + 2;
            return i;
        }
        if (c == 0xE2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
            ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9)) {
            *next = i + 3;
            return i;
        }
        i++;
    }
    *next = n;
    return n;
}

bool jx_splitlines(jx_ctx *ctx, jx_value s, jx_value *out) {
    const char *p = jx_s(s);
    size_t n = jx_slen(s), i = 0;
    if (!jx_list_new(0, false, out)) return jx_fail(ctx, "out of memory");
    while (i < n) {
        size_t next;
        size_t e = jx_line_end(p, n, i, &next);
        if (!push_str(ctx, *out, p + i, e - i)) return false;
        i = next;
    }
    return true;
}

static bool all_cps(jx_value s, bool (*pred)(uint32_t)) {
    const char *p = jx_s(s);
    size_t n = jx_slen(s);
    if (n == 0) return false;
    for (size_t i = 0; i < n;) {
        int len;
        uint32_t c = sp_utf8_next(p + i, n - i, &len);
        i += (size_t)len;
        if (!pred(c)) return false;
    }
    return true;
}

static bool is_digit_cp(uint32_t c) {
    return utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_ND;
}
static bool is_alpha_cp(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
static bool is_alnum_cp(uint32_t c) { return is_alpha_cp(c) || is_digit_cp(c); }

bool jx_str_predicate(jx_value s, const char *name, bool *out) {
    if (!strcmp(name, "isdigit")) *out = all_cps(s, is_digit_cp);
    else if (!strcmp(name, "isalpha")) *out = all_cps(s, is_alpha_cp);
    else if (!strcmp(name, "isalnum")) *out = all_cps(s, is_alnum_cp);
    else if (!strcmp(name, "isspace")) *out = all_cps(s, jx_is_space_cp);
    else if (!strcmp(name, "islower") || !strcmp(name, "isupper")) {
        bool want_lower = name[2] == 'l', cased = false, ok = true;
        const char *p = jx_s(s);
        size_t n = jx_slen(s);
        for (size_t i = 0; i < n;) {
            int len;
            uint32_t c = sp_utf8_next(p + i, n - i, &len);
            i += (size_t)len;
            utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
            if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) {
                cased = true;
                if (want_lower) ok = false;
            } else if (k == UTF8PROC_CATEGORY_LL) {
                cased = true;
                if (!want_lower) ok = false;
            }
        }
        *out = ok && cased;
    } else return false;
    return true;
}

bool jx_word_char(uint32_t c) { return c == '_' || is_alnum_cp(c); }

/* printf-style `str % args` for %s, %r, %d, %i and %%; a mapping (or an
 * Undefined, which Python treats as one) supplies no positional values. */
bool jx_percent_format(jx_ctx *ctx, jx_value fmt, jx_value args, jx_value *out) {
    const jx_value *pos = &args;
    size_t npos = 1, used = 0;
    if (args.t == JX_LIST && args.u.o->u.list.tuple) {
        pos = args.u.o->u.list.v;
        npos = args.u.o->u.list.n;
    } else if (jx_is_map(args) || args.t == JX_UNDEF) {
        npos = 0;
    }
    const char *p = jx_s(fmt);
    size_t n = jx_slen(fmt);
    sp_strbuf b = jx_strbuf();
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            sp_strbuf_addc(&b, p[i]);
            continue;
        }
        char c = i + 1 < n ? p[++i] : '\0';
        if (c == '%') {
            sp_strbuf_addc(&b, '%');
            continue;
        }
        if (c != 's' && c != 'r' && c != 'd' && c != 'i')
            return sp_strbuf_free(&b), jx_fail(ctx, "unsupported format character in '%%' formatting");
        if (used >= npos) return sp_strbuf_free(&b), jx_fail(ctx, "not enough arguments for format string");
        jx_value v = pos[used++];
        if (c == 'r') jx_write_repr(&b, v);
        else if (c == 's') jx_write_str(&b, v);
        else if (v.t == JX_INT || v.t == JX_BOOL) sp_strbuf_printf(&b, "%lld", (long long)jx_int_of(v));
        else if (v.t == JX_FLOAT && !jx_float_fits_int(v.u.f))
            return sp_strbuf_free(&b), jx_fail(ctx, "%%d format: cannot convert float %g to an integer", v.u.f);
        else if (v.t == JX_FLOAT) sp_strbuf_printf(&b, "%lld", (long long)v.u.f);
        else return sp_strbuf_free(&b), jx_fail(ctx, "%%d format: a real number is required, not %s", jx_type_name(v));
    }
    if (used < npos) return sp_strbuf_free(&b), jx_fail(ctx, "not all arguments converted during string formatting");
    return jx_str_from_buf(ctx, &b, out);
}
