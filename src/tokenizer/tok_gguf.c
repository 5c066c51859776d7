/* Building a tokenizer from GGUF metadata (tokenizer.ggml.*) the way
 * llama.cpp's llama_vocab::load does, and llama_detokenize. The vocabulary
 * goes into the ordinary sp_model (ids, texts, BPE merges, SPM scores) so
 * the id/text accessors work unchanged; bos/eos texts and the chat template
 * go into a synthesized tokenizer_config object.
 *
 * Defaults follow llama.cpp: "llama" adds BOS and a space prefix; "gpt2"
 * takes ignore_merges / clean_spaces / add_bos from its `pre` entry; "bert"
 * wraps the text in [CLS] (its BOS) ... [SEP]; the file's
 * tokenizer.ggml.add_bos_token, add_eos_token, add_sep_token,
 * add_space_prefix and *_token_id keys override them. Not reproduced: the
 * LSTRIP/RSTRIP token attributes llama.cpp sets by model name (phi-3,
 * jina, modern-bert). */
#include "tokenizer/tok_gguf.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/gguf.h"
#include "base/error.h"
#include "base/mapped_file.h"

#define MAX_TOKENS (1 << 24)

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

void sp_gguf_vocab_free(sp_gguf_vocab *v) {
    if (!v) return;
    free(v->attr);
    free(v->special);
    sp_gg_splitter_free(&v->split);
}

/* Optional scalar keys: absent is fine, a wrong type is not. */
static spindle_status opt_bool(const sp_gguf *g, const char *key, bool *out, spindle_error *err) {
    return sp_gguf_find(g, key) ? sp_gguf_get_bool(g, key, out, err) : SPINDLE_OK;
}

static spindle_status opt_id(const sp_gguf *g, const char *key, int32_t n, int32_t *out,
                             spindle_error *err) {
    if (!sp_gguf_find(g, key)) return SPINDLE_OK;
    uint32_t v;
    spindle_status st = sp_gguf_get_u32(g, key, &v, err);
    if (!st && v < (uint32_t)n) *out = (int32_t)v; /* llama.cpp ignores bad ids */
    return st;
}

/* Longest first; equal lengths by id (llama.cpp's std::sort leaves their
 * order unspecified). */
static int by_len_desc(const void *a, const void *b, void *model) {
    const sp_model *m = model;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = m->tok_len[x], ly = m->tok_len[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static spindle_status load_tokens(const sp_gguf *g, sp_model *m, int32_t *n_out,
                                  spindle_error *err) {
    const sp_gguf_value *arr;
    spindle_status st = sp_gguf_get_array(g, "tokenizer.ggml.tokens", SP_GGUF_STRING, &arr, err);
    if (st) return st;
    uint64_t n = sp_gguf_array_count(arr);
    if (n == 0 || n > MAX_TOKENS)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries",
                       sp_gguf_path(g), (unsigned long long)n);
    m->n_tok = (int32_t)n;
    m->tok = calloc(n + 1, sizeof *m->tok);
    m->tok_len = calloc(n + 1, sizeof *m->tok_len);
    if (!m->tok || !m->tok_len) return oom(err);
    for (uint64_t i = 0; i < n; i++) {
        sp_gguf_str s;
        char empty[32];
        if (!sp_gguf_array_str(arr, i, &s)) return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: bad token %llu", sp_gguf_path(g), (unsigned long long)i);
        if (s.len == 0) { /* llama.cpp renames empty tokens */
            snprintf(empty, sizeof empty, "[EMPTY_%llu]", (unsigned long long)i);
            s.ptr = empty;
            s.len = strlen(empty);
        }
        if (!sp_model_set_token(m, (int32_t)i, s.ptr, s.len)) return oom(err);
    }
    *n_out = (int32_t)n;
    return SPINDLE_OK;
}

/* A per-token array (token_type, scores) of at least n entries. */
static spindle_status per_token(const sp_gguf *g, const char *key, int32_t n, bool f32,
                                void **out, spindle_error *err) {
    *out = NULL;
    const sp_gguf_value *arr;
    if (!sp_gguf_find(g, key)) return SPINDLE_OK;
    spindle_status st = sp_gguf_get_array(g, key, SP_GGUF_TYPE_COUNT, &arr, err);
    if (st) return st;
    uint64_t cnt = sp_gguf_array_count(arr);
    if (cnt < (uint64_t)n || cnt > MAX_TOKENS)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: %s has %llu entries for %d tokens",
                       sp_gguf_path(g), key, (unsigned long long)cnt, n);
    void *buf = malloc(cnt * 4);
    if (!buf) return oom(err);
    st = f32 ? sp_gguf_array_to_f32(g, key, buf, cnt, err) : sp_gguf_array_to_i32(g, key, buf, cnt, err);
    if (st) { free(buf); return st; }
    *out = buf;
    return SPINDLE_OK;
}

