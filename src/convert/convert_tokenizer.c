/* tokenizer.json and tokenizer_config.json of a converted GGUF, from
 * tokenizer.ggml.*, shaped as transformers builds them from a GGUF
 * (integrations/gguf/gguf_tokenizer_mapping.py):
 *  - "gpt2": byte-level BPE with the file's vocab and merges; the
 *    pre-tokenizer is llama.cpp's regex list for tokenizer.ggml.pre
 *    (llama-vocab.cpp), each regex an isolating Split, then ByteLevel
 *    without its own regex;
 *  - "llama" (SentencePiece): BPE with byte fallback, merges from the file
 *    or derived from the scores as transformers' generate_merges does,
 *    Metaspace pre-tokenizer and the matching decoder.
 * Control tokens become special added tokens, user-defined ones plain added
 * tokens. BOS is added by the post-processor when the file says
 * add_bos_token (transformers leaves that to its Python layer; a standalone
 * tokenizer.json must do it itself, as Hugging Face checkpoints do).
 * The regex lists are the tokenizer module's (sp_gg_pre_find). */
#include "convert/convert_internal.h"
#include "tokenizer/tok_gguf.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp names the tokenizer module does not load (their BOS/SEP
 * handling differs; tokenizer.json takes that from the file's own keys)
 * whose split is that of a name it does. */
static const char *const ALIASES[][2] = {
    {"chatglm-bpe", "dbrx"}, {"gpt2", "gpt-2"}, {"jina-v1-en", "gpt-2"},
    {"jina-v2-code", "gpt-2"}, {"roberta-bpe", "gpt-2"},
};

/* The pre-tokenizers (one name of each) whose regex lists convert writes;
 * the others are not tested as Hugging Face Split regexes. */
static const char *const CONVERTIBLE[] = {
    "default", "llama3", "dbrx", "falcon", "starcoder", "command-r",
    "gpt-2", "qwen2", "stablelm2",
};

static const sp_gg_pre *find_pre(const char *pre, size_t len) {
    for (size_t i = 0; i < sizeof ALIASES / sizeof *ALIASES; i++)
        if (strlen(ALIASES[i][0]) == len && !memcmp(ALIASES[i][0], pre, len)) {
            pre = ALIASES[i][1];
            len = strlen(pre);
        }
    const sp_gg_pre *d = sp_gg_pre_find(pre, len);
    for (size_t i = 0; d && i < sizeof CONVERTIBLE / sizeof *CONVERTIBLE; i++)
        if (sp_gg_pre_find(CONVERTIBLE[i], strlen(CONVERTIBLE[i])) == d) return d;
    return NULL;
}

typedef struct tk {
    const sp_gguf *g;
    const sp_gguf_value *tokens, *types;
    uint64_t n;
    bool spm, gemma;
    char **spell;          /* per id: the token as tokenizer.json spells it */
    sp_conv_vocab *map;    /* spelling -> id */
    spindle_error *err;
    bool oom;
} tk;

/* malloc'd NUL-terminated copy of token i. */
static char *token_text(const tk *t, uint64_t i) {
    sp_gguf_str s = {"", 0};
    sp_gguf_array_str(t->tokens, i, &s);
    char *c = malloc(s.len + 1);
    if (c) {
        memcpy(c, s.ptr, s.len);
        c[s.len] = '\0';
    }
    return c;
}

static int64_t token_type(const tk *t, uint64_t i) {
    sp_gguf_value v;
    int64_t x;
    return t->types && sp_gguf_array_at(t->types, i, &v) && sp_gguf_value_i64(&v, &x) ? x : 1;
}

static cJSON *obj(tk *t, cJSON *parent, const char *name) {
    cJSON *o = name ? cJSON_AddObjectToObject(parent, name)
                    : cJSON_CreateObject();
    if (!o) t->oom = true;
    return o;
}

static void str(tk *t, cJSON *o, const char *k, const char *v) {
    if (!o || !cJSON_AddStringToObject(o, k, v)) t->oom = true;
}

static void boolean(tk *t, cJSON *o, const char *k, bool v) {
    if (!o || !cJSON_AddBoolToObject(o, k, v)) t->oom = true;
}

static void null(tk *t, cJSON *o, const char *k) {
    if (!o || !cJSON_AddNullToObject(o, k)) t->oom = true;
}

static void push(tk *t, cJSON *arr, cJSON *item) {
    if (!item || !arr || !cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        t->oom = true;
    }
}

