/* A state's token mask: a preorder walk of the vocabulary trie that skips
 * every subtree whose prefix the state rejects, and the cache of masks
 * (whole ones, and the band parts of capped states, see matcher.c) that
 * the automaton's matchers share. The cache is a fixed number of slots;
 * when all are taken a clock hand evicts one not used since its last
 * pass, so a one-off state (an exact count of a long repetition) does not
 * keep a recurring one out for the grammar's life. */
#include "grammar/automaton.h"

#include <stdlib.h>
#include <string.h>

static void walk_trie(sp_gauto *m, const sp_trie_part *part, int32_t start,
                      uint32_t *bits) {
    const sp_trie_node *nodes = part->nodes;
    const int32_t *tokens = part->tokens;
    int n_nodes = part->n_nodes;
    m->walk[0] = start;
    for (int i = 1; i < n_nodes;) {
        const sp_trie_node *t = &nodes[i];
        int32_t next = ga_step(m, m->walk[t->depth - 1], t->byte);
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

static uint32_t *slot_bits(sp_gauto *m, int32_t slot) {
    return m->masks + (size_t)slot * (size_t)m->words;
}

/* Drop slot's mask from its owner (it is recomputed when next needed). */
static void evict(sp_gauto *m, int32_t slot) {
    gm_slot *s = &m->slots[slot];
    if (s->state < 0) return;
    gm_state *st = &m->states[s->state];
    if (s->band < 0) st->mask = -1;
    else st->band_mask[s->band] = GA_SEEN_ONCE;
    s->state = -1;
}

/* A slot for state's whole mask (band -1) or its band part, or -1 when
 * the cache cannot be allocated. */
static int32_t take_slot(sp_gauto *m, int32_t state, int band) {
    if (!m->masks) {
        m->masks = malloc((size_t)m->n_slots * (size_t)m->words * sizeof *m->masks);
        if (!m->masks) return -1;
    }
    int32_t slot;
    if (m->n_masks < m->n_slots) {
        slot = m->n_masks++;
    } else {
        while (m->slots[m->hand].used) {
            m->slots[m->hand].used = false;
            m->hand = (m->hand + 1) % m->n_slots;
        }
        slot = m->hand;
        m->hand = (m->hand + 1) % m->n_slots;
        evict(m, slot);
    }
    m->slots[slot] = (gm_slot){.state = state, .band = (int8_t)band, .lo = 0, .hi = m->words};
    return slot;
}

/* Most band masks are a few words (a number's digits): ORs of the slot
 * touch only the words that have bits. */
static void trim(sp_gauto *m, int32_t slot) {
    const uint32_t *part = slot_bits(m, slot);
    int lo = 0, hi = m->words;
    while (lo < hi && !part[lo]) lo++;
    while (hi > lo && !part[hi - 1]) hi--;
    m->slots[slot].lo = lo;
    m->slots[slot].hi = hi;
}

/* OR into bits band b's part of the mask of the capped state a (never the
 * current state), computing and caching it the first time. */
static void band_mask(sp_gauto *m, int b, int32_t a, uint32_t *bits) {
    const uint32_t *keep = m->trie->band_bits[b];
    if (m->states[a].mask >= 0) {
        m->slots[m->states[a].mask].used = true;
        const uint32_t *full = slot_bits(m, m->states[a].mask);
        for (int w = 0; w < m->words; w++) bits[w] |= full[w] & keep[w];
        return;
    }
    int32_t slot = m->states[a].band_mask[b];
    if (slot < 0) {
        slot = take_slot(m, a, b);
        if (slot < 0) {  /* no cache: walk into bits directly */
            walk_trie(m, &m->trie->band[b], a, bits);
            return;
        }
        uint32_t *part = slot_bits(m, slot);
        memset(part, 0, (size_t)m->words * sizeof *bits);
        walk_trie(m, &m->trie->band[b], a, part);
        trim(m, slot);
        m->states[a].band_mask[b] = slot;
    }
    m->slots[slot].used = true;
    const uint32_t *part = slot_bits(m, slot);
    for (int w = m->slots[slot].lo; w < m->slots[slot].hi; w++) bits[w] |= part[w];
}

/* After a whole walk from cur: for band b's tokens cur's mask is its
 * capped state a's (capping is exact for tokens that short), so that part
 * of bits is cached as a's band mask, and the other counts of the same
 * repetitions start from it instead of walking the band again. */
static void keep_band(sp_gauto *m, int b, int32_t a, const uint32_t *bits) {
    if (m->states[a].band_mask[b] >= 0) return;
    int32_t slot = take_slot(m, a, b);
    if (slot < 0) return;
    uint32_t *part = slot_bits(m, slot);
    const uint32_t *keep = m->trie->band_bits[b];
    for (int w = 0; w < m->words; w++) part[w] = bits[w] & keep[w];
    trim(m, slot);
    m->states[a].band_mask[b] = slot;
}

spindle_status ga_mask(sp_gauto *m, int32_t cur, uint32_t *bits, spindle_error *err) {
    size_t bytes = (size_t)m->words * sizeof *bits;
    int32_t slot = m->states[cur].mask;
    if (slot >= 0) {
        m->slots[slot].used = true;
        memcpy(bits, slot_bits(m, slot), bytes);
        return SPINDLE_OK;
    }
    /* A capped state pays off from its second use (the next count of the
     * same repetition); on its first the exact walk is as cheap. */
    int32_t capped[SP_TRIE_BANDS - 1];
    bool reuse = false;
    for (int b = 0; b < SP_TRIE_BANDS - 1; b++) {
        capped[b] = ga_capped_state(m, b, cur);
        if (m->overflow || m->oom) return ga_limit_error(m, err);
        if (capped[b] == cur) continue;
        gm_state *a = &m->states[capped[b]];
        if (a->band_mask[b] != GA_NOT_SEEN || a->mask >= 0) reuse = true;
        else a->band_mask[b] = GA_SEEN_ONCE;
    }
    memset(bits, 0, bytes);
    if (!reuse) {
        walk_trie(m, &m->trie->full, cur, bits);
        for (int b = 0; b < SP_TRIE_BANDS - 1 && !m->overflow && !m->oom; b++)
            if (capped[b] != cur) keep_band(m, b, capped[b], bits);
    } else {
        for (int b = 0; b < SP_TRIE_BANDS - 1; b++) {
            if (capped[b] != cur) band_mask(m, b, capped[b], bits);
            else walk_trie(m, &m->trie->band[b], cur, bits);
        }
        walk_trie(m, &m->trie->band[SP_TRIE_BANDS - 1], cur, bits);
    }
    if (m->overflow || m->oom) return ga_limit_error(m, err);
    slot = take_slot(m, cur, -1);
    if (slot >= 0) {
        memcpy(slot_bits(m, slot), bits, bytes);
        m->states[cur].mask = slot;
    }
    return SPINDLE_OK;
}