static spindle_status load_merges(const sp_gguf *g, sp_model *m, spindle_error *err) {
    const sp_gguf_value *arr;
    spindle_status st = sp_gguf_get_array(g, "tokenizer.ggml.merges", SP_GGUF_STRING, &arr, err);
    if (st) return st;
    uint64_t n = sp_gguf_array_count(arr);
    if (n > MAX_TOKENS) return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: too many merges", sp_gguf_path(g));
    if ((st = sp_bpe_prepare(m, (size_t)n, err))) return st;
    sp_strbuf joined = {0};
    for (uint64_t i = 0; i < n; i++) {
        sp_gguf_str s;
        if (!sp_gguf_array_str(arr, i, &s)) { sp_strbuf_free(&joined); return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: bad merge %llu", sp_gguf_path(g), (unsigned long long)i); }
        /* "a b", split at the first space after the first byte */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) continue;
        size_t al = (size_t)(sp - s.ptr), bl = s.len - al - 1;
        int32_t a = sp_strmap_get(&m->vocab, s.ptr, al), b = sp_strmap_get(&m->vocab, sp + 1, bl);
        joined.len = 0;
        if (!sp_strbuf_add(&joined, s.ptr, al) || !sp_strbuf_add(&joined, sp + 1, bl)) { sp_strbuf_free(&joined); return oom(err); }
        int32_t c = sp_strmap_get(&m->vocab, joined.p, joined.len);
        /* A merge whose parts or result are not tokens cannot yield a
         * token id; converted vocabularies have none. */
        if (a >= 0 && b >= 0 && c >= 0) sp_bpe_merge_add_first(m, a, b, (uint32_t)i, c);
    }
    sp_strbuf_free(&joined);
    return SPINDLE_OK;
}

static void byte_tables(sp_gguf_vocab *v, const sp_model *m) {
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        v->byte_cp[b] = (uint16_t)(self ? b : 256 + extra++);
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        v->byte_tok[b] = sp_strmap_get(&m->vocab, name, 6);
        if (v->byte_tok[b] < 0) {
            char c = (char)b;
            v->byte_tok[b] = sp_strmap_get(&m->vocab, &c, 1);
        }
    }
}

/* tokenizer_config stand-in: bos/eos/unk/pad texts and chat templates.
 * Token texts only for ids the file names: llama.cpp's built-in defaults
 * (e.g. id 11 for "gpt2" vocabularies) are no template's bos_token. */
static spindle_status make_config(spindle_tokenizer *tok, const sp_gguf *g, int32_t unk,
                                  int32_t pad, spindle_error *err) {
    if (!(tok->config = cJSON_CreateObject())) return oom(err);
    const char *keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const char *gkeys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                           "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    int32_t ids[] = {tok->bos_id, tok->eos_id, unk, pad};
    for (int i = 0; i < 4; i++) {
        size_t len;
        const char *t = ids[i] >= 0 && sp_gguf_find(g, gkeys[i]) ? sp_tokenizer_token(tok, ids[i], &len) : NULL;
        if (t && !cJSON_AddStringToObject(tok->config, keys[i], t)) return oom(err);
    }
    /* tokenizer.chat_template, and named ones as tokenizer.chat_template.NAME */
    cJSON *list = cJSON_CreateArray();
    if (!list) return oom(err);
    cJSON_AddItemToObject(tok->config, "chat_template", list);
    for (size_t i = 0; i < sp_gguf_kv_count(g); i++) {
        const char *key;
        const sp_gguf_value *v = sp_gguf_kv_at(g, i, &key);
        sp_gguf_str s;
        if (!v || strncmp(key, "tokenizer.chat_template", 23) || (key[23] && key[23] != '.') ||
            !sp_gguf_value_str(v, &s))
            continue;
        char *text = strndup(s.ptr, s.len);
        cJSON *e = cJSON_CreateObject();
        if (!text || !e || !cJSON_AddStringToObject(e, "name", key[23] ? key + 24 : "default") ||
            !cJSON_AddStringToObject(e, "template", text)) {
            free(text);
            cJSON_Delete(e);
            return oom(err);
        }
        free(text);
        cJSON_AddItemToArray(list, e);
    }
    return SPINDLE_OK;
}

