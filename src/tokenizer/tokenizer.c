/* Loading tokenizer.json (+ tokenizer_config.json, chat_template.jinja) and
 * the spindle_tokenizer_* API: encode runs added-token extraction,
 * normalization, pre-tokenization, the model and the post-processor in HF
 * `tokenizers` order; decode maps ids to token strings and runs the
 * decoder.
 *
 * Invalid UTF-8 input: HF cannot receive it (Python str / Rust &str are
 * always valid), so Spindle first replaces every maximal invalid subpart with
 * U+FFFD — the result Python's bytes.decode("utf-8", "replace") would hand
 * to HF — and encodes that. */
#include "tokenizer/tokenizer.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mapped_file.h"

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

static spindle_status parse_json_file(const char *dir, const char *name,
                                      bool required, cJSON **out,
                                      spindle_error *err) {
    *out = NULL;
    char *path = sp_path_join(dir, name);
    if (!path) return oom(err);
    if (!required && !sp_file_exists(path)) { free(path); return SPINDLE_OK; }
    char *text = NULL;
    size_t len = 0;
    spindle_status st = sp_read_text_file(path, &text, &len, err);
    if (!st) {
        *out = cJSON_ParseWithLength(text, len);
        if (!*out) st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: invalid JSON", path);
    }
    free(text);
    free(path);
    return st;
}

static const cJSON *component(const cJSON *root, const char *key) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, key);
    return (c && !cJSON_IsNull(c)) ? c : NULL;
}

int32_t sp_tokenizer_token_to_id(const spindle_tokenizer *tok, const char *s,
                                 size_t n) {
    for (int i = 0; i < tok->added.n; i++)
        if (tok->added.v[i].len == n && !memcmp(tok->added.v[i].content, s, n))
            return tok->added.v[i].id;
    return sp_strmap_get(&tok->model.vocab, s, n);
}

const char *sp_tokenizer_token(const spindle_tokenizer *tok, int32_t id,
                               size_t *len) {
    if (id < 0 || id >= tok->vocab_size) return NULL;
    int32_t a = tok->added_of_id[id];
    if (a >= 0) {
        /* HF reports a normalized added token in its normalized form. */
        const char *nc = tok->added.norm_content[a];
        if (nc) {
            *len = strlen(nc);
            return nc;
        }
        *len = tok->added.v[a].len;
        return tok->added.v[a].content;
    }
    if (id < tok->model.n_tok && tok->model.tok[id]) {
        *len = tok->model.tok_len[id];
        return tok->model.tok[id];
    }
    return NULL;
}

static int32_t config_token_id(const spindle_tokenizer *tok, const char *key) {
    const char *s = sp_tokenizer_config_string(tok, key);
    return s ? sp_tokenizer_token_to_id(tok, s, strlen(s)) : -1;
}

static spindle_status build(spindle_tokenizer *tok, const cJSON *root,
                            const sp_fast_model *fast, spindle_error *err) {
    spindle_status st;
    const cJSON *c;
    if (!cJSON_IsObject(root)) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: not an object");
    /* The "truncation" and "padding" blocks are left out, as transformers'
     * fast tokenizers leave them: each call says whether to truncate or pad
     * (sentence-transformers truncates to its own max_seq_length), and
     * encode here is one text without padding. */
    if ((c = component(root, "normalizer"))) {
        if (!(tok->normalizer = calloc(1, sizeof *tok->normalizer))) return oom(err);
        if ((st = sp_norm_parse(c, tok->normalizer, err))) return st;
    }
    if ((c = component(root, "pre_tokenizer"))) {
        if (!(tok->pretok = calloc(1, sizeof *tok->pretok))) return oom(err);
        if ((st = sp_pretok_parse(c, tok->pretok, err))) return st;
    }
    if ((c = component(root, "decoder"))) {
        if (!(tok->decoder = calloc(1, sizeof *tok->decoder))) return oom(err);
        if ((st = sp_dec_parse(c, tok->decoder, err))) return st;
    }
    if ((st = sp_model_parse(component(root, "model"), fast, &tok->model, err))) return st;
    if ((st = sp_post_parse(component(root, "post_processor"), &tok->post, err))) return st;
    if ((st = sp_added_parse(component(root, "added_tokens"), tok->normalizer, &tok->added, err)))
        return st;
    tok->vocab_size = tok->model.n_tok;
    for (int i = 0; i < tok->added.n; i++)
        if (tok->added.v[i].id >= tok->vocab_size) tok->vocab_size = tok->added.v[i].id + 1;
    tok->added_of_id = malloc(((size_t)tok->vocab_size + 1) * sizeof *tok->added_of_id);
    if (!tok->added_of_id) return oom(err);
    for (int32_t i = 0; i < tok->vocab_size; i++) tok->added_of_id[i] = -1;
    for (int i = 0; i < tok->added.n; i++) tok->added_of_id[tok->added.v[i].id] = i;
    return SPINDLE_OK;
}

