/* The grammar matcher: a pushdown automaton over bytes whose states are
 * determinized lazily.
 *
 * A stack is a hash-consed node {pos, parent}: pos is the element to match
 * next (a terminal for a stack's top), parent the stack to return to when
 * pos's rule ends. A matcher state is the sorted set of stack tops that the
 * input so far can be in (llama.cpp's "stacks"), interned so that equal
 * sets get one id. Rule calls in tail position push nothing, so x* and
 * right recursion keep the state set small and recurring.
 *
 * The transition state x byte -> state is computed once and kept in a
 * 256-entry row per state: the trie walk of a mask is then one table
 * lookup per trie node after the first walk from a state, and a subtree
 * whose prefix is rejected is skipped whole. The masks of the states
 * generation actually reaches are cached too (strings, numbers and
 * whitespace recur).
 *
 * Bounded repetitions (x{0,60}: a string's maxLength) make every count a
 * different state, so each would need a full trie walk. A token of at most
 * C bytes cannot use more than C more units of any chain, so for tokens of
 * at most C bytes the state with every chain's "k units left" capped at C
 * has exactly the same mask. The vocabulary is split in length bands
 * (grammar.h): band b's part of the mask comes from the state capped at
 * the band's maximum, which all counts above it share, computed once and
 * cached; only the last band (tokens over 32 bytes, 0.2 % of Qwen3's) is
 * always walked from the exact state. This is the matcher's adaptive mask
 * cache: what a state's mask shares with others is cached once, and only
 * what depends on the exact state is walked. */
#include "grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define UNKNOWN (-1)
#define DEAD (-2)
#define ACCEPT_NODE 0
#define NOT_SEEN (-1)
#define SEEN_ONCE (-2)
#define MAX_NODES (1 << 22)
#define MAX_STATES (1 << 15)
#define MAX_EXPAND_WORK (1 << 20)
#define MAX_CACHED_MASKS 128

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
    /* Cached slots of its band masks as a capped state; NOT_SEEN until
     * some state capped to it, SEEN_ONCE after the first. */
    int32_t band_mask[SP_TRIE_BANDS - 1];
    uint32_t hash;
    int32_t *trans;       /* [256] or NULL until first used */
} gm_state;

struct sp_gmatch {
    const sp_gram *g;
    const sp_vocab_trie *trie;
    gm_node *nodes;
    int n_nodes, cap_nodes;
    int32_t *node_heads;  /* [MAX_NODES / 4 buckets], chained by next */
    int32_t *tops;
    long n_tops, cap_tops;
    gm_state *states;
    int n_states, cap_states;
    int32_t *state_heads;
    int32_t *scratch;
    int n_scratch, cap_scratch;
    long work;
    bool overflow, oom;
    int cur;
    uint32_t *masks;      /* [MAX_CACHED_MASKS][words] */
    int32_t slot_lo[MAX_CACHED_MASKS], slot_hi[MAX_CACHED_MASKS]; /* nonzero words */
    int n_masks, words;
    int32_t *walk;        /* state per trie depth */
    gm_cap cap[SP_TRIE_BANDS - 1];  /* per band but the last */
};

#define NODE_BUCKETS (1 << 18)
#define STATE_BUCKETS (1 << 14)

static uint32_t mix(uint32_t h, uint32_t v) {
    h ^= v + 0x9E3779B9u + (h << 6) + (h >> 2);
    return h;
}

