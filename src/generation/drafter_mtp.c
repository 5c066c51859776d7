/* The MTP drafter: the target's own multi-token-prediction head
 * (models/mtp.h) drafts the argmax of its logits for greedy requests and,
 * at temperature > 0, samples each draft position with a per-round clone
 * of the request's sampler on the uniforms the target's verify rows will
 * draw (draft_sampler.c, shared with the draft model; the request's own
 * stream is never advanced, so the output stays plain sampling's).
 *
 * Every target forward pass of the request writes its rows' hidden states
 * (before the final norm) into `taps`, by position. Head row j is fed
 * token t_{j+1} and the target's h_j, so at a round whose pending token
 * sits at position L (the target has computed h_0 .. h_{L-1}) the head
 * first catches up over the rows it has not seen, up to L - 1, in one
 * forward (its last logits propose the token after the pending one), then
 * recurses one row per further draft on its own output hidden and its own
 * draft. Those recursion rows are dropped again at once (a full-KV
 * truncation): the next round replaces them with rows fed the target's
 * hidden states of what was accepted. Positions whose hidden state the
 * target never computed (a prompt prefix restored from the prompt cache)
 * are fed zeros: the drafts are weaker there, never wrong. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "generation/speculative.h"
#include "models/mtp.h"

struct sp_mtp_draft {
    sp_mtp *head;
    spindle_seq *seq;
    int hidden_size, vocab, target_vocab, cap;
    float *taps;           /* [cap][hidden_size], by target position */
    float *g;              /* [cap][hidden_size], the head's own outputs */
    float *logits;         /* [vocab] */
    sp_draft_sampler pick; /* argmax, or the request's sampler's clone */
};

spindle_status sp_mtp_draft_new(sp_mtp *head, int cap,
                                const spindle_sampler *sampler,
                                sp_mtp_draft **out, spindle_error *err) {
    *out = NULL;
    sp_mtp_draft *d = calloc(1, sizeof *d);
    if (!d) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    sp_mtp_retain(head);
    d->head = head;
    spindle_model *m = sp_mtp_model(head);
    d->hidden_size = spindle_model_hidden_size(m);
    d->vocab = d->target_vocab = spindle_model_vocab_size(m);
    d->cap = cap;
    d->taps = calloc((size_t)cap * d->hidden_size, sizeof *d->taps);
    d->g = malloc((size_t)cap * d->hidden_size * sizeof *d->g);
    d->logits = malloc((size_t)d->vocab * sizeof *d->logits);
    spindle_status st = d->taps && d->g && d->logits
                            ? spindle_seq_new(m, &d->seq, err)
                            : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = sp_draft_sampler_init(&d->pick, sampler, err);
    if (st) {
        sp_mtp_draft_free(d);
        return st;
    }
    *out = d;
    return SPINDLE_OK;
}

void sp_mtp_draft_free(sp_mtp_draft *d) {
    if (!d) return;
    spindle_seq_free(d->seq);
    sp_mtp_free(d->head);
    sp_draft_sampler_free(&d->pick);
    free(d->taps);
    free(d->g);
    free(d->logits);
    free(d);
}

float *sp_mtp_draft_taps(sp_mtp_draft *d, int pos, int n) {
    if (!d || pos < 0 || n > d->cap - pos) return NULL;
    return d->taps + (size_t)pos * d->hidden_size;
}

const float *sp_mtp_draft_last_logits(const sp_mtp_draft *d) {
    return d->logits;
}

