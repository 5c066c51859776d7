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
 * The transition state x byte -> state is computed once and kept in a row
 * per state with one entry per byte class (bytes that every terminal set
 * treats alike): the trie walk of a mask is then one table lookup per trie
 * node after the first walk from a state, and a subtree whose prefix is
 * rejected is skipped whole. The masks of the states
 * generation actually reaches are cached too (strings, numbers and
 * whitespace recur). All of it lives in the grammar's automaton
 * (automaton.h), which every matcher of one compiled grammar shares: a
 * matcher is only its current state, and the second request with a
 * schema finds the first one's states, transitions and masks.
 *
 * Bounded repetitions (x{0,60}: a string's maxLength) make every count a
 * different state, so each would need a full trie walk. A token of at most
 * C bytes cannot use more than C more units of any chain, so for tokens of
 * at most C bytes the state with every chain's "k units left" capped at C
 * has exactly the same mask. The vocabulary is split in length bands
 * (grammar.h): band b's part of the mask comes from the state capped at
 * the band's maximum, which all counts above it share, computed once and
 * cached; only the last band (tokens over 32 bytes, 0.2 % of Qwen3's) is
 * always walked from the exact state (mask_cache.c). This is the
 * matcher's adaptive mask cache: what a state's mask shares with others
 * is cached once, and only what depends on the exact state is walked. */
#include "grammar/automaton.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define ACCEPT_NODE 0
#define MAX_NODES (1 << 22)
#define MAX_STATES (1 << 15)
#define MAX_EXPAND_WORK (1 << 20)
#define NODE_BUCKETS (1 << 18)
#define STATE_BUCKETS (1 << 14)

int sp_gauto_mask_slots = GA_MAX_CACHED_MASKS;

struct sp_gmatch {
    sp_gauto *a;          /* one reference */
    int32_t cur;
};

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

static int32_t node(sp_gauto *m, int32_t pos, int32_t parent) {
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

static void add_top(sp_gauto *m, int32_t top) {
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
static void expand(sp_gauto *m, int32_t pos, int32_t parent) {
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
            if (!g->alt_dead[a]) expand(m, g->alt_start[a], cont);
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state id of the scratch top set (sorted, deduplicated), or DEAD. */
static int32_t intern(sp_gauto *m) {
    if (m->n_scratch == 0 || m->overflow || m->oom) return GA_DEAD;
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
        return GA_DEAD;
    }
    long cap = m->cap_states;
    if (!grow((void **)&m->tops, &m->cap_tops, m->n_tops + n, sizeof *m->tops) ||
        !grow((void **)&m->states, &cap, m->n_states + 1, sizeof *m->states)) {
        m->oom = true;
        return GA_DEAD;
    }
    m->cap_states = (int)cap;
    size_t row = (size_t)m->n_states * (size_t)m->n_cls;
    if (!grow((void **)&m->trans, &m->cap_trans, (long)(row + (size_t)m->n_cls), sizeof *m->trans)) {
        m->oom = true;
        return GA_DEAD;
    }
    for (int c = 0; c < m->n_cls; c++) m->trans[row + (size_t)c] = GA_UNKNOWN;
    memcpy(m->tops + m->n_tops, m->scratch, (size_t)n * sizeof *m->scratch);
    m->states[m->n_states] = (gm_state){.off = (int32_t)m->n_tops, .n = n,
                                        .next = *head, .mask = -1, .hash = h};
    for (int b = 0; b < SP_TRIE_BANDS - 1; b++) m->states[m->n_states].band_mask[b] = GA_NOT_SEEN;
    m->n_tops += n;
    *head = m->n_states;
    return m->n_states++;
}

int32_t ga_step_slow(sp_gauto *m, int32_t s, uint8_t b) {
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
    /* A failed step (over a limit) is not remembered as a rejection. */
    if (!m->overflow && !m->oom) m->trans[(size_t)s * (size_t)m->n_cls + m->cls[b]] = next;
    return next;
}

spindle_status ga_limit_error(const sp_gauto *m, spindle_error *err) {
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

static bool cap_known(sp_gauto *m, gm_cap *c) {
    if (!grow((void **)&c->node_capped, &c->cap_capped, m->n_nodes, sizeof *c->node_capped)) {
        m->oom = true;
        return false;
    }
    while (c->n_known < m->n_nodes) c->node_capped[c->n_known++] = -1;
    return true;
}

/* The node of stack n with every position mapped through c->alpha. */
static int32_t capped_node(sp_gauto *m, gm_cap *c, int32_t n) {
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

int32_t ga_capped_state(sp_gauto *m, int b, int32_t s) {
    gm_cap *c = &m->cap[b];
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

/* m->cls: bytes in the same class are in exactly the same terminal sets,
 * so every state steps them alike. Each distinct set splits the classes
 * it cuts (equal sets are skipped: literals repeat their bytes' sets). */
static bool byte_classes(sp_gauto *m) {
    const sp_gram *g = m->g;
    memset(m->cls, 0, sizeof m->cls);
    m->n_cls = 1;
    int n_seen = 1;
    while (n_seen < 2 * g->n_sets) n_seen *= 2;
    int32_t *seen = malloc((size_t)n_seen * sizeof *seen);
    if (!seen) return false;
    memset(seen, 0xFF, (size_t)n_seen * sizeof *seen);
    for (int s = 0; s < g->n_sets && m->n_cls < 256; s++) {
        uint32_t h = 0;
        for (int i = 0; i < 32; i += 4) {
            uint32_t w;
            memcpy(&w, g->sets[s] + i, 4);
            h = mix(h, w);
        }
        int32_t *at = &seen[h & (uint32_t)(n_seen - 1)];
        bool dup = false;
        for (; *at >= 0 && !dup; at = &seen[(at - seen + 1) & (n_seen - 1)])
            dup = !memcmp(g->sets[*at], g->sets[s], 32);
        if (dup) continue;
        *at = s;
        int16_t split[2][256];
        memset(split, 0xFF, sizeof split);
        int n = 0;
        for (int b = 0; b < 256; b++) {
            int16_t *to = &split[sp_gram_set_has(g, s, (uint8_t)b)][m->cls[b]];
            if (*to < 0) *to = (int16_t)n++;
            m->cls[b] = (uint8_t)*to;
        }
        m->n_cls = n;
    }
    free(seen);
    return true;
}

static void gauto_free(sp_gauto *m) {
    free(m->trans);
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
    pthread_mutex_destroy(&m->lock);
    free(m);
}

spindle_status sp_gauto_new(const sp_gram *g, const sp_vocab_trie *trie,
                            sp_gauto **out, spindle_error *err) {
    *out = NULL;
    sp_gauto *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar matcher: out of memory");
    if (pthread_mutex_init(&m->lock, NULL)) {
        free(m);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar matcher: cannot make a lock");
    }
    m->refs = 1;
    m->g = g;
    m->trie = trie;
    m->words = trie ? (trie->n_vocab + 31) / 32 : 0;
    for (int i = 0; i < GA_MAX_CACHED_MASKS; i++) m->slots[i].state = -1;
    m->n_slots = sp_gauto_mask_slots < 1 || sp_gauto_mask_slots > GA_MAX_CACHED_MASKS
                     ? GA_MAX_CACHED_MASKS : sp_gauto_mask_slots;
    m->node_heads = malloc(NODE_BUCKETS * sizeof *m->node_heads);
    m->state_heads = malloc(STATE_BUCKETS * sizeof *m->state_heads);
    m->walk = malloc((size_t)(trie ? trie->max_depth : 1) * sizeof *m->walk);
    bool alpha_ok = byte_classes(m);
    for (int b = 0; b < SP_TRIE_BANDS - 1; b++)
        alpha_ok = alpha_ok && build_alpha(g, &m->cap[b], sp_trie_band_max[b]);
    if (!m->node_heads || !m->state_heads || !m->walk || !alpha_ok) {
        gauto_free(m);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar matcher: out of memory");
    }
    memset(m->node_heads, 0xFF, NODE_BUCKETS * sizeof *m->node_heads);
    memset(m->state_heads, 0xFF, STATE_BUCKETS * sizeof *m->state_heads);
    node(m, -1, -1); /* ACCEPT_NODE: the root rule has ended */
    m->n_scratch = 0;
    for (int a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (!g->alt_dead[a]) expand(m, g->alt_start[a], -1);
    m->start = intern(m);
    if (m->start < 0) {
        spindle_status st = m->overflow || m->oom
                                ? ga_limit_error(m, err)
                                : sp_fail(err, SPINDLE_ERR_FORMAT, "grammar matches nothing");
        gauto_free(m);
        return st;
    }
    *out = m;
    return SPINDLE_OK;
}

sp_gauto *sp_gauto_retain(sp_gauto *a) {
    pthread_mutex_lock(&a->lock);
    a->refs++;
    pthread_mutex_unlock(&a->lock);
    return a;
}

void sp_gauto_release(sp_gauto *a) {
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    bool last = --a->refs == 0;
    pthread_mutex_unlock(&a->lock);
    if (last) gauto_free(a);
}

bool sp_gauto_crowded(sp_gauto *a) {
    pthread_mutex_lock(&a->lock);
    bool crowded = a->n_states > MAX_STATES / 4 || a->n_nodes > MAX_NODES / 4 ||
                   a->overflow || a->oom;
    pthread_mutex_unlock(&a->lock);
    return crowded;
}

spindle_status sp_gmatch_new_on(sp_gauto *a, sp_gmatch **out, spindle_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar matcher: out of memory");
    (*out)->a = sp_gauto_retain(a);
    (*out)->cur = a->start;
    return SPINDLE_OK;
}

spindle_status sp_gmatch_new(const sp_gram *g, const sp_vocab_trie *trie,
                             sp_gmatch **out, spindle_error *err) {
    *out = NULL;
    sp_gauto *a = NULL;
    spindle_status st = sp_gauto_new(g, trie, &a, err);
    if (!st) st = sp_gmatch_new_on(a, out, err);
    sp_gauto_release(a);
    return st;
}

void sp_gmatch_free(sp_gmatch *m) {
    if (!m) return;
    sp_gauto_release(m->a);
    free(m);
}

bool sp_gmatch_accept_bytes(sp_gmatch *m, const uint8_t *bytes, size_t n,
                            spindle_error *err) {
    sp_gauto *a = m->a;
    pthread_mutex_lock(&a->lock);
    int32_t s = m->cur;
    for (size_t i = 0; i < n && s >= 0; i++) s = ga_step(a, s, bytes[i]);
    /* Over a limit the automaton stays failed (a half-built expansion may
     * have left wrong memos): the grammar starts a new one for later
     * matchers, see sp_gauto_crowded. */
    bool failed = a->overflow || a->oom;
    if (failed) ga_limit_error(a, err);
    pthread_mutex_unlock(&a->lock);
    if (failed || s < 0) return false;
    m->cur = s;
    return true;
}

bool sp_gmatch_accepting(const sp_gmatch *m) {
    sp_gauto *a = m->a;
    pthread_mutex_lock(&a->lock);
    bool yes = a->tops[a->states[m->cur].off] == ACCEPT_NODE;
    pthread_mutex_unlock(&a->lock);
    return yes;
}

bool sp_gmatch_finished(sp_gmatch *m) {
    sp_gauto *a = m->a;
    pthread_mutex_lock(&a->lock);
    const gm_state *s = &a->states[m->cur];
    bool yes = s->n == 1 && a->tops[s->off] == ACCEPT_NODE;
    pthread_mutex_unlock(&a->lock);
    return yes;
}

int32_t sp_gmatch_state(const sp_gmatch *m) { return m->cur; }

void sp_gmatch_set_state(sp_gmatch *m, int32_t state) {
    pthread_mutex_lock(&m->a->lock);
    if (state >= 0 && state < m->a->n_states) m->cur = state;
    pthread_mutex_unlock(&m->a->lock);
}

spindle_status sp_gmatch_mask(sp_gmatch *m, uint32_t *bits, spindle_error *err) {
    sp_gauto *a = m->a;
    pthread_mutex_lock(&a->lock);
    spindle_status st = a->overflow || a->oom ? ga_limit_error(a, err)
                                              : ga_mask(a, m->cur, bits, err);
    pthread_mutex_unlock(&a->lock);
    return st;
}
