/* The trie of every token's byte string, in preorder, built by sorting the
 * byte strings: sorted order is depth-first order, so each token only adds
 * the nodes past its common prefix with the previous one. */
#include "grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

#define MAX_TOKEN_BYTES 1024

typedef struct tok_ref {
    const uint8_t *s;
    uint32_t len;
    int32_t id;
} tok_ref;

static int cmp_ref(const void *a, const void *b) {
    const tok_ref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static spindle_status build(sp_trie_part *t, const tok_ref *refs, int n,
                            spindle_error *err) {
    long cap = 1024;
    t->nodes = malloc((size_t)cap * sizeof *t->nodes);
    t->tokens = malloc((size_t)(n ? n : 1) * sizeof *t->tokens);
    int32_t path[MAX_TOKEN_BYTES + 1];
    if (!t->nodes || !t->tokens) return sp_fail(err, SPINDLE_ERR_MEMORY, "vocabulary trie: out of memory");
    t->nodes[0] = (sp_trie_node){0};
    t->n_nodes = 1;
    int depth = 0;
    path[0] = 0;
    const tok_ref *prev = NULL;
    for (int i = 0; i < n; i++) {
        const tok_ref *r = &refs[i];
        uint32_t common = 0;
        if (prev)
            while (common < prev->len && common < r->len && prev->s[common] == r->s[common])
                common++;
        while ((uint32_t)depth > common) t->nodes[path[depth--]].end = t->n_nodes;
        for (uint32_t k = common; k < r->len; k++) {
            if (t->n_nodes == cap) {
                sp_trie_node *q = realloc(t->nodes, (size_t)(cap *= 2) * sizeof *q);
                if (!q) return sp_fail(err, SPINDLE_ERR_MEMORY, "vocabulary trie: out of memory");
                t->nodes = q;
            }
            t->nodes[t->n_nodes] = (sp_trie_node){.depth = (uint16_t)(k + 1),
                                                  .byte = r->s[k], .tok_first = i};
            path[++depth] = t->n_nodes++;
        }
        sp_trie_node *leaf = &t->nodes[path[depth]];
        if (leaf->n_tok == 0) leaf->tok_first = i;
        leaf->n_tok++;
        t->tokens[i] = r->id;
        prev = r;
    }
    while (depth >= 0) t->nodes[path[depth--]].end = t->n_nodes;
    return SPINDLE_OK;
}

/* The band tries: the sorted refs filtered by length keep their order, so
 * each band is built the same way as the full trie. */
static spindle_status build_bands(sp_vocab_trie *t, const tok_ref *refs, int n,
                                  spindle_error *err) {
    tok_ref *part = calloc((size_t)(n ? n : 1), sizeof *part);
    if (!part) return sp_fail(err, SPINDLE_ERR_MEMORY, "vocabulary trie: out of memory");
    spindle_status st = SPINDLE_OK;
    for (int b = 0; b < SP_TRIE_BANDS && !st; b++) {
        uint32_t lo = b ? (uint32_t)sp_trie_band_max[b - 1] : 0;
        uint32_t hi = b < SP_TRIE_BANDS - 1 ? (uint32_t)sp_trie_band_max[b] : UINT32_MAX;
        t->band_bits[b] = calloc((size_t)(t->n_vocab + 31) / 32, sizeof *t->band_bits[b]);
        if (!t->band_bits[b]) {
            st = sp_fail(err, SPINDLE_ERR_MEMORY, "vocabulary trie: out of memory");
            break;
        }
        int k = 0;
        for (int i = 0; i < n; i++)
            if (refs[i].len > lo && refs[i].len <= hi) {
                part[k++] = refs[i];
                t->band_bits[b][refs[i].id >> 5] |= 1u << (refs[i].id & 31);
            }
        st = build(&t->band[b], part, k, err);
    }
    free(part);
    return st;
}

spindle_status sp_vocab_trie_build(const spindle_tokenizer *tok,
                                   sp_vocab_trie *out, spindle_error *err) {
    memset(out, 0, sizeof *out);
    int n_vocab = spindle_tokenizer_vocab_size(tok);
    if (n_vocab <= 0) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "vocabulary trie: empty vocabulary");
    sp_strbuf bytes = {0};
    size_t *off = calloc((size_t)n_vocab, sizeof *off);
    uint32_t *len = calloc((size_t)n_vocab, sizeof *len);
    tok_ref *refs = malloc((size_t)n_vocab * sizeof *refs);
    spindle_status st = SPINDLE_OK;
    out->max_depth = 1;
    if (!off || !refs || !len) st = sp_fail(err, SPINDLE_ERR_MEMORY, "vocabulary trie: out of memory");
    int n = 0;
    for (int id = 0; id < n_vocab && !st; id++) {
        size_t at = bytes.len;
        if (!sp_tokenizer_token_bytes(tok, id, &bytes) || bytes.len == at ||
            bytes.len - at > MAX_TOKEN_BYTES) {
            if (bytes.oom) st = sp_fail(err, SPINDLE_ERR_MEMORY, "vocabulary trie: out of memory");
            bytes.len = at;
            continue;
        }
        off[id] = at;
        len[id] = (uint32_t)(bytes.len - at);
        if ((int)len[id] + 1 > out->max_depth) out->max_depth = (int)len[id] + 1;
        refs[n++] = (tok_ref){.len = len[id], .id = id};
    }
    for (int i = 0; i < n && !st; i++) refs[i].s = (const uint8_t *)bytes.p + off[refs[i].id];
    if (!st) {
        qsort(refs, (size_t)n, sizeof *refs, cmp_ref);
        out->n_vocab = n_vocab;
        st = build(&out->full, refs, n, err);
    }
    if (!st) st = build_bands(out, refs, n, err);
    out->bytes = bytes.p;
    out->tok_off = off;
    out->tok_len = len;
    if (st) sp_vocab_trie_free(out);
    free(refs);
    return st;
}

void sp_vocab_trie_free(sp_vocab_trie *t) {
    free(t->full.nodes);
    free(t->full.tokens);
    for (int b = 0; b < SP_TRIE_BANDS; b++) {
        free(t->band[b].nodes);
        free(t->band[b].tokens);
        free(t->band_bits[b]);
    }
    free(t->bytes);
    free(t->tok_off);
    free(t->tok_len);
    memset(t, 0, sizeof *t);
}
