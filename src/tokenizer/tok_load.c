/* Fast path for the two huge members of tokenizer.json: model.vocab (an
 * object of token -> id) and model.merges. A generic DOM parser spends most
 * of the load time allocating a node per entry, so these two are scanned
 * directly into flat arrays, then blanked out of the text ("{}" / "[]" plus
 * spaces) so that cJSON parses only the small remainder. */
#include "tokenizer/tok_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* End of the string starting at p (on the opening quote), after the
 * closing quote; NULL when unterminated. */
static const char *skip_string(const char *p, const char *e) {
    for (p++; p < e;) {
        const char *q = memchr(p, '"', (size_t)(e - p));
        if (!q) return NULL;
        /* Escaped when preceded by an odd number of backslashes. */
        size_t bs = 0;
        while (q - bs > p && q[-1 - (ptrdiff_t)bs] == '\\') bs++;
        if (!(bs & 1)) return q + 1;
        p = q + 1;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *e) {
    p = ws(p, e);
    if (p >= e) return NULL;
    if (*p == '"') return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < e) {
            if (*p == '"') {
                if (!(p = skip_string(p, e))) return NULL;
                continue;
            }
            if (*p == '{' || *p == '[') depth++;
            else if (*p == '}' || *p == ']') {
                if (--depth == 0) return p + 1;
            }
            p++;
        }
        return NULL;
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' &&
           *p != '\r' && *p != '\t')
        p++;
    return p;
}

static int hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Unescape the JSON string at p (opening quote) into the arena. Returns the
 * position after the string or NULL. */
static const char *read_string(const char *p, const char *e, sp_strbuf *arena,
                               size_t *off, size_t *len) {
    const char *end = skip_string(p, e);
    if (!end || !sp_strbuf_reserve(arena, (size_t)(end - p))) return NULL;
    *off = arena->len;
    char *o = arena->p + arena->len;
    for (p++; p < end - 1;) {
        if (*p != '\\') { *o++ = *p++; continue; }
        char c = p[1];
        p += 2;
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            if (end - 1 - p < 4) return NULL;
            int v = hex4(p);
            if (v < 0) return NULL;
            p += 4;
            uint32_t cp = (uint32_t)v;
            if (cp >= 0xD800 && cp <= 0xDBFF && end - 1 - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                int lo = hex4(p + 2);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    p += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
            o += sp_utf8_encode(cp, o);
            break;
        }
        default: return NULL;
        }
    }
    *len = (size_t)(o - (arena->p + arena->len));
    arena->len += *len;
    return end;
}

static bool push_ref(sp_fast_model *f, size_t off, size_t len, int32_t id) {
    if (f->n == f->cap) {
        size_t c = f->cap ? f->cap * 2 : 1024;
        size_t *o = realloc(f->off, c * sizeof *o);
        if (!o) return false;
        f->off = o;
        uint32_t *l = realloc(f->len, c * sizeof *l);
        if (!l) return false;
        f->len = l;
        int32_t *i = realloc(f->id, c * sizeof *i);
        if (!i) return false;
        f->id = i;
        f->cap = c;
    }
    f->off[f->n] = off;
    f->len[f->n] = (uint32_t)len;
    f->id[f->n++] = id;
    return true;
}

/* {"tok": id, ...} -> refs with ids. */
static bool scan_vocab(const char *p, const char *e, sp_fast_model *f) {
    p = ws(p, e);
    if (p >= e || *p != '{') return false;
    p = ws(p + 1, e);
    if (p < e && *p == '}') return true;
    while (p < e) {
        size_t off, len;
        if (*p != '"' || !(p = read_string(p, e, &f->arena, &off, &len))) return false;
        p = ws(p, e);
        if (p >= e || *p != ':') return false;
        p = ws(p + 1, e);
        char *num_end;
        long v = strtol(p, &num_end, 10);
        if (num_end == p || v < 0 || v >= (1 << 26) || !push_ref(f, off, len, (int32_t)v)) return false;
        p = ws(num_end, e);
        if (p < e && *p == ',') { p = ws(p + 1, e); continue; }
        return p < e && *p == '}';
    }
    return false;
}