/* llama.cpp's by-text attribute fix-ups (llama_vocab::impl::load): these
 * decide which tokens are matched in text and hidden when decoding. */
static int32_t text_id(const sp_model *m, const char *t) {
    return sp_strmap_get(&m->vocab, t, strlen(t));
}

static void attr_fixups(sp_gguf_vocab *v, const sp_model *m, const sp_gguf *g) {
    /* FIM tokens, when the file does not name them: the first one found of
     * each group becomes CONTROL. */
    static const char *const fim[6][11] = {
        {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id", "<|fim_prefix|>",
         "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
         "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"},
        {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id", "<|fim_suffix|>",
         "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>",
         "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"},
        {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id", "<|fim_middle|>",
         "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
         "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"},
        {"tokenizer.ggml.fim_pad_token_id", NULL, "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
        {"tokenizer.ggml.fim_rep_token_id", NULL, "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
         "<reponame>"},
        {"tokenizer.ggml.fim_sep_token_id", NULL, "<|file_sep|>"},
    };
    for (int gi = 0; gi < 6; gi++) {
        if (sp_gguf_find(g, fim[gi][0]) || (fim[gi][1] && sp_gguf_find(g, fim[gi][1]))) continue;
        /* llama.cpp takes the first in hash-map order; here the lowest id */
        int32_t best = -1;
        for (int k = 2; k < 11 && fim[gi][k]; k++) {
            int32_t id = text_id(m, fim[gi][k]);
            if (id >= 0 && (best < 0 || id < best)) best = id;
        }
        if (best >= 0) v->attr[best] |= SP_GA_CONTROL;
    }
    /* end-of-generation texts are always CONTROL */
    static const char *const eog[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "[e~["};
    for (size_t i = 0; i < sizeof eog / sizeof eog[0]; i++) {
        int32_t id = text_id(m, eog[i]);
        if (id >= 0) v->attr[id] |= SP_GA_CONTROL;
    }
    /* gpt-oss: always rendered */
    static const char *const user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < 4; i++) {
        int32_t id = text_id(m, user[i]);
        if (id >= 0) v->attr[id] = SP_GA_USER_DEFINED;
    }
    /* o200k_harmony / solar-open: <|end|> is not end-of-generation */
    int32_t end = text_id(m, "<|end|>");
    bool ret = text_id(m, "<|return|>") >= 0, flush = text_id(m, "<|flush|>") >= 0;
    bool call = text_id(m, "<|call|>") >= 0 || text_id(m, "<|calls|>") >= 0;
    if (end >= 0 && call && (ret || flush)) v->attr[end] = SP_GA_USER_DEFINED;
    /* gemma4 / plamo: a normal </s> */
    int32_t s = text_id(m, "</s>");
    if (s >= 0 && text_id(m, "<|tool_response>") >= 0) v->attr[s] = SP_GA_NORMAL;
}

/* "bert": llama.cpp's WPM defaults ([CLS] 101 as BOS, [SEP] 102 appended,
 * [UNK] 100, decoding with clean_spaces) and HF's BERT pipeline. The file
 * records neither do_lower_case nor max_input_chars_per_word: HF's
 * defaults hold (uncased, 100), as llama.cpp always lowercases. The vocabulary keeps llama.cpp's texts
 * ("\u2581word" starts a word, "##piece" became "piece"), so WordPiece
 * looks words up with a word-start prefix and no continuing one. */
