/* The BPE model (HF `models::bpe`): vocabulary + merge ranks, words merged
 * lowest rank first (ties: leftmost) over a linked list of symbols with a
 * binary heap, exactly as HF Word::merge_all does, including its stale-entry
 * rule. byte_fallback, unk/fuse_unk, ignore_merges,
 * continuing_subword_prefix and end_of_word_suffix are honoured. A bounded
 * word cache (mutex-guarded, so a shared tokenizer stays usable from several
 * threads) makes repeated words cheap. */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define CACHE_SLOTS 32768
#define CACHE_MAX_WORD 256

typedef struct cache_slot {
    uint64_t hash;
    char *key;
    uint32_t klen, n;
    int32_t *ids;
} cache_slot;

struct sp_bpe_cache {
    pthread_mutex_t lock;
    cache_slot slots[CACHE_SLOTS];
};

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

static inline uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

static inline size_t pair_slot(uint64_t k, size_t cap) {
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k >> 17) & (cap - 1);
}

static bool merge_get(const sp_merge_map *m, int32_t a, int32_t b,
                      uint32_t *rank, int32_t *new_id) {
    if (!m->cap) return false;
    uint64_t k = pair_key(a, b);
    size_t i = pair_slot(k, m->cap);
    while (m->keys[i]) {
        if (m->keys[i] == k) {
            *rank = m->rank[i];
            *new_id = m->new_id[i];
            return true;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return false;
}

static void merge_put(sp_merge_map *m, int32_t a, int32_t b, uint32_t rank,
                      int32_t new_id) {
    uint64_t k = pair_key(a, b);
    size_t i = pair_slot(k, m->cap);
    while (m->keys[i] && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
    m->keys[i] = k; /* a repeated pair takes the later rank, as HF's map */
    m->rank[i] = rank;
    m->new_id[i] = new_id;
}

static char *opt_str(const cJSON *j, const char *key) {
    const char *s = sp_json_str(j, key);
    return (s && *s) ? strdup(s) : NULL;
}

/* One merge "a b": ranks by position; the merged token must exist. */
static spindle_status add_merge(sp_model *m, const char *a, size_t al,
                                const char *b, size_t bl, size_t plen,
                                uint32_t rank, sp_strbuf *joined,
                                spindle_error *err) {
    int32_t ia = sp_strmap_get(&m->vocab, a, al), ib = sp_strmap_get(&m->vocab, b, bl);
    if (ia < 0 || ib < 0 || bl < plen)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: merge %u uses a token missing from the vocab", rank);
    joined->len = 0;
    if (!sp_strbuf_add(joined, a, al) || !sp_strbuf_add(joined, b + plen, bl - plen)) return oom(err);
    int32_t nid = sp_strmap_get(&m->vocab, joined->p, joined->len);
    if (nid < 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: merge %u makes a token missing from the vocab", rank);
    merge_put(&m->merges, ia, ib, rank, nid);
    return SPINDLE_OK;
}

spindle_status sp_bpe_parse(const cJSON *j, const sp_fast_model *fast,
                            sp_model *m, spindle_error *err) {
    m->type = SP_MODEL_BPE;
    m->byte_fallback = sp_json_bool(j, "byte_fallback", false);
    m->fuse_unk = sp_json_bool(j, "fuse_unk", false);
    m->ignore_merges = sp_json_bool(j, "ignore_merges", false);
    m->cont_prefix = opt_str(j, "continuing_subword_prefix");
    m->eow_suffix = opt_str(j, "end_of_word_suffix");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(j, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "tokenizer.json: BPE dropout is not supported");
    const char *unk = sp_json_str(j, "unk_token");
    m->unk_id = unk ? sp_strmap_get(&m->vocab, unk, strlen(unk)) : -1;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = sp_strmap_get(&m->vocab, name, 6);
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(j, "merges");
    if (merges && !cJSON_IsArray(merges))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: BPE merges is not a list");
    size_t n = merges ? (size_t)cJSON_GetArraySize(merges) : 0;
    if (fast && fast->have_merges) n += (fast->n - fast->n_vocab) / 2;
    size_t cap = 64;
    while (cap < n * 2) cap *= 2;
    m->merges.cap = cap;
    m->merges.keys = calloc(cap, sizeof *m->merges.keys);
    m->merges.rank = malloc(cap * sizeof *m->merges.rank);
    m->merges.new_id = malloc(cap * sizeof *m->merges.new_id);
    if (!m->merges.keys || !m->merges.rank || !m->merges.new_id) return oom(err);
    size_t plen = m->cont_prefix ? strlen(m->cont_prefix) : 0;
    sp_strbuf joined = {0};
    spindle_status st = SPINDLE_OK;
    uint32_t rank = 0;
    if (fast && fast->have_merges) {
        for (size_t i = fast->n_vocab; i + 1 < fast->n && !st; i += 2, rank++)
            st = add_merge(m, fast->arena.p + fast->off[i], fast->len[i],
                           fast->arena.p + fast->off[i + 1], fast->len[i + 1],
                           plen, rank, &joined, err);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        if (st) break;
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(it)) {
            const char *s = it->valuestring;
            const char *spc = strchr(s, ' ');
            if (!spc) { st = sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: merge %u has no space", rank); break; }
            a = s; al = (size_t)(spc - s);
            b = spc + 1; bl = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring; al = strlen(a);
            b = cJSON_GetArrayItem(it, 1)->valuestring; bl = strlen(b);
        } else {
            st = sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: merge %u is malformed", rank);
            break;
        }
        st = add_merge(m, a, al, b, bl, plen, rank++, &joined, err);
    }
    if (st) { sp_strbuf_free(&joined); return st; }
    sp_strbuf_free(&joined);
    m->cache = calloc(1, sizeof *m->cache);
    if (!m->cache) return oom(err);
    pthread_mutex_init(&m->cache->lock, NULL);
    return SPINDLE_OK;
}

spindle_status sp_bpe_prepare(sp_model *m, size_t n_merges, spindle_error *err) {
    m->type = SP_MODEL_BPE;
    size_t cap = 64;
    while (cap < n_merges * 2) cap *= 2;
    m->merges.cap = cap;
    m->merges.keys = calloc(cap, sizeof *m->merges.keys);
    m->merges.rank = malloc(cap * sizeof *m->merges.rank);
    m->merges.new_id = malloc(cap * sizeof *m->merges.new_id);
    m->cache = calloc(1, sizeof *m->cache);
    if (!m->merges.keys || !m->merges.rank || !m->merges.new_id || !m->cache) return oom(err);
    pthread_mutex_init(&m->cache->lock, NULL);
    return SPINDLE_OK;
}

void sp_bpe_merge_add_first(sp_model *m, int32_t a, int32_t b, uint32_t rank,
                            int32_t new_id) {
    uint32_t r;
    int32_t nid;
    if (!merge_get(&m->merges, a, b, &r, &nid)) merge_put(&m->merges, a, b, rank, new_id);
}

void sp_bpe_free(sp_model *m) {
    free(m->merges.keys);
    free(m->merges.rank);
    free(m->merges.new_id);
    free(m->cont_prefix);
    free(m->eow_suffix);
    if (m->cache) {
        for (size_t i = 0; i < CACHE_SLOTS; i++) {
            free(m->cache->slots[i].key);
            free(m->cache->slots[i].ids);
        }
        pthread_mutex_destroy(&m->cache->lock);
        free(m->cache);
    }
}

typedef struct sym {
    int32_t c, prev, next;
    uint32_t len;
} sym;

typedef struct hent {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
} hent;

static inline bool hless(const hent *x, const hent *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

typedef struct heap {
    hent *v;
    size_t n, cap;
} heap;

static bool heap_push(heap *h, hent e) {
    if (h->n == h->cap) {
        size_t c = h->cap ? h->cap * 2 : 32;
        hent *v = realloc(h->v, c * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = c;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = e;
    return true;
}

static hent heap_pop(heap *h) {
    hent top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const hent *best = &last;
        if (l < h->n && hless(&h->v[l], best)) { m = l; best = &h->v[l]; }
        if (r < h->n && hless(&h->v[r], best)) { m = r; }
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

typedef struct word {
    sym *s;
    size_t n, cap;
} word;

static bool word_add(word *w, int32_t c, uint32_t len) {
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 32;
        sym *v = realloc(w->s, cap * sizeof *v);
        if (!v) return false;
        w->s = v;
        w->cap = cap;
    }
    int32_t i = (int32_t)w->n;
    w->s[w->n++] = (sym){c, i - 1, -1, len};
    if (i > 0) w->s[i - 1].next = i;
    return true;
}

/* HF BPE::merge_word: initial symbols. */
static spindle_status initial_symbols(const sp_model *m, const char *s, size_t n,
                                      word *w, spindle_error *err) {
    sp_strbuf key = {0};
    int32_t unk = -1;
    uint32_t unk_len = 0;
    bool ok = true;
    for (size_t i = 0; i < n && ok;) {
        int l;
        sp_utf8_next(s + i, n - i, &l);
        bool is_first = i == 0, is_last = i + (size_t)l >= n;
        const char *k = s + i;
        size_t kl = (size_t)l;
        if ((m->cont_prefix && !is_first) || (m->eow_suffix && is_last)) {
            key.len = 0;
            ok = (!m->cont_prefix || is_first || sp_strbuf_add(&key, m->cont_prefix, strlen(m->cont_prefix))) &&
                 sp_strbuf_add(&key, k, kl) &&
                 (!m->eow_suffix || !is_last || sp_strbuf_add(&key, m->eow_suffix, strlen(m->eow_suffix)));
            k = key.p;
            kl = key.len;
        }
        int32_t id = ok ? sp_strmap_get(&m->vocab, k, kl) : -1;
        if (id >= 0) {
            if (unk >= 0) { ok = word_add(w, unk, unk_len); unk = -1; }
            ok = ok && word_add(w, id, (uint32_t)l);
        } else if (ok) {
            bool done = false;
            if (m->byte_fallback) {
                bool all = true;
                for (size_t b = 0; b < kl; b++) all = all && m->byte_ids[(unsigned char)k[b]] >= 0;
                if (all) {
                    for (size_t b = 0; b < kl && ok; b++) ok = word_add(w, m->byte_ids[(unsigned char)k[b]], 1);
                    done = true;
                }
            }
            if (!done && m->unk_id >= 0) {
                if (unk >= 0 && m->fuse_unk) unk_len += (uint32_t)l;
                else {
                    if (unk >= 0) ok = word_add(w, unk, unk_len);
                    unk = m->unk_id;
                    unk_len = (uint32_t)l;
                }
            }
        }
        i += (size_t)l;
    }
    if (ok && unk >= 0) ok = word_add(w, unk, unk_len);
    sp_strbuf_free(&key);
    return ok ? SPINDLE_OK : oom(err);
}

static bool merge_all(const sp_model *m, word *w) {
    heap h = {0};
    bool ok = true;
    for (size_t i = 0; i + 1 < w->n && ok; i++) {
        uint32_t r;
        int32_t nid;
        if (merge_get(&m->merges, w->s[i].c, w->s[i + 1].c, &r, &nid))
            ok = heap_push(&h, (hent){r, (uint32_t)i, nid});
    }
    while (ok && h.n) {
        hent top = heap_pop(&h);
        sym *cur = &w->s[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int32_t np = cur->next;
        sym right = w->s[np];
        uint32_t r;
        int32_t nid;
        if (!merge_get(&m->merges, cur->c, right.c, &r, &nid) || nid != top.new_id) continue;
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        w->s[np].len = 0;
        if (right.next >= 0) w->s[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0 && merge_get(&m->merges, w->s[cur->prev].c, cur->c, &r, &nid))
            ok = heap_push(&h, (hent){r, (uint32_t)cur->prev, nid});
        if (ok && cur->next >= 0 && merge_get(&m->merges, cur->c, w->s[cur->next].c, &r, &nid))
            ok = heap_push(&h, (hent){r, top.pos, nid});
    }
    free(h.v);
    return ok;
}

static bool cache_get(sp_bpe_cache *c, uint64_t hash, const char *s, size_t n,
                      sp_ids *out, bool *hit) {
    *hit = false;
    if (pthread_mutex_trylock(&c->lock) != 0) return true;
    cache_slot *e = &c->slots[hash & (CACHE_SLOTS - 1)];
    bool ok = true;
    if (e->key && e->hash == hash && e->klen == n && !memcmp(e->key, s, n)) {
        *hit = true;
        for (uint32_t i = 0; i < e->n && ok; i++) ok = sp_ids_push(out, e->ids[i]);
    }
    pthread_mutex_unlock(&c->lock);
    return ok;
}

static void cache_put(sp_bpe_cache *c, uint64_t hash, const char *s, size_t n,
                      const int32_t *ids, size_t n_ids) {
    char *k = malloc(n ? n : 1);
    int32_t *v = malloc((n_ids ? n_ids : 1) * sizeof *v);
    if (!k || !v || pthread_mutex_trylock(&c->lock) != 0) {
        free(k);
        free(v);
        return;
    }
    memcpy(k, s, n);
    if (n_ids) memcpy(v, ids, n_ids * sizeof *v); /* ids may be NULL when empty */
    cache_slot *e = &c->slots[hash & (CACHE_SLOTS - 1)];
    free(e->key);
    free(e->ids);
    *e = (cache_slot){hash, k, (uint32_t)n, (uint32_t)n_ids, v};
    pthread_mutex_unlock(&c->lock);
}

spindle_status sp_bpe_tokenize(const sp_model *m, const char *s, size_t n,
                               sp_ids *out, spindle_error *err) {
    if (n == 0) return SPINDLE_OK;
    if (m->ignore_merges) {
        int32_t id = sp_strmap_get(&m->vocab, s, n);
        if (id >= 0) return sp_ids_push(out, id) ? SPINDLE_OK : oom(err);
    }
    bool use_cache = n <= CACHE_MAX_WORD, hit = false;
    uint64_t hash = use_cache ? sp_hash_bytes(s, n) : 0;
    if (use_cache) {
        if (!cache_get(m->cache, hash, s, n, out, &hit)) return oom(err);
        if (hit) return SPINDLE_OK;
    }
    word w = {0};
    spindle_status st = initial_symbols(m, s, n, &w, err);
    if (!st && !merge_all(m, &w)) st = oom(err);
    size_t start = out->n;
    for (size_t i = 0; !st && w.n && i != (size_t)-1;) {
        if (!sp_ids_push(out, w.s[i].c)) st = oom(err);
        i = w.s[i].next < 0 ? (size_t)-1 : (size_t)w.s[i].next;
    }
    if (!st && use_cache) {
        /* A word of unknown characters and no unk token has no ids, and out->v
         * may still be NULL then. */
        const int32_t *ids = out->n > start ? out->v + start : NULL;
        cache_put(m->cache, hash, s, n, ids, out->n - start);
    }
    free(w.s);
    return st;
}
