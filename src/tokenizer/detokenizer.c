/* Streaming detokenizer. Decoders are not prefix-stable token by token
 * (byte-level and byte-fallback tokens complete a character only later,
 * Metaspace/Strip treat the first token specially), so each push decodes a
 * short window of recent ids twice — the window's already-emitted prefix and
 * the whole window — and emits the difference once it is settled: the
 * window text extends its prefix and does not end in U+FFFD (an incomplete
 * character). The window always starts at a token whose prefix text is
 * non-empty, so first-token rules apply identically to both decodes. flush
 * decodes everything once and emits what is still held back, so the pieces
 * concatenate to exactly spindle_tokenizer_decode of all ids. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct spindle_detokenizer {
    const spindle_tokenizer *tok;
    bool skip_special;
    sp_ids ids;
    size_t prefix_at, read_at; /* window start; ids emitted up to here */
    char *prefix;              /* decode(ids[prefix_at..read_at]) */
    size_t prefix_len;
    sp_strbuf emitted;           /* everything emitted so far */
    char *piece;               /* last piece handed out */
    size_t piece_len;
    bool byte_runs;            /* the decoder has ByteFallback */
};

size_t spindle_detokenizer_piece_len(const spindle_detokenizer *d) {
    return d ? d->piece_len : 0;
}

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "detokenizer: out of memory");
}

static bool is_byte_token(const spindle_tokenizer *tok, int32_t id) {
    size_t n;
    const char *t = sp_tokenizer_token(tok, id, &n);
    return t && n == 6 && !memcmp(t, "<0x", 3) && t[5] == '>';
}

/* Ids the decode drops before its decoders run (not in the vocabulary, or
 * special while skipping them): a byte run continues across them. */
static bool dropped_by_decode(const spindle_detokenizer *d, int32_t id) {
    if (d->tok->gguf) return false;
    size_t n;
    if (!sp_tokenizer_token(d->tok, id, &n)) return true;
    const int32_t a = d->tok->added_of_id ? d->tok->added_of_id[id] : -1;
    return d->skip_special && a >= 0 && d->tok->added.v[a].special;
}

static bool uses_byte_fallback(const sp_dec *dec) {
    if (!dec) return false;
    if (dec->type == SP_DEC_BYTEFALLBACK) return true;
    for (int i = 0; i < dec->n_subs; i++)
        if (uses_byte_fallback(&dec->subs[i])) return true;
    return false;
}

spindle_status spindle_detokenizer_new(const spindle_tokenizer *tok,
                                       bool skip_special,
                                       spindle_detokenizer **out,
                                       spindle_error *err) {
    if (!tok || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "detokenizer_new: NULL argument");
    spindle_detokenizer *d = calloc(1, sizeof *d);
    if (!d) return oom(err);
    d->tok = tok;
    d->skip_special = skip_special;
    d->byte_runs = uses_byte_fallback(tok->decoder);
    d->prefix = calloc(1, 1);
    if (!d->prefix || !sp_strbuf_reserve(&d->emitted, 0)) {
        spindle_detokenizer_free(d);
        return oom(err);
    }
    *out = d;
    return SPINDLE_OK;
}

void spindle_detokenizer_free(spindle_detokenizer *d) {
    if (!d) return;
    free(d->ids.v);
    free(d->prefix);
    sp_strbuf_free(&d->emitted);
    free(d->piece);
    free(d);
}

static spindle_status set_piece(spindle_detokenizer *d, const char *s, size_t n,
                                const char **piece, spindle_error *err) {
    char *p = malloc(n + 1);
    if (!p) return oom(err);
    memcpy(p, s, n);
    p[n] = '\0';
    free(d->piece);
    d->piece = p;
    d->piece_len = n;
    *piece = p;
    if (!sp_strbuf_add(&d->emitted, s, n)) return oom(err);
    return SPINDLE_OK;
}

static bool ends_with_replacement(const char *s, size_t n) {
    return n >= 3 && !memcmp(s + n - 3, "\xEF\xBF\xBD", 3);
}

spindle_status spindle_detokenizer_push(spindle_detokenizer *d, int32_t id,
                                        const char **piece, spindle_error *err) {
    if (!d || !piece) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "detokenizer_push: NULL argument");
    *piece = "";
    d->piece_len = 0;
    if (!sp_ids_push(&d->ids, id)) return oom(err);
    /* ByteFallback judges a whole run of <0xXX> tokens at once (invalid
     * runs become one U+FFFD per byte), so nothing is final inside a run. */
    if (d->byte_runs && (is_byte_token(d->tok, id) || dropped_by_decode(d, id)))
        return SPINDLE_OK;
    char *w = NULL;
    size_t wl = 0;
    spindle_status st = spindle_tokenizer_decode(d->tok, d->ids.v + d->prefix_at,
                                                 d->ids.n - d->prefix_at,
                                                 d->skip_special, &w, &wl, err);
    if (st) return st;
    if (wl <= d->prefix_len || memcmp(w, d->prefix, d->prefix_len) != 0 ||
        ends_with_replacement(w, wl)) {
        free(w);
        return SPINDLE_OK;
    }
    st = set_piece(d, w + d->prefix_len, wl - d->prefix_len, piece, err);
    if (st) { free(w); return st; }
    /* Move the window on when the new tail decodes to something on its
     * own; otherwise widen it (an empty prefix would let first-token rules
     * bite into later text). */
    char *tail = NULL;
    size_t tl = 0;
    st = spindle_tokenizer_decode(d->tok, d->ids.v + d->read_at, d->ids.n - d->read_at,
                                  d->skip_special, &tail, &tl, err);
    if (st) { free(w); return st; }
    if (tl > 0 && d->read_at > 0) {
        free(d->prefix);
        free(w);
        d->prefix = tail;
        d->prefix_len = tl;
        d->prefix_at = d->read_at;
    } else {
        free(tail);
        free(d->prefix);
        d->prefix = w;
        d->prefix_len = wl;
    }
    d->read_at = d->ids.n;
    return SPINDLE_OK;
}

spindle_status spindle_detokenizer_flush(spindle_detokenizer *d, const char **piece,
                                         spindle_error *err) {
    if (!d || !piece) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "detokenizer_flush: NULL argument");
    *piece = "";
    d->piece_len = 0;
    char *full = NULL;
    size_t fl = 0;
    spindle_status st = spindle_tokenizer_decode(d->tok, d->ids.v, d->ids.n, d->skip_special,
                                                 &full, &fl, err);
    if (st) return st;
    size_t e = d->emitted.len;
    if (fl < e || memcmp(full, d->emitted.p, e) != 0) {
        free(full);
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "detokenizer: streamed text diverged from the full decode");
    }
    st = set_piece(d, full + e, fl - e, piece, err);
    free(full);
    if (st) return st;
    /* The stream is complete: start a fresh one. */
    d->ids.n = 0;
    d->prefix_at = d->read_at = 0;
    d->prefix[0] = '\0';
    d->prefix_len = 0;
    d->emitted.len = 0;
    return SPINDLE_OK;
}
