/* The lazily determinized automaton of one grammar over one vocabulary,
 * shared by every matcher of the grammar (matcher.c builds states and
 * transitions, mask_cache.c turns a state into a token mask and caches
 * it). Internal to src/grammar/: everything here is touched only with
 * `lock` held. */
#ifndef SP_GRAMMAR_AUTOMATON_H
#define SP_GRAMMAR_AUTOMATON_H

#include <pthread.h>

#include "grammar/grammar.h"

#define GA_UNKNOWN (-1)
#define GA_DEAD (-2)
#define GA_NOT_SEEN (-1)
#define GA_SEEN_ONCE (-2)
#define GA_MAX_CACHED_MASKS 256

typedef struct gm_node {
    int32_t pos, parent, next;
} gm_node;

/* Chains capped at one band's maximum. */
typedef struct gm_cap {
    int32_t *alpha;       /* [n_elems] position with chains capped; NULL: none */
    int32_t *node_capped; /* node -> its capped node, or -1 */
    long cap_capped;
    int n_known;          /* node_capped[0 .. n_known) are set */
} gm_cap;

typedef struct gm_state {
    int32_t off, n;       /* tops[off .. off + n) */
    int32_t next;         /* hash chain */
    int32_t mask;         /* cached mask slot, or -1 */
    /* Cached slots of its band masks as a capped state; GA_NOT_SEEN until
     * some state capped to it, GA_SEEN_ONCE after the first. */
    int32_t band_mask[SP_TRIE_BANDS - 1];
    uint32_t hash;
} gm_state;

/* Who a cache slot belongs to, for eviction (a clock over the slots:
 * `used` is set on every hit and cleared as the hand passes). */
typedef struct gm_slot {
    int32_t state;        /* -1: free */
    int8_t band;          /* -1: the state's whole mask, else band_mask[band] */
    bool used;
    int32_t lo, hi;       /* the words that have bits */
} gm_slot;

struct sp_gauto {
    pthread_mutex_t lock;
    int refs;
    const sp_gram *g;
    const sp_vocab_trie *trie;
    gm_node *nodes;
    int n_nodes, cap_nodes;
    int32_t *node_heads;  /* hash buckets, chained by next */
    int32_t *tops;
    long n_tops, cap_tops;
    gm_state *states;
    int n_states, cap_states;
    int32_t *state_heads;
    /* Transitions: state s's row is trans[s * n_cls ..], one entry per
     * byte class (bytes that every terminal set of the grammar treats
     * alike: a JSON grammar has a few dozen), GA_UNKNOWN until computed.
     * Rows this small keep a trie walk's lookups in cache. */
    uint8_t cls[256];
    int n_cls;
    int32_t *trans;
    long cap_trans;
    int32_t *scratch;
    int n_scratch, cap_scratch;
    long work;
    bool overflow, oom;
    int32_t start;        /* the grammar's initial state */
    uint32_t *masks;      /* [GA_MAX_CACHED_MASKS][words] */
    gm_slot slots[GA_MAX_CACHED_MASKS];
    int n_masks, n_slots, hand, words;
    int32_t *walk;        /* state per trie depth */
    gm_cap cap[SP_TRIE_BANDS - 1];  /* per band but the last */
};

/* matcher.c */
int32_t ga_step_slow(sp_gauto *a, int32_t s, uint8_t b);
static inline int32_t ga_step(sp_gauto *a, int32_t s, uint8_t b) {
    int32_t next = a->trans[(size_t)s * (size_t)a->n_cls + a->cls[b]];
    return next != GA_UNKNOWN ? next : ga_step_slow(a, s, b);
}
/* State s with every chain capped at band b's maximum (s itself when
 * none is over it). */
int32_t ga_capped_state(sp_gauto *a, int b, int32_t s);
spindle_status ga_limit_error(const sp_gauto *a, spindle_error *err);

/* mask_cache.c: the mask of state s into bits (n_vocab bits). */
spindle_status ga_mask(sp_gauto *a, int32_t s, uint32_t *bits, spindle_error *err);

#endif
