/* llama_tokenize for GGUF vocabularies: special-token partition (every
 * CONTROL / USER_DEFINED / UNKNOWN token, longest first, each one splitting
 * all remaining text fragments at its occurrences — parse_special=true),
 * then per text fragment either the SentencePiece-style merge ("llama":
 * spaces escaped to U+2581, a space prefixed after BOS/special tokens when
 * add_space_prefix, adjacent symbols merged by the highest score of the
 * merged token, leftmost on ties, unknown characters as <0xXX> bytes) or the
 * byte-level BPE ("gpt2": llama.cpp regex split, GPT-2 byte mapping, merges
 * by rank via the shared sp_bpe model) or WordPiece ("bert": the
 * tokenizer.json pipeline's BertNormalizer, BertPreTokenizer and WordPiece,
 * which HF tokenizers' ids pin down; llama.cpp's own WPM differs in keeping
 * accents' combining marks and in having no max_input_chars_per_word), and
 * [CLS] ... [SEP] around it all. */
#include "tokenizer/tok_gguf.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

typedef struct frag {
    size_t off, len;
    int32_t id; /* >= 0: a special token */
} frag;

typedef struct frags {
    frag *v;
    size_t n, cap;
} frags;

static bool frag_push(frags *f, size_t off, size_t len, int32_t id) {
    if (f->n == f->cap) {
        size_t c = f->cap ? f->cap * 2 : 16;
        frag *v = realloc(f->v, c * sizeof *v);
        if (!v) return false;
        f->v = v;
        f->cap = c;
    }
    f->v[f->n++] = (frag){off, len, id};
    return true;
}

static bool partition(const spindle_tokenizer *tok, const char *text, size_t len,
                      frags *out) {
    const sp_gguf_vocab *v = tok->gguf;
    frags tmp = {0};
    bool ok = len == 0 || frag_push(out, 0, len, -1);
    for (size_t k = 0; k < v->n_special && ok; k++) {
        int32_t id = v->special[k];
        const char *t = tok->model.tok[id];
        size_t tl = tok->model.tok_len[id];
        bool any = false;
        for (size_t i = 0; i < out->n && !any; i++)
            any = out->v[i].id < 0 && out->v[i].len >= tl && memmem(text + out->v[i].off, out->v[i].len, t, tl);
        if (!any) continue;
        tmp.n = 0;
        for (size_t i = 0; i < out->n && ok; i++) {
            frag f = out->v[i];
            if (f.id >= 0) { ok = frag_push(&tmp, f.off, f.len, f.id); continue; }
            size_t at = f.off, end = f.off + f.len;
            while (ok && at < end) {
                const char *hit = memmem(text + at, end - at, t, tl);
                if (!hit) break;
                size_t h = (size_t)(hit - text);
                ok = (h == at || frag_push(&tmp, at, h - at, -1)) && frag_push(&tmp, h, tl, id);
                at = h + tl;
            }
            if (ok && at < end) ok = frag_push(&tmp, at, end - at, -1);
        }
        frags sw = *out; *out = tmp; tmp = sw;
    }
    free(tmp.v);
    return ok;
}

/* ------------------------------------------------------------------ SPM */

typedef struct ssym {
    int32_t prev, next;
    size_t off, n;
} ssym;

typedef struct bigram {
    double score;
    int32_t left, right;
    size_t size;
} bigram;

/* Max-heap: higher score first, then the leftmost. */
static bool bg_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct bheap {
    bigram *v;
    size_t n, cap;
} bheap;