static spindle_status wpm_setup(spindle_tokenizer *tok, int32_t *unk, spindle_error *err) {
    sp_gguf_vocab *v = tok->gguf;
    sp_model *m = &tok->model;
    m->type = SP_MODEL_WORDPIECE;
    m->cont_prefix = strdup("");
    m->word_prefix = strdup("\xE2\x96\x81");
    if (!m->cont_prefix || !m->word_prefix) return oom(err);
    m->max_chars = 100;
    v->wpm_norm = (sp_norm){.type = SP_NORM_BERT, .clean = true, .chinese = true,
                            .accents = true, .lower = true};
    v->wpm_pre = (sp_pretok){.type = SP_PRE_BERT};
    v->add_bos = v->add_sep = v->clean_spaces = true;
    tok->bos_id = 101;
    tok->eos_id = -1;
    *unk = 100;
    v->sep = 102;
    return SPINDLE_OK;
}

static spindle_status build(spindle_tokenizer *tok, const sp_gguf *g, spindle_error *err) {
    sp_gguf_vocab *v = tok->gguf;
    sp_model *m = &tok->model;
    sp_gguf_str model, pre = {"default", 7};
    spindle_status st = sp_gguf_get_string(g, "tokenizer.ggml.model", &model, err);
    if (st) return st;
    bool gpt2 = model.len == 4 && !memcmp(model.ptr, "gpt2", 4);
    v->spm = model.len == 5 && !memcmp(model.ptr, "llama", 5);
    v->wpm = model.len == 4 && !memcmp(model.ptr, "bert", 4);
    if (!gpt2 && !v->spm && !v->wpm)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "%s: tokenizer model '%.*s' is not supported (gpt2, "
                       "llama and bert are; token ids need no tokenizer)",
                       sp_gguf_path(g), (int)(model.len > 40 ? 40 : model.len), model.ptr);
    if (sp_gguf_find(g, "tokenizer.ggml.pre") && (st = sp_gguf_get_string(g, "tokenizer.ggml.pre", &pre, err)))
        return st;
    m->unk_id = -1;
    int32_t n = 0;
    if ((st = load_tokens(g, m, &n, err))) return st;
    int32_t *types = NULL;
    float *scores = NULL;
    if ((st = per_token(g, "tokenizer.ggml.token_type", n, false, (void **)&types, err))) return st;
    if (!(v->attr = malloc((size_t)n))) { free(types); return oom(err); }
    for (int32_t i = 0; i < n; i++) {
        /* token types 1..6: normal, unknown, control, user-defined, unused,
         * byte; anything else is undefined (no attribute) */
        static const uint8_t of_type[7] = {0, SP_GA_NORMAL, SP_GA_UNKNOWN, SP_GA_CONTROL,
                                           SP_GA_USER_DEFINED, SP_GA_UNUSED, SP_GA_BYTE};
        int32_t t = types ? types[i] : 1;
        v->attr[i] = t >= 0 && t <= 6 ? of_type[t] : 0;
    }
    free(types);
    int32_t unk = -1, pad = -1;
    if (v->spm) {
        if ((st = per_token(g, "tokenizer.ggml.scores", n, true, (void **)&scores, err))) return st;
        m->type = SP_MODEL_UNIGRAM; /* only for sp_model_free: scores, no merges */
        if (!(m->scores = calloc((size_t)n, sizeof *m->scores))) { free(scores); return oom(err); }
        for (int32_t i = 0; scores && i < n; i++) m->scores[i] = scores[i];
        free(scores);
        v->add_space_prefix = true;
        v->add_bos = true;
        tok->bos_id = 1; tok->eos_id = 2; unk = 0;
    } else if (v->wpm) {
        if ((st = wpm_setup(tok, &unk, err))) return st;
    } else {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(pre.len < 63 ? pre.len : 63), pre.ptr);
        if ((st = sp_gg_splitter_init(name[0] ? name : "default", &v->split, err))) return st;
        if ((st = load_merges(g, m, err))) return st;
        m->ignore_merges = v->split.ignore_merges;
        for (int b = 0; b < 256; b++) m->byte_ids[b] = -1;
        v->clean_spaces = v->split.clean_spaces;
        v->add_bos = v->split.add_bos;
        tok->bos_id = tok->eos_id = 11;
    }
    /* defaults outside the vocabulary are disabled, as llama.cpp does */
    if (tok->bos_id >= n) tok->bos_id = -1;
    if (tok->eos_id >= n) tok->eos_id = -1;
    if (unk >= n) unk = -1;
    if (v->sep >= n) v->sep = -1;
    byte_tables(v, m);
    /* an older converter named [CLS] cls_token_id rather than BOS */
    const char *bos_key = !sp_gguf_find(g, "tokenizer.ggml.bos_token_id") && v->wpm
                          ? "tokenizer.ggml.cls_token_id" : "tokenizer.ggml.bos_token_id";
    if ((st = opt_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)) ||
        (st = opt_id(g, bos_key, n, &tok->bos_id, err)) ||
        (st = opt_id(g, "tokenizer.ggml.seperator_token_id", n, &v->sep, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_sep_token", &v->add_sep, err)) ||
        (st = opt_id(g, "tokenizer.ggml.eos_token_id", n, &tok->eos_id, err)) ||
        (st = opt_id(g, "tokenizer.ggml.unknown_token_id", n, &unk, err)) ||
        (st = opt_id(g, "tokenizer.ggml.padding_token_id", n, &pad, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err)))
        return st;
    if ((v->add_bos && tok->bos_id < 0) || (v->add_eos && tok->eos_id < 0) ||
        (v->wpm && v->add_sep && v->sep < 0))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: adds a BOS/EOS/SEP token it does not define", sp_gguf_path(g));
    if (v->wpm) m->unk_id = unk;
    v->bos = tok->bos_id;
    v->eos = tok->eos_id;
    attr_fixups(v, m, g);
    /* Tokens matched in the text before the model runs. */
    if (!(v->special = malloc(((size_t)n + 1) * sizeof *v->special))) return oom(err);
    for (int32_t i = 0; i < n; i++) {
        if (v->attr[i] & (SP_GA_CONTROL | SP_GA_USER_DEFINED | SP_GA_UNKNOWN)) v->special[v->n_special++] = i;
    }
    qsort_r(v->special, v->n_special, sizeof *v->special, by_len_desc, m);
    tok->vocab_size = n;
    if (!(tok->added_of_id = malloc(((size_t)n + 1) * sizeof *tok->added_of_id))) return oom(err);
    for (int32_t i = 0; i < n; i++) tok->added_of_id[i] = -1;
    return make_config(tok, g, unk, pad, err);
}