static bool grow(void **p, long *cap, long need, size_t size) {
    if (need <= *cap) return true;
    long c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static int32_t node(sp_gmatch *m, int32_t pos, int32_t parent) {
    uint32_t h = mix(mix(0, (uint32_t)pos), (uint32_t)parent) & (NODE_BUCKETS - 1);
    for (int32_t i = m->node_heads[h]; i >= 0; i = m->nodes[i].next)
        if (m->nodes[i].pos == pos && m->nodes[i].parent == parent) return i;
    if (m->n_nodes >= MAX_NODES) {
        m->overflow = true;
        return ACCEPT_NODE;
    }
    long cap = m->cap_nodes;
    if (!grow((void **)&m->nodes, &cap, m->n_nodes + 1, sizeof *m->nodes)) {
        m->oom = true;
        return ACCEPT_NODE;
    }
    m->cap_nodes = (int)cap;
    m->nodes[m->n_nodes] = (gm_node){pos, parent, m->node_heads[h]};
    m->node_heads[h] = m->n_nodes;
    return m->n_nodes++;
}

static void add_top(sp_gmatch *m, int32_t top) {
    long cap = m->cap_scratch;
    if (!grow((void **)&m->scratch, &cap, m->n_scratch + 1, sizeof *m->scratch)) {
        m->oom = true;
        return;
    }
    m->cap_scratch = (int)cap;
    m->scratch[m->n_scratch++] = top;
}

/* Every stack top reachable from "continue at pos, then return to
 * parent" without consuming a byte. */
static void expand(sp_gmatch *m, int32_t pos, int32_t parent) {
    if (++m->work > MAX_EXPAND_WORK) {
        m->overflow = true;
        return;
    }
    const sp_gram *g = m->g;
    int32_t e = g->elems[pos];
    if (e == SP_G_END) {
        if (parent < 0) add_top(m, ACCEPT_NODE);
        else expand(m, m->nodes[parent].pos, m->nodes[parent].parent);
    } else if (e >= 0) {
        add_top(m, node(m, pos, parent));
    } else {
        int r = SP_G_REF_RULE(e);
        int32_t cont = g->elems[pos + 1] == SP_G_END ? parent : node(m, pos + 1, parent);
        for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            expand(m, g->alt_start[a], cont);
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state id of the scratch top set (sorted, deduplicated), or DEAD. */
static int32_t intern(sp_gmatch *m) {
    if (m->n_scratch == 0 || m->overflow || m->oom) return DEAD;
    qsort(m->scratch, (size_t)m->n_scratch, sizeof *m->scratch, cmp_i32);
    int n = 1;
    for (int i = 1; i < m->n_scratch; i++)
        if (m->scratch[i] != m->scratch[n - 1]) m->scratch[n++] = m->scratch[i];
    m->n_scratch = n;
    uint32_t h = 0;
    for (int i = 0; i < n; i++) h = mix(h, (uint32_t)m->scratch[i]);
    int32_t *head = &m->state_heads[h & (STATE_BUCKETS - 1)];
    for (int32_t s = *head; s >= 0; s = m->states[s].next)
        if (m->states[s].hash == h && m->states[s].n == n &&
            !memcmp(m->tops + m->states[s].off, m->scratch, (size_t)n * sizeof *m->scratch))
            return s;
    if (m->n_states >= MAX_STATES) {
        m->overflow = true;
        return DEAD;
    }
    long cap = m->cap_states;
    if (!grow((void **)&m->tops, &m->cap_tops, m->n_tops + n, sizeof *m->tops) ||
        !grow((void **)&m->states, &cap, m->n_states + 1, sizeof *m->states)) {
        m->oom = true;
        return DEAD;
    }
    m->cap_states = (int)cap;
    memcpy(m->tops + m->n_tops, m->scratch, (size_t)n * sizeof *m->scratch);
    m->states[m->n_states] = (gm_state){.off = (int32_t)m->n_tops, .n = n,
                                        .next = *head, .mask = -1, .hash = h};
    for (int b = 0; b < SP_TRIE_BANDS - 1; b++) m->states[m->n_states].band_mask[b] = NOT_SEEN;
    m->n_tops += n;
    *head = m->n_states;
    return m->n_states++;
}

static int32_t step_slow(sp_gmatch *m, int32_t s, uint8_t b) {
    if (!m->states[s].trans) {
        int32_t *row = malloc(256 * sizeof *row);
        if (!row) {
            m->oom = true;
            return DEAD;
        }
        for (int i = 0; i < 256; i++) row[i] = UNKNOWN;
        m->states[s].trans = row;
    }
    m->n_scratch = 0;
    m->work = 0;
    const gm_state st = m->states[s];
    for (int i = 0; i < st.n; i++) {
        int32_t top = m->tops[st.off + i];
        if (top == ACCEPT_NODE) continue;
        gm_node n = m->nodes[top];
        if (sp_gram_set_has(m->g, m->g->elems[n.pos], b)) expand(m, n.pos + 1, n.parent);
    }
    int32_t next = intern(m);
    m->states[s].trans[b] = next;
    return next;
}

static inline int32_t step(sp_gmatch *m, int32_t s, uint8_t b) {
    const int32_t *row = m->states[s].trans;
    if (row && row[b] != UNKNOWN) return row[b];
    return step_slow(m, s, b);
}

static spindle_status limit_error(const sp_gmatch *m, spindle_error *err) {
    if (m->oom) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar matcher: out of memory");
    return sp_fail(err, SPINDLE_ERR_LIMIT,
                   "grammar matcher: over its state limit (the grammar is "
                   "too ambiguous or nests too deeply)");
}

/* c->alpha: every position of a chain link r_k with k > C maps to the
 * same offset in r_C (NULL when the grammar has no such link). Links are
 * created bottom-up, so r_(k-1) has a smaller id than r_k. */
static bool build_alpha(const sp_gram *g, gm_cap *c, int C) {
    bool any = false;
    for (int r = 0; r < g->n_rules && !any; r++) any = g->rep_units && g->rep_units[r] > C;
    if (!any) return true;
    int32_t *cap = malloc((size_t)g->n_rules * sizeof *cap);
    c->alpha = malloc((size_t)(g->n_elems + 1) * sizeof *c->alpha);
    if (!cap || !c->alpha) {
        free(cap);
        return false;
    }
    for (int i = 0; i < g->n_elems; i++) c->alpha[i] = i;
    for (int r = 0; r < g->n_rules; r++) {
        cap[r] = -1;
        if (g->rep_units[r] <= C) continue;
        int below = g->rep_below[r];
        cap[r] = g->rep_units[below] == C ? below : cap[below];
        int32_t from = g->alt_start[g->rule_alt[r]];
        int32_t to = g->alt_start[g->rule_alt[cap[r]]];
        for (int32_t p = from; g->elems[p] != SP_G_END; p++) c->alpha[p] = to + (p - from);
    }
    free(cap);
    return true;
}

static bool cap_known(sp_gmatch *m, gm_cap *c) {
    if (!grow((void **)&c->node_capped, &c->cap_capped, m->n_nodes, sizeof *c->node_capped)) {
        m->oom = true;
        return false;
    }
    while (c->n_known < m->n_nodes) c->node_capped[c->n_known++] = -1;
    return true;
}

/* The node of stack n with every position mapped through c->alpha. */
static int32_t capped_node(sp_gmatch *m, gm_cap *c, int32_t n) {
    if (n < 0 || n == ACCEPT_NODE || !cap_known(m, c)) return n;
    /* Walk down to the first node already mapped, then map back up. */
    int32_t chain[64];
    int depth = 0;
    int32_t at = n;
    while (at >= 0 && depth < 64 && c->node_capped[at] < 0) {
        chain[depth++] = at;
        at = m->nodes[at].parent;
    }
    if (depth == 64) at = capped_node(m, c, at);  /* deep stacks: recurse */
    else if (at >= 0) at = c->node_capped[at];
    while (depth-- > 0 && !m->oom) {
        int32_t src = chain[depth];
        at = node(m, c->alpha[m->nodes[src].pos], at);
        if (cap_known(m, c)) c->node_capped[src] = at;
    }
    return at;
}

/* State s with every chain capped (s itself when none is over the cap). */
static int32_t capped_state(sp_gmatch *m, gm_cap *c, int32_t s) {
    if (!c->alpha) return s;
    m->n_scratch = 0;
    const gm_state st = m->states[s];
    bool changed = false;
    for (int i = 0; i < st.n; i++) {
        int32_t top = m->tops[st.off + i], capped = capped_node(m, c, top);
        changed = changed || capped != top;
        add_top(m, capped);
    }
    return changed ? intern(m) : s;
}

spindle_status sp_gmatch_new(const sp_gram *g, const sp_vocab_trie *trie,
                             sp_gmatch **out, spindle_error *err) {
    *out = NULL;
    sp_gmatch *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar matcher: out of memory");
    m->g = g;
    m->trie = trie;
    m->words = trie ? (trie->n_vocab + 31) / 32 : 0;
    int max_depth = 1;
    for (int i = 0; trie && i < trie->full.n_nodes; i++)
        if (trie->full.nodes[i].depth + 1 > max_depth) max_depth = trie->full.nodes[i].depth + 1;
    m->node_heads = malloc(NODE_BUCKETS * sizeof *m->node_heads);
    m->state_heads = malloc(STATE_BUCKETS * sizeof *m->state_heads);
    m->walk = malloc((size_t)max_depth * sizeof *m->walk);
    bool alpha_ok = true;
    for (int b = 0; b < SP_TRIE_BANDS - 1; b++)
        alpha_ok = alpha_ok && build_alpha(g, &m->cap[b], sp_trie_band_max[b]);
    if (!m->node_heads || !m->state_heads || !m->walk || !alpha_ok) {
        sp_gmatch_free(m);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar matcher: out of memory");
    }
    memset(m->node_heads, 0xFF, NODE_BUCKETS * sizeof *m->node_heads);
    memset(m->state_heads, 0xFF, STATE_BUCKETS * sizeof *m->state_heads);
    node(m, -1, -1); /* ACCEPT_NODE: the root rule has ended */
    m->n_scratch = 0;
    for (int a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        expand(m, g->alt_start[a], -1);
    m->cur = intern(m);
    if (m->cur < 0) {
        spindle_status st = m->overflow || m->oom
                                ? limit_error(m, err)
                                : sp_fail(err, SPINDLE_ERR_FORMAT, "grammar matches nothing");
        sp_gmatch_free(m);
        return st;
    }
    *out = m;
    return SPINDLE_OK;
}

void sp_gmatch_free(sp_gmatch *m) {
    if (!m) return;
    for (int s = 0; s < m->n_states; s++) free(m->states[s].trans);
    free(m->states);
    free(m->tops);
    free(m->nodes);
    free(m->node_heads);
    free(m->state_heads);
    free(m->scratch);
    free(m->masks);
    free(m->walk);
    for (int b = 0; b < SP_TRIE_BANDS - 1; b++) {
        free(m->cap[b].alpha);
        free(m->cap[b].node_capped);
    }
    free(m);
}

bool sp_gmatch_accept_bytes(sp_gmatch *m, const uint8_t *bytes, size_t n,
                            spindle_error *err) {
    int32_t s = m->cur;
    for (size_t i = 0; i < n && s >= 0; i++) s = step(m, s, bytes[i]);
    if (m->overflow || m->oom) {
        limit_error(m, err);
        return false;
    }
    if (s < 0) return false;
    m->cur = s;
    return true;
}

bool sp_gmatch_accepting(const sp_gmatch *m) {
    const gm_state *s = &m->states[m->cur];
    return m->tops[s->off] == ACCEPT_NODE;
}

bool sp_gmatch_finished(sp_gmatch *m) {
    const gm_state *s = &m->states[m->cur];
    return s->n == 1 && m->tops[s->off] == ACCEPT_NODE;
}

static void walk_trie(sp_gmatch *m, const sp_trie_part *part, int32_t start,
                      uint32_t *bits) {
    const sp_trie_node *nodes = part->nodes;
    const int32_t *tokens = part->tokens;
    int n_nodes = part->n_nodes;
    m->walk[0] = start;
    for (int i = 1; i < n_nodes;) {
        const sp_trie_node *t = &nodes[i];
        int32_t next = step(m, m->walk[t->depth - 1], t->byte);
        if (next < 0) {
            i = t->end;
            continue;
        }
        m->walk[t->depth] = next;
        for (int k = 0; k < t->n_tok; k++) {
            int32_t id = tokens[t->tok_first + k];
            bits[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
}

/* A free cache slot for a mask of `words` words, or -1 when all are used. */
static int32_t cache_slot(sp_gmatch *m) {
    if (m->n_masks >= MAX_CACHED_MASKS) return -1;
    if (!m->masks) m->masks = malloc((size_t)MAX_CACHED_MASKS * (size_t)m->words * sizeof *m->masks);
    return m->masks ? m->n_masks++ : -1;
}

static uint32_t *slot_bits(sp_gmatch *m, int32_t slot) {
    return m->masks + (size_t)slot * (size_t)m->words;
}

/* OR into bits band b's part of the mask of the capped state a (never the
 * current state), computing and caching it the first time. */
static void band_mask(sp_gmatch *m, int b, int32_t a, uint32_t *bits) {
    const uint32_t *keep = m->trie->band_bits[b];
    if (m->states[a].mask >= 0) {
        const uint32_t *full = slot_bits(m, m->states[a].mask);
        for (int w = 0; w < m->words; w++) bits[w] |= full[w] & keep[w];
        return;
    }
    int32_t slot = m->states[a].band_mask[b];
    if (slot < 0) {
        slot = cache_slot(m);
        if (slot < 0) {  /* cache full: walk into bits directly */
            walk_trie(m, &m->trie->band[b], a, bits);
            return;
        }
        uint32_t *part = slot_bits(m, slot);
        memset(part, 0, (size_t)m->words * sizeof *bits);
        walk_trie(m, &m->trie->band[b], a, part);
        /* Most band masks are a few words (a number's digits): OR only
         * the words that have bits. */
        int lo = 0, hi = m->words;
        while (lo < hi && !part[lo]) lo++;
        while (hi > lo && !part[hi - 1]) hi--;
        m->slot_lo[slot] = lo;
        m->slot_hi[slot] = hi;
        m->states[a].band_mask[b] = slot;
    }
    const uint32_t *part = slot_bits(m, slot);
    for (int w = m->slot_lo[slot]; w < m->slot_hi[slot]; w++) bits[w] |= part[w];
}

spindle_status sp_gmatch_mask(sp_gmatch *m, uint32_t *bits,
                              spindle_error *err) {
    size_t bytes = (size_t)m->words * sizeof *bits;
    int32_t cur = m->cur;
    int32_t slot = m->states[cur].mask;
    if (slot >= 0) {
        memcpy(bits, slot_bits(m, slot), bytes);
        return SPINDLE_OK;
    }
    /* A capped state pays off from its second use (the next count of the
     * same repetition); on its first the exact walk is as cheap. */
    int32_t capped[SP_TRIE_BANDS - 1];
    bool reuse = false;
    for (int b = 0; b < SP_TRIE_BANDS - 1; b++) {
        capped[b] = capped_state(m, &m->cap[b], cur);
        if (m->overflow || m->oom) return limit_error(m, err);
        if (capped[b] == cur) continue;
        gm_state *a = &m->states[capped[b]];
        if (a->band_mask[b] != NOT_SEEN || a->mask >= 0) reuse = true;
        else a->band_mask[b] = SEEN_ONCE;
    }
    memset(bits, 0, bytes);
    if (!reuse) {
        walk_trie(m, &m->trie->full, cur, bits);
    } else {
        for (int b = 0; b < SP_TRIE_BANDS - 1; b++) {
            if (capped[b] != cur) band_mask(m, b, capped[b], bits);
            else walk_trie(m, &m->trie->band[b], cur, bits);
        }
        walk_trie(m, &m->trie->band[SP_TRIE_BANDS - 1], cur, bits);
    }
    if (m->overflow || m->oom) return limit_error(m, err);
    slot = cache_slot(m);
    if (slot >= 0) {
        memcpy(slot_bits(m, slot), bits, bytes);
        m->states[cur].mask = slot;
    }
    return SPINDLE_OK;
}

int32_t sp_gmatch_state(const sp_gmatch *m) { return m->cur; }

void sp_gmatch_set_state(sp_gmatch *m, int32_t state) {
    if (state >= 0 && state < m->n_states) m->cur = state;
}
