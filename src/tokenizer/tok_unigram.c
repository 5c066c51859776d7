/* The Unigram model (HF `models::unigram`, SentencePiece unigram): Viterbi
 * over all vocabulary pieces, unknown characters scored min_score - 10,
 * consecutive unknowns fused, optional byte fallback. Ties keep the first
 * (shortest) candidate, as HF's encode_optimized does. */
#include "tokenizer/tok_internal.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

spindle_status sp_unigram_parse(const cJSON *j, sp_model *m, spindle_error *err) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(j, "vocab");
    if (!cJSON_IsArray(vocab)) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: Unigram vocab is not a list");
    int n = cJSON_GetArraySize(vocab);
    m->n_tok = n;
    m->tok = calloc((size_t)n + 1, sizeof *m->tok);
    m->tok_len = calloc((size_t)n + 1, sizeof *m->tok_len);
    m->scores = calloc((size_t)n + 1, sizeof *m->scores);
    if (!m->tok || !m->tok_len || !m->scores) return oom(err);
    m->min_score = DBL_MAX;
    int32_t id = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        const cJSON *p = cJSON_GetArrayItem(it, 0), *s = cJSON_GetArrayItem(it, 1);
        if (!cJSON_IsString(p) || !cJSON_IsNumber(s))
            return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: Unigram entry %d is malformed", id);
        if (!sp_model_set_token(m, id, p->valuestring, strlen(p->valuestring))) return oom(err);
        m->scores[id] = s->valuedouble;
        if (s->valuedouble < m->min_score) m->min_score = s->valuedouble;
        if ((int)m->tok_len[id] > m->max_chars) m->max_chars = (int)m->tok_len[id];
        id++;
    }
    m->unk_id = sp_json_int_clamped(j, "unk_id", -1, -1, n);
    if (m->unk_id >= n) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: Unigram unk_id out of range");
    m->byte_fallback = sp_json_bool(j, "byte_fallback", false);
    m->fuse_unk = true;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = sp_strmap_get(&m->vocab, name, 6);
    }
    return SPINDLE_OK;
}

typedef struct node {
    double score;
    long start; /* -1: unreached */
    int32_t id;
} node;

static spindle_status emit(const sp_model *m, const char *s, size_t n,
                           bool is_unk, sp_ids *out, spindle_error *err) {
    int32_t id = is_unk ? -1 : sp_strmap_get(&m->vocab, s, n);
    if (id >= 0) return sp_ids_push(out, id) ? SPINDLE_OK : oom(err);
    if (m->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < n; i++) all = all && m->byte_ids[(unsigned char)s[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < n; i++)
                if (!sp_ids_push(out, m->byte_ids[(unsigned char)s[i]])) return oom(err);
            return SPINDLE_OK;
        }
    }
    if (m->unk_id < 0) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer: Unigram text needs an unk token");
    return sp_ids_push(out, m->unk_id) ? SPINDLE_OK : oom(err);
}

spindle_status sp_unigram_tokenize(const sp_model *m, const char *s, size_t n,
                                   sp_ids *out, spindle_error *err) {
    if (n == 0) return SPINDLE_OK;
    node *best = malloc((n + 1) * sizeof *best);
    if (!best) return oom(err);
    for (size_t i = 0; i <= n; i++) best[i] = (node){0, -1, -1};
    best[0].start = 0;
    double unk_score = m->min_score - 10.0;
    for (size_t at = 0; at < n;) {
        int cl;
        sp_utf8_next(s + at, n - at, &cl);
        double base = best[at].score;
        bool single = false;
        for (size_t e = at + (size_t)cl; e <= n && e - at <= (size_t)m->max_chars;) {
            int32_t id = sp_strmap_get(&m->vocab, s + at, e - at);
            if (id >= 0) {
                double c = base + m->scores[id];
                if (best[e].start < 0 || c > best[e].score) best[e] = (node){c, (long)at, id};
                if (e - at == (size_t)cl) single = true;
            }
            if (e == n) break;
            int l;
            sp_utf8_next(s + e, n - e, &l);
            e += (size_t)l;
        }
        if (!single) {
            size_t e = at + (size_t)cl;
            double c = base + unk_score;
            if (best[e].start < 0 || c > best[e].score) best[e] = (node){c, (long)at, m->unk_id};
        }
        at += (size_t)cl;
    }
    /* Backtrack into (start, end, unk) segments, fusing unknown runs. */
    size_t cnt = 0, *seg = malloc((n + 1) * 2 * sizeof *seg);
    bool *unk = malloc((n + 1) * sizeof *unk);
    spindle_status st = SPINDLE_OK;
    if (!seg || !unk) st = oom(err);
    for (size_t e = n; !st && e > 0;) {
        size_t a = (size_t)best[e].start;
        bool u = best[e].id == m->unk_id && m->unk_id >= 0;
        if (u && cnt > 0 && unk[cnt - 1]) seg[2 * (cnt - 1)] = a;
        else {
            seg[2 * cnt] = a;
            seg[2 * cnt + 1] = e;
            unk[cnt++] = u;
        }
        e = a;
    }
    for (size_t k = cnt; !st && k-- > 0;)
        st = emit(m, s + seg[2 * k], seg[2 * k + 1] - seg[2 * k], false, out, err);
    free(seg);
    free(unk);
    free(best);
    return st;
}