spindle_status sp_tokenizer_load_gguf(spindle_tokenizer *tok, const char *path,
                                      spindle_error *err) {
    sp_gguf *g = NULL;
    spindle_status st = sp_gguf_open(path, &g, err);
    if (st) return st;
    if (!(tok->gguf = calloc(1, sizeof *tok->gguf))) st = oom(err);
    else st = build(tok, g, err);
    sp_gguf_close(g);
    return st;
}

/* ---------------------------------------------------------------- decode */

/* One token's text as llama_token_to_piece renders it. */
static bool piece(const spindle_tokenizer *tok, int32_t id, bool special, int lstrip,
                  sp_strbuf *out) {
    const sp_gguf_vocab *v = tok->gguf;
    if (id < 0 || id >= tok->vocab_size) return true;
    uint8_t a = v->attr[id];
    if (!special && (a & (SP_GA_UNKNOWN | SP_GA_CONTROL))) return true;
    const char *s = tok->model.tok[id];
    size_t n = tok->model.tok_len[id];
    size_t start = out->len;
    bool ok = true;
    if (a & (SP_GA_UNKNOWN | SP_GA_CONTROL | SP_GA_USER_DEFINED)) {
        ok = sp_strbuf_add(out, s, n);
    } else if ((a & SP_GA_NORMAL) && (v->spm || v->wpm)) {
        for (size_t i = 0; i < n && ok; i++) {
            if (i + 2 < n && !memcmp(s + i, "\xE2\x96\x81", 3)) { ok = sp_strbuf_add(out, " ", 1); i += 2; }
            else ok = sp_strbuf_add(out, s + i, 1);
        }
    } else if (a & SP_GA_NORMAL) {
        for (size_t i = 0; i < n && ok;) {
            int l;
            uint32_t cp = sp_utf8_next(s + i, n - i, &l);
            int b = sp_cp_to_byte(cp);
            if (b >= 0) {
                char c = (char)b;
                ok = sp_strbuf_add(out, &c, 1);
            } else { /* llama_decode_text's marker for a non-byte code point */
                char hex[16];
                ok = sp_strbuf_add(out, "[UNK_BYTE_0x", 12);
                for (int k = 0; k < l && ok; k++) {
                    snprintf(hex, sizeof hex, "%02x", (unsigned char)s[i + (size_t)k]);
                    ok = sp_strbuf_add(out, hex, 2);
                }
                ok = ok && sp_strbuf_add(out, s, n) && sp_strbuf_add(out, "]", 1);
            }
            i += (size_t)l;
        }
    } else if (a & SP_GA_BYTE) {
        char c = n >= 5 ? (char)strtol((char[3]){s[3], s[4], 0}, NULL, 16) : 0;
        ok = sp_strbuf_add(out, &c, 1);
    }
    if (ok && lstrip && out->len > start && out->p[start] == ' ') {
        memmove(out->p + start, out->p + start + 1, out->len - start - 1);
        out->len--;
    }
    return ok;
}