static bool bh_push(bheap *h, bigram e) {
    if (h->n == h->cap) {
        size_t c = h->cap ? h->cap * 2 : 64;
        bigram *v = realloc(h->v, c * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = c;
    }
    size_t i = h->n++;
    while (i > 0 && bg_before(&e, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = e;
    return true;
}

static bigram bh_pop(bheap *h) {
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bigram *best = &last;
        if (l < h->n && bg_before(&h->v[l], best)) { m = l; best = &h->v[l]; }
        if (r < h->n && bg_before(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static bool try_bigram(const sp_model *m, const char *s, const ssym *sy, int32_t l,
                       int32_t r, bheap *h) {
    if (l < 0 || r < 0) return true;
    size_t size = sy[l].n + sy[r].n;
    int32_t id = sp_strmap_get(&m->vocab, s + sy[l].off, size);
    if (id < 0) return true;
    return bh_push(h, (bigram){m->scores[id], l, r, size});
}

static bool spm_tokenize(const spindle_tokenizer *tok, const char *s, size_t n, sp_ids *out) {
    const sp_model *m = &tok->model;
    ssym *sy = malloc((n + 1) * sizeof *sy);
    bheap h = {0};
    bool ok = sy != NULL;
    int32_t cnt = 0;
    for (size_t off = 0; ok && off < n; cnt++) {
        size_t l = sp_utf8_lead_len((unsigned char)s[off]);
        if (l > n - off) l = n - off;
        sy[cnt] = (ssym){cnt - 1, off + l == n ? -1 : cnt + 1, off, l};
        off += l;
    }
    for (int32_t i = 1; ok && i < cnt; i++) ok = try_bigram(m, s, sy, i - 1, i, &h);
    while (ok && h.n) {
        bigram b = bh_pop(&h);
        ssym *L = &sy[b.left], *R = &sy[b.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != b.size) continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) sy[R->next].prev = b.left;
        ok = try_bigram(m, s, sy, L->prev, b.left, &h) && try_bigram(m, s, sy, b.left, L->next, &h);
    }
    /* Merged symbols are tokens by construction; a single character that is
     * not becomes byte tokens. */
    for (int32_t i = 0; ok && cnt && i != -1; i = sy[i].next) {
        int32_t id = sp_strmap_get(&m->vocab, s + sy[i].off, sy[i].n);
        if (id >= 0) { ok = sp_ids_push(out, id); continue; }
        for (size_t k = 0; k < sy[i].n && ok; k++) {
            int32_t bt = tok->gguf->byte_tok[(unsigned char)s[sy[i].off + k]];
            if (bt >= 0) ok = sp_ids_push(out, bt);
        }
    }
    free(sy);
    free(h.v);
    return ok;
}

static bool spm_fragment(const spindle_tokenizer *tok, const char *s, size_t n,
                         bool space_prefix, sp_strbuf *buf, sp_ids *out) {
    buf->len = 0;
    bool ok = !space_prefix || sp_strbuf_add(buf, "\xE2\x96\x81", 3);
    for (size_t i = 0; i < n && ok; i++)
        ok = s[i] == ' ' ? sp_strbuf_add(buf, "\xE2\x96\x81", 3) : sp_strbuf_add(buf, s + i, 1);
    return ok && spm_tokenize(tok, buf->p, buf->len, out);
}

/* ------------------------------------------------------------------ BPE */

static spindle_status bpe_fragment(const spindle_tokenizer *tok, const char *s, size_t n,
                                   sp_gg_offsets *words, sp_strbuf *buf, sp_ids *out,
                                   spindle_error *err) {
    const sp_gguf_vocab *v = tok->gguf;
    spindle_status st = sp_gg_split(&v->split, s, n, words, err);
    size_t at = 0;
    for (size_t w = 0; w < words->n && !st; w++) {
        buf->len = 0;
        for (size_t i = 0; i < words->v[w]; i++)
            if (!sp_strbuf_add_cp(buf, v->byte_cp[(unsigned char)s[at + i]])) return oom(err);
        st = sp_bpe_tokenize(&tok->model, buf->p, buf->len, out, err);
        at += words->v[w];
    }
    return st;
}

/* ------------------------------------------------------------ WordPiece */

static spindle_status wpm_fragment(const spindle_tokenizer *tok, const char *s, size_t n,
                                   sp_strbuf *buf, sp_pieces *words, sp_pieces *tmp,
                                   sp_ids *out, spindle_error *err) {
    const sp_gguf_vocab *v = tok->gguf;
    buf->len = 0;
    sp_pieces_reset(words);
    spindle_status st = sp_norm_apply(&v->wpm_norm, s, n, buf, err);
    if (!st && !sp_pieces_push(words, buf->p ? buf->p : "", buf->len, -1, true)) st = oom(err);
    if (!st) st = sp_pretok_apply(&v->wpm_pre, words, tmp, err);
    for (size_t i = 0; i < words->n && !st; i++)
        if (words->v[i].len)
            st = sp_wordpiece_tokenize(&tok->model, words->text.p + words->v[i].off,
                                       words->v[i].len, out, err);
    return st;
}

spindle_status sp_gguf_encode(const spindle_tokenizer *tok, const char *text,
                              size_t len, bool add_special, sp_ids *out,
                              spindle_error *err) {
    const sp_gguf_vocab *v = tok->gguf;
    frags fr = {0};
    sp_strbuf buf = {0};
    sp_gg_offsets words = {0};
    sp_pieces pieces = {0}, tmp = {0};
    spindle_status st = partition(tok, text, len, &fr) ? SPINDLE_OK : oom(err);
    if (!st && add_special && v->add_bos && !sp_ids_push(out, v->bos)) st = oom(err);
    bool prev_special = true; /* SPM: a space prefix at the start */
    for (size_t i = 0; i < fr.n && !st; i++) {
        const frag *f = &fr.v[i];
        if (f->id >= 0) {
            if (!sp_ids_push(out, f->id)) st = oom(err);
            prev_special = true;
        } else if (v->spm) {
            if (!spm_fragment(tok, text + f->off, f->len, v->add_space_prefix && prev_special, &buf, out))
                st = oom(err);
            prev_special = false;
        } else if (v->wpm) {
            st = wpm_fragment(tok, text + f->off, f->len, &buf, &pieces, &tmp, out, err);
        } else {
            st = bpe_fragment(tok, text + f->off, f->len, &words, &buf, out, err);
        }
    }
    if (!st && add_special && v->add_eos && !sp_ids_push(out, v->eos)) st = oom(err);
    if (!st && add_special && v->add_sep && !sp_ids_push(out, v->sep)) st = oom(err);
    sp_pieces_free(&pieces);
    sp_pieces_free(&tmp);
    free(fr.v);
    free(words.v);
    sp_strbuf_free(&buf);
    return st;
}