/* added_tokens: control (3) special, user-defined (4) not. */
static void added_tokens(tk *t, cJSON *root) {
    cJSON *arr = cJSON_AddArrayToObject(root, "added_tokens");
    if (!arr) t->oom = true;
    for (uint64_t i = 0; i < t->n && !t->oom; i++) {
        int64_t ty = token_type(t, i);
        /* SentencePiece: transformers' Llama/Gemma classes also make the
         * unknown token special. */
        bool special = ty == 3 || (t->spm && ty == 2);
        if (!special && ty != 4) continue;
        char *text = token_text(t, i);
        /* A byte-level control token outside the byte alphabet is a
         * llama.cpp mislabel; transformers skips it. */
        if (text && special && !t->spm && !sp_conv_in_byte_alphabet(text)) {
            free(text);
            continue;
        }
        int32_t id = text ? sp_conv_vocab_id(t->map, text) : -1;
        /* A user-defined token transformers cannot find under its own text
         * (Gemma's respelled blanks) is not added. */
        if (text && !special && id < 0) {
            free(text);
            continue;
        }
        if (id < 0) id = (int32_t)i;
        cJSON *a = obj(t, NULL, NULL);
        if (!text || !a) {
            free(text);
            cJSON_Delete(a);
            t->oom = true;
            break;
        }
        if (!cJSON_AddNumberToObject(a, "id", (double)id)) t->oom = true;
        str(t, a, "content", text);
        boolean(t, a, "single_word", false);
        boolean(t, a, "lstrip", false);
        boolean(t, a, "rstrip", false);
        boolean(t, a, "normalized", false);
        boolean(t, a, "special", special);
        push(t, arr, a);
        free(text);
    }
}

static void vocab(tk *t, cJSON *model) {
    cJSON *v = obj(t, model, "vocab");
    for (uint64_t i = 0; v && i < t->n && !t->oom; i++)
        if (!cJSON_AddNumberToObject(v, t->spell[i], (double)i)) t->oom = true;
}

/* "a b" merges from the file as ["a", "b"] pairs. */
static spindle_status file_merges(tk *t, cJSON *model, bool required) {
    const sp_gguf_value *m = sp_gguf_find(t->g, "tokenizer.ggml.merges");
    if (!m && !required) return SPINDLE_OK;
    if (!m || m->type != SP_GGUF_ARRAY || sp_gguf_array_type(m) != SP_GGUF_STRING)
        return sp_fail(t->err, SPINDLE_ERR_FORMAT,
                       "%s: tokenizer.ggml.merges is missing or not strings",
                       sp_gguf_path(t->g));
    cJSON *arr = cJSON_AddArrayToObject(model, "merges");
    if (!arr) t->oom = true;
    uint64_t n = sp_gguf_array_count(m);
    for (uint64_t i = 0; i < n && !t->oom; i++) {
        sp_gguf_str s;
        sp_gguf_array_str(m, i, &s);
        const char *sp = memchr(s.ptr, ' ', s.len);
        if (!sp)
            return sp_fail(t->err, SPINDLE_ERR_FORMAT, "%s: merge %llu has no "
                           "space", sp_gguf_path(t->g), (unsigned long long)i);
        char *a = strndup(s.ptr, (size_t)(sp - s.ptr));
        char *b = strndup(sp + 1, s.len - (size_t)(sp - s.ptr) - 1);
        cJSON *pair = cJSON_CreateArray();
        if (a && b && pair) {
            push(t, pair, cJSON_CreateString(a));
            push(t, pair, cJSON_CreateString(b));
        }
        push(t, arr, pair);
        free(a);
        free(b);
    }
    return SPINDLE_OK;
}

static cJSON *split(tk *t, const char *re) {
    cJSON *s = obj(t, NULL, NULL);
    str(t, s, "type", "Split");
    cJSON *p = s ? obj(t, s, "pattern") : NULL;
    str(t, p, "Regex", re);
    str(t, s, "behavior", "Isolated");
    boolean(t, s, "invert", false);
    return s;
}

static cJSON *byte_level(tk *t, bool use_regex) {
    cJSON *b = obj(t, NULL, NULL);
    str(t, b, "type", "ByteLevel");
    boolean(t, b, "add_prefix_space", false);
    boolean(t, b, "trim_offsets", true);
    boolean(t, b, "use_regex", use_regex);
    return b;
}

