/* Shared helpers of the tokenizer: growable buffers, UTF-8, a string hash
 * map, PCRE2 patterns with HF find_matches semantics, Unicode predicates. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"

/* The buffer is a NUL-terminated string from its first reservation on, so
 * one that stays empty can be handed out as "". */
bool sp_sbuf_reserve(sp_sbuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    b->p[b->len] = '\0';
    return true;
}

bool sp_sbuf_add(sp_sbuf *b, const char *s, size_t n) {
    if (!sp_sbuf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool sp_sbuf_add_cp(sp_sbuf *b, uint32_t cp) {
    char tmp[4];
    return sp_sbuf_add(b, tmp, (size_t)sp_utf8_encode(cp, tmp));
}

void sp_sbuf_free(sp_sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

uint32_t sp_utf8_next(const char *s, size_t n, int *len) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80 || n < 2) { *len = 1; return u[0]; }
    if (u[0] < 0xE0) { *len = 2; return ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu); }
    if (u[0] < 0xF0 || n < 4) {
        *len = 3;
        return ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
    }
    *len = 4;
    return ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) |
           ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu);
}

int sp_utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid sequence at u (0 when invalid); *sub gets the length
 * of the maximal invalid subpart when invalid. */
static int utf8_seq(const unsigned char *u, size_t n, int *sub) {
    unsigned c = u[0];
    *sub = 1;
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else return 0;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) { *sub = i; return 0; }
        unsigned d = u[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) {
            *sub = i;
            return 0;
        }
    }
    return need + 1;
}

bool sp_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int sub, l = utf8_seq(u + i, n - i, &sub);
        if (!l) return false;
        i += (size_t)l;
    }
    return true;
}

bool sp_utf8_lossy(const char *s, size_t n, sp_sbuf *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    if (!sp_sbuf_reserve(out, n)) return false;
    while (i < n) {
        int sub, l = u[i] < 0x80 ? 1 : utf8_seq(u + i, n - i, &sub);
        if (l) { i += (size_t)l; continue; }
        if (!sp_sbuf_add(out, s + run, i - run) ||
            !sp_sbuf_add(out, "\xEF\xBF\xBD", 3))
            return false;
        i += (size_t)sub;
        run = i;
    }
    return sp_sbuf_add(out, s + run, n - run);
}

/* ------------------------------------------------------------- hash map */

uint64_t sp_hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (n * 0x9E3779B97F4A7C15ull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

/* Each slot keeps the upper hash bits beside the entry index, so that a
 * probe touches the key bytes only on a likely hit. */
#define SLOT_TAG(h) ((h) & 0xFFFFFFFF00000000ull)

static bool strmap_grow(sp_strmap *m) {
    size_t cap = m->tcap ? m->tcap * 2 : 64;
    uint64_t *t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t e = 0; e < m->n; e++) {
        uint64_t h = sp_hash_bytes(m->keys[e], m->klens[e]);
        size_t i = h & (cap - 1);
        while (t[i]) i = (i + 1) & (cap - 1);
        t[i] = SLOT_TAG(h) | (e + 1);
    }
    free(m->table);
    m->table = t;
    m->tcap = cap;
    return true;
}

bool sp_strmap_put(sp_strmap *m, const char *k, size_t klen, int32_t v) {
    if ((m->n + 1) * 2 > m->tcap && !strmap_grow(m)) return false;
    uint64_t h = sp_hash_bytes(k, klen);
    size_t i = h & (m->tcap - 1);
    while (m->table[i]) {
        uint64_t s = m->table[i];
        uint32_t e = (uint32_t)s - 1;
        if (SLOT_TAG(s) == SLOT_TAG(h) && m->klens[e] == klen && memcmp(m->keys[e], k, klen) == 0) {
            m->vals[e] = v; /* later entries win, as in a Rust HashMap */
            return true;
        }
        i = (i + 1) & (m->tcap - 1);
    }
    if (m->n == m->ecap) {
        size_t c = m->ecap ? m->ecap * 2 : 64;
        const char **k2 = realloc(m->keys, c * sizeof *k2);
        if (!k2) return false;
        m->keys = k2;
        uint32_t *l2 = realloc(m->klens, c * sizeof *l2);
        if (!l2) return false;
        m->klens = l2;
        int32_t *v2 = realloc(m->vals, c * sizeof *v2);
        if (!v2) return false;
        m->vals = v2;
        m->ecap = c;
    }
    m->keys[m->n] = k;
    m->klens[m->n] = (uint32_t)klen;
    m->vals[m->n] = v;
    m->table[i] = SLOT_TAG(h) | ++m->n;
    return true;
}

int32_t sp_strmap_get(const sp_strmap *m, const char *k, size_t klen) {
    if (!m->tcap) return -1;
    uint64_t h = sp_hash_bytes(k, klen);
    size_t i = h & (m->tcap - 1);
    while (m->table[i]) {
        uint64_t s = m->table[i];
        uint32_t e = (uint32_t)s - 1;
        if (SLOT_TAG(s) == SLOT_TAG(h) && m->klens[e] == klen && memcmp(m->keys[e], k, klen) == 0)
            return m->vals[e];
        i = (i + 1) & (m->tcap - 1);
    }
    return -1;
}