spindle_status spindle_tokenizer_load(const char *path, spindle_tokenizer **out,
                                      spindle_error *err) {
    if (!path || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "tokenizer_load: NULL argument");
    *out = NULL;
    /* A .gguf file, or a directory whose only tokenizer is one .gguf. */
    char *gguf = NULL;
    spindle_status gst = SPINDLE_OK;
    if (sp_is_gguf_path(path) && sp_file_exists(path)) {
        if (!(gguf = strdup(path))) return oom(err);
    } else if (!sp_dir_exists(path)) {
        return sp_fail(err, SPINDLE_ERR_IO, "%s: not a directory", path);
    } else {
        char *tj = sp_path_join(path, "tokenizer.json");
        if (!tj) return oom(err);
        if (!sp_file_exists(tj)) gst = sp_gguf_in_dir(path, &gguf, err);
        free(tj);
        if (gst) return gst;
    }
    spindle_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) { free(gguf); return oom(err); }
    if (gguf) {
        gst = sp_tokenizer_load_gguf(tok, gguf, err);
        free(gguf);
        if (gst) { spindle_tokenizer_free(tok); return gst; }
        *out = tok;
        return SPINDLE_OK;
    }
    cJSON *root = NULL;
    sp_fast_model fast = {0};
    char *tpath = sp_path_join(path, "tokenizer.json"), *text = NULL;
    size_t tlen = 0;
    spindle_status st = tpath ? sp_read_text_file(tpath, &text, &tlen, err) : oom(err);
    if (!st) st = sp_fast_extract(text, tlen, &fast, err);
    if (!st && !(root = cJSON_ParseWithLength(text, tlen)))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: invalid JSON", tpath);
    free(text);
    if (!st) {
        st = build(tok, root, &fast, err);
        if (st && err) {
            /* Name the file in the one-line message. */
            char msg[sizeof err->message];
            const char *inner = err->message;
            if (!strncmp(inner, "tokenizer.json: ", 16)) inner += 16;
            snprintf(msg, sizeof msg, "%s", inner);
            sp_fail(err, st, "%s: %s", tpath, msg);
        }
    }
    free(tpath);
    sp_fast_free(&fast);
    cJSON_Delete(root);
    if (!st) st = parse_json_file(path, "tokenizer_config.json", false, &tok->config, err);
    if (!st) {
        char *tp = sp_path_join(path, "chat_template.jinja");
        if (!tp) st = oom(err);
        else if (sp_file_exists(tp)) {
            size_t len;
            st = sp_read_text_file(tp, &tok->template_file, &len, err);
        }
        free(tp);
    }
    if (st) {
        spindle_tokenizer_free(tok);
        return st;
    }
    tok->bos_id = config_token_id(tok, "bos_token");
    tok->eos_id = config_token_id(tok, "eos_token");
    *out = tok;
    return SPINDLE_OK;
}

void spindle_tokenizer_free(spindle_tokenizer *tok) {
    if (!tok) return;
    sp_model_free(&tok->model);
    sp_norm_free(tok->normalizer);
    free(tok->normalizer);
    sp_pretok_free(tok->pretok);
    free(tok->pretok);
    sp_dec_free(tok->decoder);
    free(tok->decoder);
    sp_post_free(&tok->post);
    sp_added_free(&tok->added);
    free(tok->added_of_id);
    cJSON_Delete(tok->config);
    free(tok->template_file);
    sp_gguf_vocab_free(tok->gguf);
    free(tok->gguf);
    free(tok);
}

/* Added tokens, then normalization, on the whole text. */
static spindle_status split_and_normalize(const spindle_tokenizer *tok,
                                          const char *text, size_t len,
                                          sp_pieces *out, spindle_error *err) {
    sp_pieces raw = {0};
    sp_strbuf norm = {0};
    spindle_status st = sp_added_split(&tok->added, false, text, len, true, &raw, err);
    for (size_t i = 0; i < raw.n && !st; i++) {
        const sp_piece *p = &raw.v[i];
        if (p->id >= 0) {
            if (!sp_pieces_push(out, "", 0, p->id, false)) st = oom(err);
            continue;
        }
        const char *s = raw.text.p + p->off;
        size_t n = p->len;
        if (tok->normalizer) {
            norm.len = 0;
            if ((st = sp_norm_apply(tok->normalizer, s, n, &norm, err))) break;
            if (!sp_strbuf_reserve(&norm, 0)) { st = oom(err); break; }
            s = norm.p;
            n = norm.len;
        }
        st = sp_added_split(&tok->added, true, s, n, p->first, out, err);
    }
    sp_pieces_free(&raw);
    sp_strbuf_free(&norm);
    return st;
}