static spindle_status gpt2(tk *t, cJSON *root, cJSON *model) {
    sp_gguf_str pre = {"default", 7};
    const sp_gguf_value *pv = sp_gguf_find(t->g, "tokenizer.ggml.pre");
    if (pv) sp_gguf_value_str(pv, &pre);
    const sp_gg_pre *d = find_pre(pre.ptr, pre.len);
    if (!d)
        return sp_fail(t->err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.pre '%.*s' cannot be converted",
                       sp_gguf_path(t->g), (int)pre.len, pre.ptr);
    null(t, root, "normalizer");
    cJSON *pt = obj(t, root, "pre_tokenizer");
    str(t, pt, "type", "Sequence");
    cJSON *list = pt ? cJSON_AddArrayToObject(pt, "pretokenizers") : NULL;
    for (int i = 0; i < SP_GG_MAX_RE && d->re[i]; i++)
        push(t, list, split(t, d->re[i]));
    push(t, list, byte_level(t, false));
    if (!t->oom && !cJSON_AddItemToObject(root, "decoder", byte_level(t, true)))
        t->oom = true;
    null(t, model, "unk_token");
    boolean(t, model, "fuse_unk", false);
    boolean(t, model, "byte_fallback", false);
    boolean(t, model, "ignore_merges", d->ignore_merges);
    vocab(t, model);
    return file_merges(t, model, true);
}

/* Token id `key` as its text (malloc'd), or NULL when absent. */
static char *special_text(const tk *t, const char *key) {
    const sp_gguf_value *v = sp_gguf_find(t->g, key);
    int64_t id;
    if (!v || !sp_gguf_value_i64(v, &id) || id < 0 || (uint64_t)id >= t->n)
        return NULL;
    return token_text(t, (uint64_t)id);
}

static bool flag(const sp_gguf *g, const char *key, bool dflt) {
    const sp_gguf_value *v = sp_gguf_find(g, key);
    bool b;
    return v && sp_gguf_value_bool(v, &b) ? b : dflt;
}

static cJSON *replace(tk *t, const char *from, const char *to) {
    cJSON *r = obj(t, NULL, NULL);
    str(t, r, "type", "Replace");
    cJSON *p = r ? obj(t, r, "pattern") : NULL;
    str(t, p, "String", from);
    str(t, r, "content", to);
    return r;
}

static cJSON *typed(tk *t, const char *type) {
    cJSON *o = obj(t, NULL, NULL);
    str(t, o, "type", type);
    return o;
}

/* Merges of a vocabulary without tokenizer.ggml.merges. */
static spindle_status derived_merges(tk *t, cJSON *model) {
    double *key = malloc((t->n ? t->n : 1) * sizeof *key);
    if (!key) return sp_fail(t->err, SPINDLE_ERR_MEMORY, "out of memory");
    const sp_gguf_value *sc = sp_gguf_find(t->g, "tokenizer.ggml.scores");
    for (uint64_t i = 0; i < t->n; i++) {
        sp_gguf_value v;
        key[i] = t->gemma ? -(double)i
                 : sc && sp_gguf_array_at(sc, i, &v) && sp_gguf_value_f64(&v, &key[i])
                     ? key[i] : 0.0;
    }
    int32_t *pairs;
    size_t n;
    spindle_status st = sp_conv_derive_merges(t->spell, t->n, key, t->map,
                                              &pairs, &n, t->err);
    free(key);
    if (st) return st;
    cJSON *arr = cJSON_AddArrayToObject(model, "merges");
    if (!arr) t->oom = true;
    for (size_t i = 0; i < n && !t->oom; i++) {
        cJSON *pair = cJSON_CreateArray();
        push(t, pair, cJSON_CreateString(t->spell[pairs[2 * i]]));
        push(t, pair, cJSON_CreateString(t->spell[pairs[2 * i + 1]]));
        push(t, arr, pair);
    }
    free(pairs);
    return SPINDLE_OK;
}

/* SentencePiece as BPE with byte fallback: transformers' LlamaTokenizer
 * (Metaspace, prefix on the first piece) or GemmaTokenizer (spaces
 * replaced, no prefix). */
