/* Vocabulary helpers of the tokenizer conversion (convert_tokenizer.c),
 * reproducing what transformers does when it builds a tokenizer from a GGUF
 * (integrations/gguf/gguf_tokenizer_mapping.py):
 *  - a string -> id map with Python dict semantics;
 *  - token spellings: byte-level vocabularies in GPT-2's byte alphabet,
 *    Gemma's blank tokens as U+2581 runs;
 *  - for SentencePiece vocabularies without merges, the merges
 *    tokenization_utils_base.generate_merges derives: for every distinct
 *    token, in first-occurrence order, every split into two tokens (at
 *    code-point boundaries) is a merge ranked by the token's key; a token's
 *    merges are ordered by (id of left, id of right), then all merges by
 *    (key, length of left, length of right), descending and stable. Ids are
 *    those of the last occurrence. The key is the score, or for Gemma minus
 *    the position (its scores do not follow merge order). */
#include "convert/convert_internal.h"
#include "base/error.h"
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- string -> id */

typedef struct slot {
    const char *s;
    int32_t first, last;
} slot;

struct sp_conv_vocab {
    slot *slots;
    size_t cap;
};

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static slot *lookup(const sp_conv_vocab *v, const char *s) {
    size_t i = (size_t)hash(s) & (v->cap - 1);
    while (v->slots[i].s && strcmp(v->slots[i].s, s)) i = (i + 1) & (v->cap - 1);
    return &v->slots[i];
}

spindle_status sp_conv_vocab_new(char *const *tokens, size_t n,
                                 sp_conv_vocab **out, spindle_error *err) {
    *out = NULL;
    sp_conv_vocab *v = calloc(1, sizeof *v);
    size_t cap = 16;
    while (cap < 2 * n + 16) cap *= 2;
    if (v) v->slots = calloc(cap, sizeof *v->slots);
    if (!v || !v->slots) {
        free(v);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    v->cap = cap;
    for (size_t i = 0; i < n; i++) {
        slot *s = lookup(v, tokens[i]);
        if (!s->s) {
            s->s = tokens[i];
            s->first = (int32_t)i;
        }
        s->last = (int32_t)i;
    }
    *out = v;
    return SPINDLE_OK;
}

void sp_conv_vocab_free(sp_conv_vocab *v) {
    if (!v) return;
    free(v->slots);
    free(v);
}

int32_t sp_conv_vocab_id(const sp_conv_vocab *v, const char *s) {
    const slot *sl = lookup(v, s);
    return sl->s ? sl->last : -1;
}

/* ------------------------------------------------------------- spelling */

/* The code point at p in a NUL-terminated string; returns its byte length
 * (never past the NUL). */
static size_t cp_at(const char *p, uint32_t *cp) {
    int l;
    *cp = sp_utf8_next(p, strnlen(p, 4), &l);
    return (size_t)l;
}

/* Python's str.isspace. */
static bool py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char *sp_conv_gemma_spelling(const char *tok) {
    bool space = false, blank = *tok != '\0';
    for (const char *p = tok; *p;) {
        uint32_t c;
        p += cp_at(p, &c);
        if (c == ' ') space = true;
        if (!py_space(c)) blank = false;
    }
    if (!space || !blank) return strdup(tok);
    size_t n = sp_utf8_count(tok, strlen(tok));
    char *s = malloc(3 * n + 1);
    for (size_t i = 0; s && i < n; i++) memcpy(s + 3 * i, "\xe2\x96\x81", 3);
    if (s) s[3 * n] = '\0';
    return s;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes for U+0100.. in byte order. */
static bool printable_byte(uint32_t c) {
    return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
}

bool sp_conv_in_byte_alphabet(const char *tok) {
    for (const char *p = tok; *p;) {
        uint32_t c;
        p += cp_at(p, &c);
        if (!printable_byte(c) && !(c >= 256 && c < 256 + 68)) return false;
    }
    return true;
}

char *sp_conv_byte_level_spelling(const char *tok) {
    if (sp_conv_in_byte_alphabet(tok)) return strdup(tok);
    size_t n = strlen(tok);
    char *s = malloc(2 * n + 1), *o = s;
    for (size_t i = 0; s && i < n; i++) {
        uint32_t b = (unsigned char)tok[i], c = b;
        if (!printable_byte(b)) {
            c = 256;
            for (uint32_t k = 0; k < b; k++) c += !printable_byte(k);
        }
        o += sp_utf8_encode(c, o);
    }
    if (s) *o = '\0';
    return s;
}

/* --------------------------------------------------------------- merges */

typedef struct merge {
    int32_t l, r;
    double key;
    size_t len_l, len_r, seq;
} merge;

static int by_ids(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->l != y->l) return x->l < y->l ? -1 : 1;
    return x->r < y->r ? -1 : x->r > y->r;
}

static int by_rank(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->len_l != y->len_l) return x->len_l > y->len_l ? -1 : 1;
    if (x->len_r != y->len_r) return x->len_r > y->len_r ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq; /* stable */
}

spindle_status sp_conv_derive_merges(char *const *tokens, size_t n,
                                     const double *key,
                                     const sp_conv_vocab *v, int32_t **pairs,
                                     size_t *n_pairs, spindle_error *err) {
    *pairs = NULL;
    *n_pairs = 0;
    size_t cap = 1024, cnt = 0;
    merge *m = malloc(cap * sizeof *m);
    size_t maxlen = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(tokens[i]);
        if (l > maxlen) maxlen = l;
    }
    char *buf = malloc(maxlen + 1);
    if (!m || !buf) goto oom;
    for (size_t i = 0; i < n; i++) {
        const char *t = tokens[i];
        const slot *self = lookup(v, t);
        if (self->first != (int32_t)i) continue; /* a repeated token */
        size_t len = strlen(t), start = cnt, cps = sp_utf8_count(t, len), k = 0;
        uint32_t c;
        for (size_t off = cp_at(t, &c); off < len; off += cp_at(t + off, &c)) {
            k++;
            memcpy(buf, t, off);
            buf[off] = '\0';
            int32_t l = sp_conv_vocab_id(v, buf), r = sp_conv_vocab_id(v, t + off);
            if (l < 0 || r < 0) continue;
            if (cnt == cap) {
                merge *g = realloc(m, (cap *= 2) * sizeof *m);
                if (!g) goto oom;
                m = g;
            }
            m[cnt++] = (merge){l, r, key[self->last], k, cps - k, 0};
        }
        qsort(m + start, cnt - start, sizeof *m, by_ids);
    }
    for (size_t i = 0; i < cnt; i++) m[i].seq = i;
    qsort(m, cnt, sizeof *m, by_rank);
    *pairs = malloc((cnt ? cnt : 1) * 2 * sizeof **pairs);
    if (!*pairs) goto oom;
    for (size_t i = 0; i < cnt; i++) {
        (*pairs)[2 * i] = m[i].l;
        (*pairs)[2 * i + 1] = m[i].r;
    }
    *n_pairs = cnt;
    free(m);
    free(buf);
    return SPINDLE_OK;
oom:
    free(m);
    free(buf);
    return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
}