/* ["a b", ...] or [["a", "b"], ...] -> pairs of refs (id -1). */
static bool scan_merges(const char *p, const char *e, sp_fast_model *f) {
    p = ws(p, e);
    if (p >= e || *p != '[') return false;
    p = ws(p + 1, e);
    if (p < e && *p == ']') return true;
    while (p < e) {
        size_t off, len, off2, len2;
        if (*p == '"') {
            if (!(p = read_string(p, e, &f->arena, &off, &len))) return false;
            const char *s = f->arena.p + off;
            const char *sp = memchr(s, ' ', len);
            if (!sp) return false;
            size_t al = (size_t)(sp - s);
            if (!push_ref(f, off, al, -1) || !push_ref(f, off + al + 1, len - al - 1, -1)) return false;
        } else if (*p == '[') {
            p = ws(p + 1, e);
            if (p >= e || *p != '"' || !(p = read_string(p, e, &f->arena, &off, &len))) return false;
            p = ws(p, e);
            if (p >= e || *p != ',') return false;
            p = ws(p + 1, e);
            if (p >= e || *p != '"' || !(p = read_string(p, e, &f->arena, &off2, &len2))) return false;
            p = ws(p, e);
            if (p >= e || *p != ']') return false;
            p++;
            if (!push_ref(f, off, len, -1) || !push_ref(f, off2, len2, -1)) return false;
        } else {
            return false;
        }
        p = ws(p, e);
        if (p < e && *p == ',') { p = ws(p + 1, e); continue; }
        return p < e && *p == ']';
    }
    return false;
}

/* Find key `key` in the object starting at p; its value spans [*vs, *ve). */
static bool find_member(const char *p, const char *e, const char *key,
                        const char **vs, const char **ve) {
    size_t kl = strlen(key);
    p = ws(p, e);
    if (p >= e || *p != '{') return false;
    p = ws(p + 1, e);
    while (p < e && *p == '"') {
        const char *ks = p + 1, *kend = skip_string(p, e);
        if (!kend) return false;
        bool hit = (size_t)(kend - 1 - ks) == kl && !memcmp(ks, key, kl);
        p = ws(kend, e);
        if (p >= e || *p != ':') return false;
        const char *v = ws(p + 1, e), *v_end = skip_value(v, e);
        if (!v_end) return false;
        if (hit) { *vs = v; *ve = v_end; return true; }
        p = ws(v_end, e);
        if (p < e && *p == ',') p = ws(p + 1, e);
    }
    return false;
}

static void blank(char *s, char *e, const char *with) {
    size_t n = (size_t)(e - s);
    memset(s, ' ', n);
    memcpy(s, with, 2);
}

spindle_status sp_fast_extract(char *text, size_t len, sp_fast_model *f,
                               spindle_error *err) {
    memset(f, 0, sizeof *f);
    const char *e = text + len, *ms, *me, *vs, *ve;
    if (!find_member(text, e, "model", &ms, &me)) return SPINDLE_OK;
    if (find_member(ms, me, "vocab", &vs, &ve) && *vs == '{') {
        if (!scan_vocab(vs, ve, f))
            return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: model.vocab is malformed");
        f->n_vocab = f->n;
        f->have_vocab = true;
        blank((char *)vs, (char *)ve, "{}");
    }
    if (find_member(ms, me, "merges", &vs, &ve) && *vs == '[') {
        if (!scan_merges(vs, ve, f))
            return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: model.merges is malformed");
        f->have_merges = true;
        blank((char *)vs, (char *)ve, "[]");
    }
    return SPINDLE_OK;
}

void sp_fast_free(sp_fast_model *f) {
    sp_strbuf_free(&f->arena);
    free(f->off);
    free(f->len);
    free(f->id);
    memset(f, 0, sizeof *f);
}
