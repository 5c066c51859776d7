/* Prompt spans in the forward pass: a batch entry's rows from token ids
 * (the embedding table) or from an embeddings span (rows an input encoder
 * made), each row's prefix-index key and span flags, and the digest that
 * names an embeddings span's content. */
#include "models/spans.h"
#include "models/blocks.h"
#include "base/error.h"
#include "compute/matmul/matmul.h"

#include <string.h>
#include <xxhash.h>

void spindle_span_digest(const void *source, size_t n, const char *encoder,
                         unsigned char out[SPINDLE_SPAN_DIGEST_BYTES]) {
    /* The hash of the two hashes (no allocation, no state to fail): the
     * source's and the encoder's, each whole, so that no (source, encoder)
     * pair aliases another by moving bytes across the boundary. */
    XXH128_canonical_t parts[2], c;
    XXH128_canonicalFromHash(&parts[0], XXH3_128bits(source && n ? source : "",
                                                     source ? n : 0));
    XXH128_canonicalFromHash(&parts[1], XXH3_128bits(encoder ? encoder : "",
                                                     encoder ? strlen(encoder)
                                                             : 0));
    XXH128_canonicalFromHash(&c, XXH3_128bits(parts, sizeof parts));
    memcpy(out, c.digest, SPINDLE_SPAN_DIGEST_BYTES);
}

spindle_status sp_span_check(const spindle_span *s, int vocab, const char *what,
                             int index, spindle_error *err) {
    if (s->n < 1 || !s->tokens)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s span %d: no positions or no ids", what, index);
    for (int t = 0; t < s->n; t++)
        if (s->tokens[t] < 0 || s->tokens[t] >= vocab)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "%s span %d: token id %d is outside the "
                           "vocabulary (%d)", what, index, s->tokens[t], vocab);
    if (s->kind == SPINDLE_SPAN_TOKENS) {
        if (s->embeddings || s->flags)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "%s span %d: a token span has no embeddings or "
                           "flags", what, index);
        return SPINDLE_OK;
    }
    if (s->kind != SPINDLE_SPAN_EMBEDDINGS)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "%s span %d: unknown kind %d",
                       what, index, (int)s->kind);
    if (!s->embeddings)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s span %d: an embeddings span without rows", what,
                       index);
    if (s->flags & ~(SPINDLE_SPAN_BIDIRECTIONAL | SPINDLE_SPAN_NO_PER_LAYER_INPUT))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s span %d: unknown flags 0x%x", what, index,
                       (unsigned)s->flags);
    if (s->digest_offset < 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s span %d: digest_offset is negative", what, index);
    return SPINDLE_OK;
}

spindle_status sp_entry_check_spans(const spindle_model *m,
                                    const spindle_batch_entry *e, int index,
                                    spindle_error *err) {
    if (e->tokens || e->n_spans < 1 || !e->spans)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "batch entry %d: spans and tokens together, or no "
                       "spans", index);
    int64_t total = 0;
    for (int i = 0; i < e->n_spans; i++) {
        spindle_status st =
            sp_span_check(&e->spans[i], m->cfg.vocab_size, "batch entry", i,
                          err);
        if (st) return st;
        total += e->spans[i].n;
    }
    if (total != e->n_tokens)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "batch entry %d: n_tokens is %d, its spans hold %lld",
                       index, e->n_tokens, (long long)total);
    return SPINDLE_OK;
}

/* Rows [row, row + n) from the embedding table, with the family's scale. */
static void table_rows(spindle_model *m, sp_forward *f, const int32_t *ids,
                       int n, int row) {
    const size_t d = (size_t)m->cfg.hidden_size;
    for (int t = 0; t < n; t++)
        sp_weight_row(&m->embed, ids[t], f->x + (size_t)(row + t) * d);
    if (m->arch->embed_rows) m->arch->embed_rows(m, f->x + row * d, n);
}

bool sp_entry_fill_rows(spindle_model *m, sp_forward *f,
                        const spindle_batch_entry *e, int row) {
    const size_t d = (size_t)m->cfg.hidden_size;
    bool sees_ahead = false;
    if (!e->spans) {
        memcpy(f->tokens + row, e->tokens, (size_t)e->n_tokens * sizeof *e->tokens);
        memset(f->keys + row, 0, (size_t)e->n_tokens * sizeof *f->keys);
        memset(f->row_flags + row, 0, (size_t)e->n_tokens * sizeof *f->row_flags);
        memset(f->ahead + row, 0, (size_t)e->n_tokens * sizeof *f->ahead);
        table_rows(m, f, e->tokens, e->n_tokens, row);
        return false;
    }
    for (int i = 0; i < e->n_spans; i++) {
        const spindle_span *s = &e->spans[i];
        memcpy(f->tokens + row, s->tokens, (size_t)s->n * sizeof *s->tokens);
        for (int t = 0; t < s->n; t++) {
            f->keys[row + t] = s->kind == SPINDLE_SPAN_EMBEDDINGS
                ? sp_span_position_key(s->digest, (int64_t)s->digest_offset + t,
                                       s->flags)
                : 0;
            f->row_flags[row + t] = s->flags;
            /* A bidirectional span's rows see each other: each also the
             * span's rows after it in this pass. */
            f->ahead[row + t] =
                s->flags & SPINDLE_SPAN_BIDIRECTIONAL ? s->n - 1 - t : 0;
        }
        sees_ahead |= s->n > 1 && (s->flags & SPINDLE_SPAN_BIDIRECTIONAL);
        if (s->kind == SPINDLE_SPAN_EMBEDDINGS) {
            memcpy(f->x + (size_t)row * d, s->embeddings,
                   (size_t)s->n * d * sizeof *f->x);
            f->any_span = true;
        } else {
            table_rows(m, f, s->tokens, s->n, row);
        }
        row += s->n;
    }
    return sees_ahead;
}
