/* The n-gram (prompt lookup) drafter: the Prompt Lookup Decoding / vLLM
 * policy. The history is the prompt plus every emitted token; the longest
 * trailing k-gram (k from ngram_max down to ngram_min) is looked up, and
 * its FIRST earlier occurrence (scanning left to right) gives the tokens
 * that followed it as the draft.
 *
 * Incremental: one open-addressing table maps each distinct k-gram (for
 * every k in range) to the start of its first occurrence. Each new token
 * inserts the k-grams that end at it (at most ngram_max - ngram_min + 1
 * probes), so indexing costs O(1) per token and a lookup O(ngram_max), never
 * a rescan of the history. */
#include <stdlib.h>

#include "base/error.h"
#include "generation/speculative.h"

#define NGRAM_LIMIT 8

typedef struct ngram_slot {
    int32_t start;      /* -1: empty */
    int32_t k;
    uint64_t hash;
} ngram_slot;

struct sp_ngram_index {
    int kmin, kmax;
    ngram_slot *slots;
    size_t cap, used;   /* cap a power of two, used <= cap / 2 */
    int indexed;        /* history tokens whose k-grams are in the table */
};

static uint64_t gram_hash(const int32_t *t, int k) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)k;
    for (int i = 0; i < k; i++) {
        h ^= (uint32_t)t[i];
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h;
}

static bool same_gram(const int32_t *a, const int32_t *b, int k) {
    for (int i = 0; i < k; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* The slot holding gram t[0..k) (start >= 0), or the empty slot where it
 * would go. */
static ngram_slot *find_slot(const sp_ngram_index *ix, const int32_t *history,
                             const int32_t *t, int k, uint64_t h) {
    size_t mask = ix->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        ngram_slot *s = &ix->slots[i];
        if (s->start < 0) return s;
        if (s->hash == h && s->k == k && same_gram(history + s->start, t, k))
            return s;
    }
}

static bool grow(sp_ngram_index *ix) {
    size_t cap = ix->cap ? ix->cap * 2 : 1024;
    ngram_slot *slots = malloc(cap * sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < cap; i++) slots[i].start = -1;
    for (size_t i = 0; i < ix->cap; i++) {
        ngram_slot s = ix->slots[i];
        if (s.start < 0) continue;
        size_t j = s.hash & (cap - 1);
        while (slots[j].start >= 0) j = (j + 1) & (cap - 1);
        slots[j] = s;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return true;
}

spindle_status sp_ngram_new(int ngram_min, int ngram_max, sp_ngram_index **out,
                            spindle_error *err) {
    *out = NULL;
    if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > NGRAM_LIMIT)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "ngram_min %d and ngram_max %d must satisfy "
                       "1 <= min <= max <= %d", ngram_min, ngram_max,
                       NGRAM_LIMIT);
    sp_ngram_index *ix = calloc(1, sizeof *ix);
    if (!ix || !grow(ix)) {
        free(ix);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    ix->kmin = ngram_min;
    ix->kmax = ngram_max;
    *out = ix;
    return SPINDLE_OK;
}

void sp_ngram_free(sp_ngram_index *ix) {
    if (!ix) return;
    free(ix->slots);
    free(ix);
}

/* Insert the k-grams ending at history[end - 1] that are new. */
static bool index_token(sp_ngram_index *ix, const int32_t *history, int end) {
    for (int k = ix->kmin; k <= ix->kmax && k <= end; k++) {
        if (2 * (ix->used + 1) > ix->cap && !grow(ix)) return false;
        const int32_t *t = history + end - k;
        uint64_t h = gram_hash(t, k);
        ngram_slot *s = find_slot(ix, history, t, k, h);
        if (s->start >= 0) continue;   /* keep the first occurrence */
        *s = (ngram_slot){.start = end - k, .k = k, .hash = h};
        ix->used++;
    }
    return true;
}

int sp_ngram_propose(sp_ngram_index *ix, const int32_t *history, int n,
                     int max, int32_t *out) {
    for (; ix->indexed < n; ix->indexed++)
        if (!index_token(ix, history, ix->indexed + 1)) return 0;
    for (int k = ix->kmax; k >= ix->kmin; k--) {
        if (k >= n) continue;   /* an earlier occurrence needs n > k */
        const int32_t *t = history + n - k;
        ngram_slot *s = find_slot(ix, history, t, k, gram_hash(t, k));
        if (s->start < 0 || s->start >= n - k) continue;
        int from = s->start + k, m = n - from < max ? n - from : max;
        for (int i = 0; i < m; i++) out[i] = history[from + i];
        return m;
    }
    return 0;
}