static spindle_status spm(tk *t, cJSON *root, cJSON *model) {
    if (t->gemma) {
        if (!cJSON_AddItemToObject(root, "normalizer", replace(t, " ", "\xe2\x96\x81")))
            t->oom = true;
        cJSON *pt = obj(t, root, "pre_tokenizer");
        str(t, pt, "type", "Split");
        cJSON *p = pt ? obj(t, pt, "pattern") : NULL;
        str(t, p, "String", " ");
        str(t, pt, "behavior", "MergedWithPrevious");
        boolean(t, pt, "invert", false);
    } else {
        null(t, root, "normalizer");
        cJSON *pt = obj(t, root, "pre_tokenizer");
        str(t, pt, "type", "Metaspace");
        str(t, pt, "replacement", "\xe2\x96\x81");
        str(t, pt, "prepend_scheme", "first");
        boolean(t, pt, "split", false);
    }
    cJSON *dec = obj(t, root, "decoder");
    str(t, dec, "type", "Sequence");
    cJSON *list = dec ? cJSON_AddArrayToObject(dec, "decoders") : NULL;
    push(t, list, replace(t, "\xe2\x96\x81", " "));
    push(t, list, typed(t, "ByteFallback"));
    push(t, list, typed(t, "Fuse"));
    if (!t->gemma) {
        cJSON *strip = typed(t, "Strip");
        str(t, strip, "content", " ");
        if (strip && (!cJSON_AddNumberToObject(strip, "start", 1) ||
                      !cJSON_AddNumberToObject(strip, "stop", 0)))
            t->oom = true;
        push(t, list, strip);
    }
    char *unk = t->gemma ? special_text(t, "tokenizer.ggml.unknown_token_id") : NULL;
    if (unk) str(t, model, "unk_token", unk);
    else null(t, model, "unk_token");
    free(unk);
    boolean(t, model, "fuse_unk", true);
    boolean(t, model, "byte_fallback", true);
    boolean(t, model, "ignore_merges", false);
    vocab(t, model);
    if (sp_gguf_find(t->g, "tokenizer.ggml.merges")) return file_merges(t, model, true);
    return derived_merges(t, model);
}

/* BOS in front when the file asks for it (TemplateProcessing), else the
 * ByteLevel post-processor transformers' GPT-2 tokenizer has. */
static void post_processor(tk *t, cJSON *root, const char *bos, bool add_bos) {
    if (!add_bos || !bos) {
        if (t->spm) null(t, root, "post_processor");
        else if (!cJSON_AddItemToObject(root, "post_processor", byte_level(t, true)))
            t->oom = true;
        return;
    }
    int64_t id = 0;
    sp_gguf_value_i64(sp_gguf_find(t->g, "tokenizer.ggml.bos_token_id"), &id);
    cJSON *pp = obj(t, root, "post_processor");
    str(t, pp, "type", "TemplateProcessing");
    /* single: BOS $A; pair: BOS $A BOS $B (transformers' Llama layout). */
    static const char *const seqs[2][2] = {{"A", NULL}, {"A", "B"}};
    static const char *const names[2] = {"single", "pair"};
    for (int k = 0; k < 2 && pp; k++) {
        cJSON *arr = cJSON_AddArrayToObject(pp, names[k]);
        for (int j = 0; j < 2 && seqs[k][j]; j++) {
            cJSON *sp = obj(t, NULL, NULL), *sp_in = sp ? obj(t, sp, "SpecialToken") : NULL;
            str(t, sp_in, "id", bos);
            if (sp_in && !cJSON_AddNumberToObject(sp_in, "type_id", 0)) t->oom = true;
            push(t, arr, sp);
            cJSON *sq = obj(t, NULL, NULL), *sq_in = sq ? obj(t, sq, "Sequence") : NULL;
            str(t, sq_in, "id", seqs[k][j]);
            if (sq_in && !cJSON_AddNumberToObject(sq_in, "type_id", 0)) t->oom = true;
            push(t, arr, sq);
        }
    }
    cJSON *sp = obj(t, pp, "special_tokens"), *e = sp ? obj(t, sp, bos) : NULL;
    str(t, e, "id", bos);
    cJSON *ids = e ? cJSON_AddArrayToObject(e, "ids") : NULL;
    push(t, ids, cJSON_CreateNumber((double)id));
    cJSON *toks = e ? cJSON_AddArrayToObject(e, "tokens") : NULL;
    push(t, toks, cJSON_CreateString(bos));
}