/* llama_detokenize's clean_up_tokenization_spaces passes. */
static size_t clean_spaces(char *t, size_t total) {
    size_t n1 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < n1; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
        t[total++] = x;
    }
    size_t n2 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < n2; i++) {
        char x = t[i];
        if (x == '\'' && i + 1 < n2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
            total--;
            t[++i] = '\0';
        }
        t[total++] = x;
    }
    size_t n3 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < n3; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < n3) {
            char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm') total--;
            else if (i + 2 < n3 && ((x1 == 'r' && t[i + 2] == 'e') || (x1 == 'v' && t[i + 2] == 'e'))) total--;
        }
        t[total++] = x;
    }
    return total;
}

spindle_status sp_gguf_decode(const spindle_tokenizer *tok, const int32_t *ids,
                              size_t n, bool skip_special, sp_strbuf *out,
                              spindle_error *err) {
    const sp_gguf_vocab *v = tok->gguf;
    bool remove_space = v->add_space_prefix;
    if (skip_special && v->add_bos && n > 0 && ids[0] == v->bos) {
        remove_space = false;
        ids++;
        n--;
    }
    if (skip_special && v->add_eos && n > 0 && ids[n - 1] == v->eos) n--;
    sp_strbuf raw = {0};
    bool ok = sp_strbuf_reserve(&raw, 0);
    for (size_t i = 0; i < n && ok; i++) {
        ok = piece(tok, ids[i], !skip_special, remove_space, &raw);
        remove_space = false;
    }
    if (ok && v->clean_spaces) raw.len = clean_spaces(raw.p, raw.len);
    ok = ok && sp_utf8_lossy(raw.p, raw.len, out) && sp_strbuf_reserve(out, 0);
    sp_strbuf_free(&raw);
    return ok ? SPINDLE_OK : oom(err);
}

/* ------------------------------------------------------------- locating */

bool sp_is_gguf_path(const char *path) {
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".gguf");
}

spindle_status sp_gguf_in_dir(const char *dir, char **out, spindle_error *err) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return SPINDLE_OK;
    struct dirent *e;
    int found = 0;
    char *name = NULL;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !sp_is_gguf_path(e->d_name)) continue;
        if (found++ == 0 && !(name = strdup(e->d_name))) { closedir(d); return oom(err); }
    }
    closedir(d);
    if (found > 1) {
        free(name);
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "%s: holds %d .gguf files and no tokenizer.json; name one", dir, found);
    }
    if (name) {
        *out = sp_path_join(dir, name);
        free(name);
        if (!*out) return oom(err);
    }
    return SPINDLE_OK;
}

bool sp_gguf_token_bytes(const spindle_tokenizer *tok, int32_t id,
                         sp_strbuf *out) {
    if (tok->gguf->attr[id] & (SP_GA_UNKNOWN | SP_GA_CONTROL)) return false;
    return piece(tok, id, false, 0, out);
}
