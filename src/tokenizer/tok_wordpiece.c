/* Model dispatch (vocabulary loading shared by every model type) and the
 * WordPiece model (HF `models::wordpiece`: greedy longest-match-first with
 * a continuing-subword prefix, or a word-start one for llama.cpp's
 * phantom-space vocabulary; a word that cannot be covered becomes unk). */
#include <limits.h>
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define MAX_VOCAB (1 << 26)

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

bool sp_ids_push(sp_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t c = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, c * sizeof *v);
        if (!v) return false;
        ids->v = v;
        ids->cap = c;
    }
    ids->v[ids->n++] = id;
    return true;
}

bool sp_model_set_token(sp_model *m, int32_t id, const char *s, size_t n) {
    /* Each id once: the hash map borrows the stored text. */
    if (id < 0 || id >= m->n_tok || m->tok[id]) return false;
    char *c = malloc(n + 1);
    if (!c) return false;
    memcpy(c, s, n);
    c[n] = '\0';
    m->tok[id] = c;
    m->tok_len[id] = (uint32_t)n;
    return sp_strmap_put(&m->vocab, c, n, id);
}

static spindle_status set_token_error(const sp_model *m, int32_t id,
                                      spindle_error *err) {
    if (id >= 0 && id < m->n_tok && m->tok[id])
        return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: vocab id %d is used twice", id);
    return oom(err);
}

/* {"token": id, ...} */
static spindle_status load_vocab_fast(const sp_fast_model *f, sp_model *m,
                                      spindle_error *err) {
    int32_t max_id = -1;
    for (size_t i = 0; i < f->n_vocab; i++)
        if (f->id[i] > max_id) max_id = f->id[i];
    m->n_tok = max_id + 1;
    m->tok = calloc((size_t)m->n_tok + 1, sizeof *m->tok);
    m->tok_len = calloc((size_t)m->n_tok + 1, sizeof *m->tok_len);
    if (!m->tok || !m->tok_len) return oom(err);
    for (size_t i = 0; i < f->n_vocab; i++)
        if (!sp_model_set_token(m, f->id[i], f->arena.p + f->off[i], f->len[i]))
            return set_token_error(m, f->id[i], err);
    return SPINDLE_OK;
}

static spindle_status load_vocab_object(const cJSON *vocab, sp_model *m,
                                        spindle_error *err) {
    if (!cJSON_IsObject(vocab))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
    int32_t max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= MAX_VOCAB ||
            it->valuedouble != (double)(int32_t)it->valuedouble)
            return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: bad id for vocab entry '%.60s'",
                           it->string ? it->string : "");
        if ((int32_t)it->valuedouble > max_id) max_id = (int32_t)it->valuedouble;
    }
    m->n_tok = max_id + 1;
    m->tok = calloc((size_t)m->n_tok + 1, sizeof *m->tok);
    m->tok_len = calloc((size_t)m->n_tok + 1, sizeof *m->tok_len);
    if (!m->tok || !m->tok_len) return oom(err);
    cJSON_ArrayForEach(it, vocab) {
        if (!sp_model_set_token(m, (int32_t)it->valuedouble, it->string, strlen(it->string)))
            return set_token_error(m, (int32_t)it->valuedouble, err);
    }
    return SPINDLE_OK;
}

spindle_status sp_model_parse(const cJSON *j, const sp_fast_model *fast,
                              sp_model *m, spindle_error *err) {
    memset(m, 0, sizeof *m);
    m->unk_id = -1;
    if (!cJSON_IsObject(j)) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: no model");
    const char *t = sp_json_str(j, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(j, "vocab");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(j, "merges") ? "BPE"
              : cJSON_IsArray(vocab) ? "Unigram" : "WordPiece";
    if (!strcmp(t, "Unigram")) {
        m->type = SP_MODEL_UNIGRAM;
        return sp_unigram_parse(j, m, err);
    }
    spindle_status st = (fast && fast->have_vocab) ? load_vocab_fast(fast, m, err)
                                                   : load_vocab_object(vocab, m, err);
    if (st) return st;
    if (!strcmp(t, "BPE")) return sp_bpe_parse(j, fast, m, err);
    if (!strcmp(t, "WordPiece")) {
        m->type = SP_MODEL_WORDPIECE;
        const char *unk = sp_json_str(j, "unk_token");
        if (!unk) unk = "[UNK]";
        m->unk_id = sp_strmap_get(&m->vocab, unk, strlen(unk));
        const char *pre = sp_json_str(j, "continuing_subword_prefix");
        m->cont_prefix = strdup(pre ? pre : "##");
        if (!m->cont_prefix) return oom(err);
        m->max_chars = sp_json_int_clamped(j, "max_input_chars_per_word", 100, 0, INT_MAX);
        return SPINDLE_OK;
    }
    return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "tokenizer.json: unsupported model type '%s'", t);
}

void sp_model_free(sp_model *m) {
    if (m->type == SP_MODEL_BPE) sp_bpe_free(m);
    else {
        free(m->cont_prefix);
        free(m->word_prefix);
    }
    for (int32_t i = 0; m->tok && i < m->n_tok; i++) free(m->tok[i]);
    free(m->tok);
    free(m->tok_len);
    free(m->scores);
    sp_strmap_free(&m->vocab);
    memset(m, 0, sizeof *m);
}

spindle_status sp_model_tokenize(const sp_model *m, const char *s, size_t n,
                                 sp_ids *out, spindle_error *err) {
    switch (m->type) {
    case SP_MODEL_BPE: return sp_bpe_tokenize(m, s, n, out, err);
    case SP_MODEL_WORDPIECE: return sp_wordpiece_tokenize(m, s, n, out, err);
    case SP_MODEL_UNIGRAM: return sp_unigram_tokenize(m, s, n, out, err);
    }
    return sp_fail(err, SPINDLE_ERR_INTERNAL, "tokenizer: bad model");
}

static spindle_status push_unk(const sp_model *m, sp_ids *out, spindle_error *err) {
    if (m->unk_id < 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer: WordPiece needs an unk token that is in the vocab");
    return sp_ids_push(out, m->unk_id) ? SPINDLE_OK : oom(err);
}

spindle_status sp_wordpiece_tokenize(const sp_model *m, const char *s, size_t n,
                                     sp_ids *out, spindle_error *err) {
    if (sp_utf8_count(s, n) > (size_t)m->max_chars) return push_unk(m, out, err);
    const char *wp = m->word_prefix ? m->word_prefix : "";
    size_t mark = out->n, plen = strlen(m->cont_prefix), wlen = strlen(wp);
    sp_strbuf key = {0};
    size_t start = 0;
    while (start < n) {
        size_t end = n;
        int32_t found = -1;
        while (start < end) {
            key.len = 0;
            if (!(start > 0 ? sp_strbuf_add(&key, m->cont_prefix, plen) : sp_strbuf_add(&key, wp, wlen)) ||
                !sp_strbuf_add(&key, s + start, end - start)) {
                sp_strbuf_free(&key);
                return oom(err);
            }
            found = sp_strmap_get(&m->vocab, key.p, key.len);
            if (found >= 0) break;
            do end--; while (end > start && sp_utf8_is_continuation((unsigned char)s[end]));
        }
        if (found < 0) {
            sp_strbuf_free(&key);
            out->n = mark;
            return push_unk(m, out, err);
        }
        if (!sp_ids_push(out, found)) { sp_strbuf_free(&key); return oom(err); }
        start = end;
    }
    sp_strbuf_free(&key);
    return SPINDLE_OK;
}