void sp_strmap_free(sp_strmap *m) {
    free(m->keys);
    free(m->klens);
    free(m->vals);
    free(m->table);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------- patterns */

spindle_status sp_pattern_regex(const char *src, sp_pattern *out,
                                spindle_error *err) {
    int ec;
    PCRE2_SIZE eo;
    out->re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!out->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "tokenizer regex at offset %zu: %s", (size_t)eo,
                       (const char *)msg);
    }
    pcre2_jit_compile(out->re, PCRE2_JIT_COMPLETE); /* falls back if absent */
    return SPINDLE_OK;
}

spindle_status sp_pattern_parse(const cJSON *pat, sp_pattern *out,
                                spindle_error *err) {
    memset(out, 0, sizeof *out);
    const char *s;
    if ((s = sp_json_str(pat, "String"))) {
        out->lit_len = strlen(s);
        out->lit = strdup(s);
        if (!out->lit) return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
        return SPINDLE_OK;
    }
    if ((s = sp_json_str(pat, "Regex"))) return sp_pattern_regex(s, out, err);
    return sp_fail(err, SPINDLE_ERR_FORMAT,
                   "tokenizer.json: pattern is neither String nor Regex");
}

void sp_pattern_free(sp_pattern *p) {
    free(p->lit);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}

bool sp_spans_push(sp_spans *s, size_t a, size_t b, bool match) {
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 16;
        sp_span *v = realloc(s->v, c * sizeof *v);
        if (!v) return false;
        s->v = v;
        s->cap = c;
    }
    s->v[s->n++] = (sp_span){a, b, match};
    return true;
}

/* Matches only (no gaps), as non-overlapping leftmost matches; an empty
 * match moves the search on by one character. */
static spindle_status find_raw(const sp_pattern *p, const char *s, size_t n,
                               sp_spans *m, spindle_error *err) {
    m->n = 0;
    if (p->lit) {
        if (!p->lit_len) return SPINDLE_OK;
        size_t i = 0;
        while (i + p->lit_len <= n) {
            const char *f = memmem(s + i, n - i, p->lit, p->lit_len);
            if (!f) break;
            size_t a = (size_t)(f - s);
            if (!sp_spans_push(m, a, a + p->lit_len, true)) goto oom;
            i = a + p->lit_len;
        }
        return SPINDLE_OK;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
    if (!md) goto oom;
    size_t pos = 0;
    while (pos <= n) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK,
                             md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            pcre2_match_data_free(md);
            return sp_fail(err, SPINDLE_ERR_LIMIT,
                           "tokenizer regex match failed (pcre2 code %d)", rc);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (!sp_spans_push(m, a, b, true)) {
            pcre2_match_data_free(md);
            goto oom;
        }
        if (b > a) pos = b;
        else {
            if (b >= n) break;
            int l;
            sp_utf8_next(s + b, n - b, &l);
            pos = b + (size_t)l;
        }
    }
    pcre2_match_data_free(md);
    return SPINDLE_OK;
oom:
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

spindle_status sp_pattern_find(const sp_pattern *p, const char *s, size_t n,
                               sp_spans *spans, spindle_error *err) {
    spans->n = 0;
    if (n == 0) {
        if (!sp_spans_push(spans, 0, 0, false)) goto oom;
        return SPINDLE_OK;
    }
    sp_spans m = {0};
    spindle_status st = find_raw(p, s, n, &m, err);
    if (st) { free(m.v); return st; }
    size_t prev = 0;
    for (size_t i = 0; i < m.n; i++) {
        if (prev != m.v[i].start && !sp_spans_push(spans, prev, m.v[i].start, false)) goto oom_m;
        if (!sp_spans_push(spans, m.v[i].start, m.v[i].end, true)) goto oom_m;
        prev = m.v[i].end;
    }
    if (prev != n && !sp_spans_push(spans, prev, n, false)) goto oom_m;
    free(m.v);
    return SPINDLE_OK;
oom_m:
    free(m.v);
oom:
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

spindle_status sp_pattern_replace(const sp_pattern *p, const char *s, size_t n,
                                  const char *with, size_t wlen, sp_sbuf *out,
                                  spindle_error *err) {
    sp_spans m = {0};
    spindle_status st = find_raw(p, s, n, &m, err);
    if (st) { free(m.v); return st; }
    size_t prev = 0;
    bool ok = true;
    for (size_t i = 0; i < m.n && ok; i++) {
        ok = sp_sbuf_add(out, s + prev, m.v[i].start - prev) &&
             sp_sbuf_add(out, with, wlen);
        prev = m.v[i].end;
    }
    ok = ok && sp_sbuf_add(out, s + prev, n - prev);
    free(m.v);
    return ok ? SPINDLE_OK : sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

/* ------------------------------------------------------------- unicode */

bool sp_uc_is_whitespace(uint32_t cp) { /* Unicode White_Space */
    return (cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool sp_uc_is_punct(uint32_t cp) {
    if (cp < 0x80 && ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) ||
                      (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126)))
        return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool sp_uc_is_numeric(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL ||
           c == UTF8PROC_CATEGORY_NO;
}

bool sp_uc_is_alnum(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           sp_uc_is_numeric(cp);
}

bool sp_uc_is_control(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_CC;
}

const char *sp_json_str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool sp_json_bool(const cJSON *obj, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}