spindle_status spindle_tokenizer_encode(const spindle_tokenizer *tok,
                                        const char *text, size_t len,
                                        bool add_special, int32_t **ids_out,
                                        size_t *n_out, spindle_error *err) {
    if (!tok || (!text && len) || !ids_out || !n_out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "tokenizer_encode: NULL argument");
    *ids_out = NULL;
    *n_out = 0;
    sp_strbuf clean = {0};
    if (len && !sp_utf8_valid(text, len)) {
        if (!sp_utf8_lossy(text, len, &clean)) return oom(err);
        text = clean.p;
        len = clean.len;
    }
    sp_pieces pieces = {0}, tmp = {0};
    sp_ids ids = {0};
    spindle_status st = tok->gguf ? sp_gguf_encode(tok, text ? text : "", len, add_special, &ids, err)
                                  : split_and_normalize(tok, text ? text : "", len, &pieces, err);
    if (!st && tok->pretok) st = sp_pretok_apply(tok->pretok, &pieces, &tmp, err);
    for (size_t i = 0; i < pieces.n && !st; i++) {
        const sp_piece *p = &pieces.v[i];
        if (p->id >= 0) {
            if (!sp_ids_push(&ids, p->id)) st = oom(err);
        } else if (p->len) {
            st = sp_model_tokenize(&tok->model, pieces.text.p + p->off, p->len, &ids, err);
        }
    }
    if (!st && add_special && !tok->gguf) st = sp_post_apply(&tok->post, &ids, err);
    if (!st && !ids.v && !(ids.v = malloc(sizeof *ids.v))) st = oom(err);
    sp_pieces_free(&pieces);
    sp_pieces_free(&tmp);
    sp_strbuf_free(&clean);
    if (st) {
        free(ids.v);
        return st;
    }
    *ids_out = ids.v;
    *n_out = ids.n;
    return SPINDLE_OK;
}

spindle_status spindle_tokenizer_decode(const spindle_tokenizer *tok,
                                        const int32_t *ids, size_t n_ids,
                                        bool skip_special, char **text,
                                        size_t *len, spindle_error *err) {
    if (!tok || (!ids && n_ids) || !text)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "tokenizer_decode: NULL argument");
    *text = NULL;
    if (tok->gguf) {
        sp_strbuf g = {0};
        spindle_status gs = sp_gguf_decode(tok, ids, n_ids, skip_special, &g, err);
        if (gs) { sp_strbuf_free(&g); return gs; }
        *text = g.p;
        if (len) *len = g.len;
        return SPINDLE_OK;
    }
    sp_strlist toks = {0}, tmp = {0};
    spindle_status st = SPINDLE_OK;
    /* Unknown ids are skipped, as HF does. */
    for (size_t i = 0; i < n_ids && !st; i++) {
        int32_t id = ids[i];
        size_t tl;
        const char *t = sp_tokenizer_token(tok, id, &tl);
        if (!t) continue;
        if (skip_special && tok->added_of_id[id] >= 0 && tok->added.v[tok->added_of_id[id]].special)
            continue;
        if (!sp_strlist_push(&toks, t, tl)) st = oom(err);
    }
    if (!st && tok->decoder) st = sp_dec_apply(tok->decoder, &toks, &tmp, err);
    sp_strbuf out = {0};
    for (size_t i = 0; i < toks.n && !st; i++) {
        if ((!tok->decoder && i > 0 && !sp_strbuf_add(&out, " ", 1)) ||
            !sp_strbuf_add(&out, toks.text.p + toks.off[i], toks.len[i]))
            st = oom(err);
    }
    if (!st && !sp_strbuf_reserve(&out, 0)) st = oom(err);
    sp_strlist_free(&toks);
    sp_strlist_free(&tmp);
    if (st) {
        sp_strbuf_free(&out);
        return st;
    }
    *text = out.p;
    if (len) *len = out.len;
    return SPINDLE_OK;
}

int spindle_tokenizer_vocab_size(const spindle_tokenizer *tok) {
    return tok ? tok->vocab_size : 0;
}

int32_t spindle_tokenizer_bos_id(const spindle_tokenizer *tok) {
    return tok ? tok->bos_id : -1;
}

int32_t spindle_tokenizer_eos_id(const spindle_tokenizer *tok) {
    return tok ? tok->eos_id : -1;
}

const char *spindle_tokenizer_id_to_token(const spindle_tokenizer *tok,
                                          int32_t id) {
    size_t len;
    return tok ? sp_tokenizer_token(tok, id, &len) : NULL;
}

const char *sp_tokenizer_config_string(const spindle_tokenizer *tok,
                                       const char *key) {
    if (!tok || !tok->config || !key) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tok->config, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return sp_json_str(v, "content");
    return NULL;
}

void sp_tokenizer_set_chat_template_source(spindle_tokenizer *tok, char *source) {
    free(tok->template_file);
    tok->template_file = source;
}

const char *sp_tokenizer_chat_template(const spindle_tokenizer *tok,
                                       const char *name) {
    if (!tok) return NULL;
    bool want_default = !name || !strcmp(name, "default");
    /* transformers lets chat_template.jinja override the config entry. */
    if (want_default && tok->template_file) return tok->template_file;
    const cJSON *ct = tok->config ? cJSON_GetObjectItemCaseSensitive(tok->config, "chat_template") : NULL;
    if (cJSON_IsString(ct)) return want_default ? ct->valuestring : NULL;
    if (!cJSON_IsArray(ct)) return NULL;
    const cJSON *it;
    cJSON_ArrayForEach(it, ct) {
        const char *n = sp_json_str(it, "name");
        if (n && !strcmp(n, want_default ? "default" : name)) return sp_json_str(it, "template");
    }
    return NULL;
}
