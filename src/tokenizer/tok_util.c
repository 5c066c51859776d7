/* Shared helpers of the tokenizer: a string hash map, PCRE2 patterns with
 * HF find_matches semantics, Unicode predicates. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"
#include "tokenizer/tok_unicode.h"

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
    /* PCRE2's Unicode classes are replaced by HF's (tok_unicode.h). */
    sp_strbuf hf = {0};
    if (!sp_uc_rewrite_regex(src, &hf)) {
        sp_strbuf_free(&hf);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
    }
    out->re = pcre2_compile((PCRE2_SPTR)hf.p, hf.len, PCRE2_UTF | PCRE2_UCP,
                            &ec, &eo, NULL);
    sp_strbuf_free(&hf);
    if (!out->re) {
        /* Name the error on the pattern as written when it has one. */
        const char *what = "tokenizer regex";
        pcre2_code *orig = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED,
                                         PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (orig) {
            pcre2_code_free(orig);
            what = "tokenizer regex with HF's Unicode classes";
        }
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "%s at offset %zu: %s", what,
                       (size_t)eo, (const char *)msg);
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
                                  const char *with, size_t wlen, sp_strbuf *out,
                                  spindle_error *err) {
    sp_spans m = {0};
    spindle_status st = find_raw(p, s, n, &m, err);
    if (st) { free(m.v); return st; }
    size_t prev = 0;
    bool ok = true;
    for (size_t i = 0; i < m.n && ok; i++) {
        ok = sp_strbuf_add(out, s + prev, m.v[i].start - prev) &&
             sp_strbuf_add(out, with, wlen);
        prev = m.v[i].end;
    }
    ok = ok && sp_strbuf_add(out, s + prev, n - prev);
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
    return sp_uc_in_ranges(SP_UC_BERT_PUNCT, SP_UC_N_BERT_PUNCT, cp);
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

int sp_json_int_clamped(const cJSON *obj, const char *key, int dflt, int lo, int hi) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) return dflt;
    double d = v->valuedouble;
    if (!(d > lo)) return lo;
    if (!(d < hi)) return hi;
    return (int)d;
}
