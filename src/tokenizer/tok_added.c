/* Added tokens (HF AddedVocabulary): found by leftmost-longest matching
 * before the model runs, non-normalized ones on the raw text and
 * normalized ones on the normalized text, with lstrip / rstrip /
 * single_word semantics. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"

/* A byte trie: the root has a full table, inner nodes sibling lists. */
typedef struct tnode {
    int32_t child, sibling; /* node indices, 0 = none (0 is the root) */
    int32_t token;          /* index into sp_added.v, -1 */
    unsigned char byte;
} tnode;

struct sp_trie {
    tnode *v;
    size_t n, cap;
    int32_t root[256];
    size_t count;
};

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

static int32_t trie_new_node(sp_trie *t, unsigned char b) {
    if (t->n == t->cap) {
        size_t c = t->cap ? t->cap * 2 : 256;
        tnode *v = realloc(t->v, c * sizeof *v);
        if (!v) return -1;
        t->v = v;
        t->cap = c;
    }
    t->v[t->n] = (tnode){0, 0, -1, b};
    return (int32_t)t->n++;
}

static bool trie_add(sp_trie *t, const char *s, size_t n, int32_t token) {
    if (!n) return true;
    if (!t->n && trie_new_node(t, 0) < 0) return false; /* node 0: root */
    unsigned char b0 = (unsigned char)s[0];
    if (!t->root[b0] && (t->root[b0] = trie_new_node(t, b0)) < 0) return false;
    int32_t cur = t->root[b0];
    for (size_t i = 1; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = t->v[cur].child;
        while (c && t->v[c].byte != b) c = t->v[c].sibling;
        if (!c) {
            if ((c = trie_new_node(t, b)) < 0) return false;
            t->v[c].sibling = t->v[cur].child;
            t->v[cur].child = c;
        }
        cur = c;
    }
    /* The first token with a given text wins, as HF keeps one id per text. */
    if (t->v[cur].token < 0) t->v[cur].token = token;
    t->count++;
    return true;
}

/* Longest token starting at s, or -1; *len gets its length. */
static int32_t trie_longest(const sp_trie *t, const char *s, size_t n, size_t *len) {
    int32_t cur = t->root[(unsigned char)s[0]], best = -1;
    size_t i = 1;
    while (cur) {
        if (t->v[cur].token >= 0) { best = t->v[cur].token; *len = i; }
        if (i >= n) break;
        unsigned char b = (unsigned char)s[i++];
        int32_t c = t->v[cur].child;
        while (c && t->v[c].byte != b) c = t->v[c].sibling;
        cur = c;
    }
    return best;
}

static void trie_free(sp_trie *t) {
    if (t) free(t->v);
    free(t);
}

spindle_status sp_added_parse(const cJSON *arr, const sp_norm *normalizer,
                              sp_added *a, spindle_error *err) {
    memset(a, 0, sizeof *a);
    a->raw = calloc(1, sizeof *a->raw);
    a->norm = calloc(1, sizeof *a->norm);
    if (!a->raw || !a->norm) return oom(err);
    if (!arr) return SPINDLE_OK;
    if (!cJSON_IsArray(arr)) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: added_tokens is not a list");
    int cnt = cJSON_GetArraySize(arr);
    a->v = calloc((size_t)cnt + 1, sizeof *a->v);
    a->norm_content = calloc((size_t)cnt + 1, sizeof *a->norm_content);
    if (!a->v || !a->norm_content) return oom(err);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        const char *content = sp_json_str(it, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!content || !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 26))
            return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: added token %d is malformed", a->n);
        sp_added_token *t = &a->v[a->n];
        t->content = strdup(content);
        if (!t->content) return oom(err);
        t->len = strlen(content);
        t->id = (int32_t)id->valuedouble;
        t->special = sp_json_bool(it, "special", false);
        t->normalized = sp_json_bool(it, "normalized", !t->special);
        t->lstrip = sp_json_bool(it, "lstrip", false);
        t->rstrip = sp_json_bool(it, "rstrip", false);
        t->single_word = sp_json_bool(it, "single_word", false);
        bool ok;
        if (t->normalized && normalizer) {
            sp_strbuf nb = {0};
            spindle_status st = sp_norm_apply(normalizer, t->content, t->len, &nb, err);
            if (st) { sp_strbuf_free(&nb); return st; }
            if (!nb.p && !sp_strbuf_reserve(&nb, 0)) return oom(err);
            a->norm_content[a->n] = nb.p;
            ok = trie_add(a->norm, nb.p, nb.len, a->n);
        } else {
            ok = trie_add(t->normalized ? a->norm : a->raw, t->content, t->len, a->n);
        }
        a->n++;
        if (!ok) return oom(err);
    }
    return SPINDLE_OK;
}

void sp_added_free(sp_added *a) {
    for (int i = 0; i < a->n; i++) {
        free(a->v[i].content);
        free(a->norm_content[i]);
    }
    free(a->v);
    free(a->norm_content);
    trie_free(a->raw);
    trie_free(a->norm);
    memset(a, 0, sizeof *a);
}

/* \w for single_word: alphanumeric, marks, connector punctuation, joiners. */
static bool is_word_cp(uint32_t cp) {
    if (sp_uc_is_alnum(cp)) return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC ||
           c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_PC ||
           cp == 0x200C || cp == 0x200D;
}

static size_t prev_char(const char *s, size_t at) {
    size_t k = at - 1;
    while (k > 0 && sp_utf8_is_continuation((unsigned char)s[k])) k--;
    return k;
}

spindle_status sp_added_split(const sp_added *a, bool normalized,
                              const char *s, size_t n, bool first,
                              sp_pieces *out, spindle_error *err) {
    const sp_trie *t = normalized ? a->norm : a->raw;
    if (!t->count) {
        return (n == 0 || sp_pieces_push(out, s, n, -1, first)) ? SPINDLE_OK : oom(err);
    }
    size_t done = 0, i = 0;
    while (i < n) {
        size_t mlen = 0;
        int32_t k = t->root[(unsigned char)s[i]] ? trie_longest(t, s + i, n - i, &mlen) : -1;
        if (k < 0) { i++; continue; }
        const sp_added_token *tok = &a->v[k];
        size_t start = i, stop = i + mlen;
        int l;
        if (tok->single_word) {
            bool ok_l = start == 0 || !is_word_cp(sp_utf8_next(s + prev_char(s, start), n, &l));
            bool ok_r = stop == n || !is_word_cp(sp_utf8_next(s + stop, n - stop, &l));
            if (!ok_l || !ok_r) { i = stop; continue; }
        }
        if (tok->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t pc = prev_char(s, ns);
                if (!sp_uc_is_whitespace(sp_utf8_next(s + pc, n - pc, &l))) break;
                ns = pc;
            }
            start = ns > done ? ns : done;
        }
        if (tok->rstrip) {
            while (stop < n) {
                uint32_t cp = sp_utf8_next(s + stop, n - stop, &l);
                if (!sp_uc_is_whitespace(cp)) break;
                stop += (size_t)l;
            }
        }
        if (done < start && !sp_pieces_push(out, s + done, start - done, -1, first && done == 0))
            return oom(err);
        if (!sp_pieces_push(out, "", 0, tok->id, false)) return oom(err);
        done = stop;
        i = stop;
    }
    if (done < n && !sp_pieces_push(out, s + done, n - done, -1, first && done == 0))
        return oom(err);
    return SPINDLE_OK;
}
