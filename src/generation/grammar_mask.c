/* The grammar as a logits processor: tokens the grammar's matcher rejects
 * get -inf before sampling (and so before the reported logprobs), the EOS
 * and stop ids are kept only where the grammar is complete, and the
 * sampled token advances the matcher. */
#include "generation/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

spindle_status sp_grammar_gate_new(const spindle_grammar *g, int n_vocab,
                                   sp_grammar_gate *out, spindle_error *err) {
    memset(out, 0, sizeof *out);
    if (!g) return SPINDLE_OK;
    spindle_status st = spindle_grammar_matcher_new(g, &out->matcher, err);
    if (st) return st;
    int covered = spindle_grammar_vocab_size(g);
    out->n_grammar_vocab = covered;
    out->bits_state = -1;
    out->failed_state = -1;
    out->words = ((n_vocab > covered ? n_vocab : covered) + 31) / 32;
    out->bits = calloc((size_t)out->words, sizeof *out->bits);
    if (!out->bits) {
        sp_grammar_gate_free(out);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory for the mask");
    }
    return SPINDLE_OK;
}

void sp_grammar_gate_free(sp_grammar_gate *gate) {
    spindle_grammar_matcher_free(gate->matcher);
    free(gate->bits);
    memset(gate, 0, sizeof *gate);
}

/* gate->bits for the matcher's current state; the drafter's look at a
 * state (sp_grammar_gate_forced) and the mask thread leave its mask for
 * the row that samples there. */
static spindle_status fill_bits(sp_grammar_gate *gate, spindle_error *err) {
    int32_t state = spindle_grammar_matcher_state(gate->matcher);
    if (state >= 0 && state == gate->bits_state) return SPINDLE_OK;
    if (state >= 0 && state == gate->failed_state) {
        gate->failed_state = -1;
        if (err) *err = gate->failed;
        return gate->failed.status;
    }
    gate->bits_state = -1;
    spindle_status st = spindle_grammar_matcher_mask(gate->matcher, gate->bits, err);
    if (!st) gate->bits_state = state;
    return st;
}

static void keep_ids(float *logits, const float *saved, const int32_t *ids,
                     int n, int n_vocab) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < n_vocab) logits[ids[i]] = saved[i];
}

spindle_status sp_grammar_gate_mask(sp_grammar_gate *gate, float *logits,
                                    int n_vocab, const int32_t *end_ids,
                                    int n_end, bool *nothing_left,
                                    spindle_error *err) {
    *nothing_left = false;
    bool accepting = spindle_grammar_matcher_accepting(gate->matcher);
    if (spindle_grammar_matcher_finished(gate->matcher) && n_end == 0) {
        *nothing_left = true;  /* complete, and no end id to sample */
        return SPINDLE_OK;
    }
    spindle_status st = fill_bits(gate, err);
    if (st) return st;
    float saved[64];
    int n_saved = n_end < 64 ? n_end : 64;
    for (int i = 0; i < n_saved; i++)
        saved[i] = end_ids[i] >= 0 && end_ids[i] < n_vocab ? logits[end_ids[i]] : 0;
    int covered = gate->n_grammar_vocab < n_vocab ? gate->n_grammar_vocab : n_vocab;
    bool any = false;
    for (int w = 0; w < (covered + 31) / 32; w++) {
        uint32_t b = gate->bits[w];
        if (b == 0xFFFFFFFFu) {
            any = true;
            continue;
        }
        any |= b != 0;
        int base = w * 32;
        for (int k = 0; k < 32 && base + k < covered; k++)
            if (!(b >> k & 1)) logits[base + k] = -INFINITY;
    }
    for (int t = covered; t < n_vocab; t++) logits[t] = -INFINITY;
    if (accepting) keep_ids(logits, saved, end_ids, n_saved, n_vocab);
    if (!any && !accepting)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "grammar: no token of the vocabulary can continue here");
    if (!any && accepting && n_end == 0) *nothing_left = true;
    return SPINDLE_OK;
}

spindle_status sp_grammar_gate_accept(sp_grammar_gate *gate, int32_t token,
                                      spindle_error *err) {
    return spindle_grammar_matcher_accept(gate->matcher, token, err);
}

bool sp_grammar_gate_mask_stale(const sp_grammar_gate *gate) {
    if (!gate->matcher) return false;
    int32_t state = spindle_grammar_matcher_state(gate->matcher);
    return state >= 0 && state != gate->bits_state && state != gate->failed_state;
}

void sp_grammar_gate_prefetch(sp_grammar_gate *gate) {
    int32_t state = spindle_grammar_matcher_state(gate->matcher);
    if (fill_bits(gate, &gate->failed)) gate->failed_state = state;
}

/* The one token the mask allows, or -1 (none, or more than one). */
static int32_t only_token(const sp_grammar_gate *gate) {
    int32_t found = -1;
    for (int w = 0; w < (gate->n_grammar_vocab + 31) / 32; w++) {
        uint32_t b = gate->bits[w];
        if (!b) continue;
        if (found >= 0 || (b & (b - 1))) return -1;
        found = w * 32 + __builtin_ctz(b);
    }
    return found;
}

int sp_grammar_gate_forced(sp_grammar_gate *gate, int max, int32_t *out) {
    spindle_grammar_matcher *m = gate->matcher;
    int32_t start = spindle_grammar_matcher_state(m);
    spindle_error err;
    int n = 0;
    while (n < max && !spindle_grammar_matcher_accepting(m) && !fill_bits(gate, &err)) {
        int32_t tok = only_token(gate);
        if (tok < 0 || spindle_grammar_matcher_accept(m, tok, &err)) break;
        out[n++] = tok;
    }
    spindle_grammar_matcher_restore(m, start);
    return n;
}

static bool is_end(const int32_t *ids, int n, int32_t t) {
    for (int i = 0; i < n; i++)
        if (ids[i] == t) return true;
    return false;
}

int sp_grammar_gate_valid_prefix(sp_grammar_gate *gate, const int32_t *draft, int n,
                                 const int32_t *end_ids, int n_end) {
    spindle_grammar_matcher *m = gate->matcher;
    int32_t start = spindle_grammar_matcher_state(m);
    spindle_error err;
    int ok = 0;
    while (ok < n) {
        if (is_end(end_ids, n_end, draft[ok])) {
            ok += spindle_grammar_matcher_accepting(m);
            break;
        }
        if (spindle_grammar_matcher_accept(m, draft[ok], &err)) break;
        ok++;
    }
    spindle_grammar_matcher_restore(m, start);
    return ok;
}