static spindle_status tokenizer_config(tk *t, const char *dir, const char *bos,
                                       const char *eos, bool add_bos) {
    cJSON *c = obj(t, NULL, NULL);
    char *unk = special_text(t, "tokenizer.ggml.unknown_token_id");
    char *pad = special_text(t, "tokenizer.ggml.padding_token_id");
    const char *names[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const char *vals[4] = {bos, eos, unk, pad};
    for (int i = 0; i < 4 && c; i++) {
        if (vals[i]) str(t, c, names[i], vals[i]);
        else null(t, c, names[i]);
    }
    boolean(t, c, "add_bos_token", add_bos);
    boolean(t, c, "add_eos_token", flag(t->g, "tokenizer.ggml.add_eos_token", false));
    str(t, c, "tokenizer_class", "PreTrainedTokenizerFast");
    const sp_gguf_value *tv = sp_gguf_find(t->g, "tokenizer.chat_template");
    sp_gguf_str tmpl;
    if (tv && sp_gguf_value_str(tv, &tmpl)) {
        char *s = strndup(tmpl.ptr, tmpl.len);
        if (!s) t->oom = true;
        else str(t, c, "chat_template", s);
        free(s);
    }
    free(unk);
    free(pad);
    spindle_status st = t->oom ? sp_fail(t->err, SPINDLE_ERR_MEMORY, "out of memory")
                               : sp_conv_write_json(c, dir, "tokenizer_config.json", t->err);
    cJSON_Delete(c);
    return st;
}

static void free_spell(tk *t) {
    for (uint64_t i = 0; t->spell && i < t->n; i++) free(t->spell[i]);
    free(t->spell);
    sp_conv_vocab_free(t->map);
}

spindle_status sp_conv_tokenizer(const sp_gguf *g, const char *dir,
                                 spindle_error *err) {
    tk t = {.g = g, .err = err};
    sp_gguf_str model;
    spindle_status st = sp_gguf_get_string(g, "tokenizer.ggml.model", &model, err);
    if (!st) st = sp_gguf_get_array(g, "tokenizer.ggml.tokens", SP_GGUF_STRING,
                                    &t.tokens, err);
    if (st) return st;
    t.n = sp_gguf_array_count(t.tokens);
    t.types = sp_gguf_find(g, "tokenizer.ggml.token_type");
    if (t.types && (t.types->type != SP_GGUF_ARRAY ||
                    sp_gguf_array_count(t.types) != t.n))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: tokenizer.ggml.token_type "
                       "does not match the token list", sp_gguf_path(g));
    t.spm = model.len == 5 && !memcmp(model.ptr, "llama", 5);
    if (!t.spm && !(model.len == 4 && !memcmp(model.ptr, "gpt2", 4)))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tokenizer model '%.*s' cannot be converted (only "
                       "gpt2 and llama)", sp_gguf_path(g), (int)model.len,
                       model.ptr);
    sp_gguf_str arch = {"", 0};
    sp_gguf_get_string(g, "general.architecture", &arch, NULL);
    t.gemma = t.spm && arch.len >= 5 && !memcmp(arch.ptr, "gemma", 5);
    t.spell = calloc(t.n ? t.n : 1, sizeof *t.spell);
    for (uint64_t i = 0; t.spell && i < t.n && !t.oom; i++) {
        char *text = token_text(&t, i);
        t.spell[i] = !text ? NULL
                   : t.gemma ? sp_conv_gemma_spelling(text)
                   : !t.spm ? sp_conv_byte_level_spelling(text) : text;
        if (t.spell[i] != text) free(text);
        if (!t.spell[i]) t.oom = true;
    }
    cJSON *root = NULL;
    if (!t.spell || t.oom) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = sp_conv_vocab_new(t.spell, t.n, &t.map, err);
    if (!st && !(root = cJSON_CreateObject()))
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (st) {
        free_spell(&t);
        return st;
    }
    str(&t, root, "version", "1.0");
    null(&t, root, "truncation");
    null(&t, root, "padding");
    added_tokens(&t, root);
    cJSON *m = cJSON_CreateObject();
    str(&t, m, "type", "BPE");
    null(&t, m, "dropout");
    null(&t, m, "continuing_subword_prefix");
    null(&t, m, "end_of_word_suffix");
    st = t.spm ? spm(&t, root, m) : gpt2(&t, root, m);
    char *bos = special_text(&t, "tokenizer.ggml.bos_token_id");
    char *eos = special_text(&t, "tokenizer.ggml.eos_token_id");
    bool add_bos = flag(g, "tokenizer.ggml.add_bos_token", t.spm);
    if (!st) post_processor(&t, root, bos, add_bos);
    if (m && !cJSON_AddItemToObject(root, "model", m)) {
        cJSON_Delete(m);
        t.oom = true;
    }
    if (!st && t.oom) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = sp_conv_write_json(root, dir, "tokenizer.json", err);
    if (!st) st = tokenizer_config(&t, dir, bos, eos, add_bos);
    cJSON_Delete(root);
    free(bos);
    free(eos);
    free_spell(&t);
    return st;
}