int sp_mtp_draft_propose(sp_mtp_draft *d, const int32_t *history, int n_hist,
                         int target_length, int want, int32_t *out) {
    /* The history's positions are the target sequence's (a caller's
     * sequence with other content first is not drafted for). */
    const int L = n_hist - 1, hs = d->hidden_size;
    if (want < 1 || L < 1 || target_length != L || L > d->cap) return 0;
    spindle_error err;
    int fed = spindle_seq_length(d->seq);
    /* At least one row, so that the last one's logits are fresh. */
    if (fed >= L && spindle_seq_truncate(d->seq, fed = L - 1, &err)) return 0;
    const int n = L - fed;
    if (sp_mtp_forward(d->head, d->seq, history + fed + 1,
                       d->taps + (size_t)fed * hs, n, false, d->logits, d->g,
                       &err))
        return 0;
    int got = 0;
    const float *g = d->g + (size_t)(n - 1) * hs;
    /* Draft j takes the draws verify row j will take: the clone restarts
     * from the request's stream here and draws once per draft. */
    sp_draft_sampler_start_round(&d->pick);
    while (got < want) {
        int32_t t = sp_draft_sampler_pick(&d->pick, d->logits, d->vocab);
        if (t < 0 || t >= d->target_vocab) break;
        out[got++] = t;
        if (got >= want ||
            sp_mtp_forward(d->head, d->seq, &out[got - 1], g, 1, false,
                           d->logits, d->g, &err))
            break;
        g = d->g;
    }
    /* Drop the recursion rows: they hold the head's hidden states, not
     * the target's. */
    if (spindle_seq_length(d->seq) > L) spindle_seq_truncate(d->seq, L, &err);
    return got;
}

/* The record: i32 the head's length h, i32 the target's length L, u64 the
 * snapshot's bytes, the snapshot, then (L - h) hidden rows of f32. */
void sp_mtp_draft_save(const sp_mtp_draft *d, int target_length, sp_strbuf *b) {
    spindle_error err;
    spindle_seq_snapshot *snap = NULL;
    const int32_t have = spindle_seq_length(d->seq), want = target_length;
    if (have > want || want > d->cap ||
        spindle_seq_snapshot_take(d->seq, &snap, &err)) {
        b->oom = true;    /* nothing usable: the whole record is dropped */
        return;
    }
    const uint64_t snap_n = spindle_seq_snapshot_bytes(snap);
    sp_strbuf_add(b, (const char *)&have, sizeof have);
    sp_strbuf_add(b, (const char *)&want, sizeof want);
    sp_strbuf_add(b, (const char *)&snap_n, sizeof snap_n);
    sp_strbuf_add(b, spindle_seq_snapshot_data(snap), snap_n);
    sp_strbuf_add(b, (const char *)(d->taps + (size_t)have * d->hidden_size),
                  (size_t)(want - have) * d->hidden_size * sizeof *d->taps);
    spindle_seq_snapshot_free(snap);
}

bool sp_mtp_draft_restore(sp_mtp_draft *d, int target_length,
                          const unsigned char *data, size_t n) {
    int32_t have, want;
    uint64_t snap_n;
    const size_t head = sizeof have + sizeof want + sizeof snap_n;
    if (n < head) return false;
    memcpy(&have, data, sizeof have);
    memcpy(&want, data + sizeof have, sizeof want);
    memcpy(&snap_n, data + sizeof have + sizeof want, sizeof snap_n);
    if (want != target_length || have < 0 || have > want || want > d->cap ||
        snap_n > n - head)
        return false;
    const size_t rows = (size_t)(want - have) * d->hidden_size * sizeof *d->taps;
    if (n - head - snap_n != rows) return false;
    spindle_error err;
    spindle_seq_snapshot *snap = NULL;
    if (spindle_seq_snapshot_from_data(sp_mtp_model(d->head), data + head,
                                       snap_n, &snap, &err))
        return false;
    bool ok = spindle_seq_snapshot_length(snap) == have &&
              !spindle_seq_snapshot_restore(d->seq, snap, &err);
    spindle_seq_snapshot_free(snap);
    if (!ok) {
        spindle_seq_truncate(d->seq, 0, &err);
        return false;
    }
    memcpy(d->taps + (size_t)have * d->hidden_size, data + head + snap_n, rows);
    return true;
}

bool sp_mtp_draft_fingerprint(const sp_mtp_draft *d,
                              char out[SPINDLE_FINGERPRINT_LEN + 1]) {
    spindle_error err;
    return !sp_mtp_fingerprint(d->head, out, &err);
}
