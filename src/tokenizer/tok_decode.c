/* Decoders of tokenizer.json (HF `decoders`), each a decode_chain from a
 * list of token strings to a list of strings: ByteLevel, Metaspace,
 * ByteFallback, Fuse, Strip, Replace, WordPiece, BPEDecoder, Sequence. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

bool sp_strlist_push(sp_strlist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 32;
        size_t *o = realloc(l->off, c * sizeof *o);
        if (!o) return false;
        l->off = o;
        size_t *ln = realloc(l->len, c * sizeof *ln);
        if (!ln) return false;
        l->len = ln;
        l->cap = c;
    }
    l->off[l->n] = l->text.len;
    l->len[l->n] = n;
    if (!sp_strbuf_add(&l->text, s, n)) return false;
    l->n++;
    return true;
}

void sp_strlist_reset(sp_strlist *l) {
    l->n = 0;
    l->text.len = 0;
}

void sp_strlist_free(sp_strlist *l) {
    sp_strbuf_free(&l->text);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static uint32_t first_cp(const char *s) {
    int l;
    return s && *s ? sp_utf8_next(s, strlen(s), &l) : 0;
}

spindle_status sp_dec_parse(const cJSON *j, sp_dec *d, spindle_error *err) {
    memset(d, 0, sizeof *d);
    const char *t = sp_json_str(j, "type");
    if (!t) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: decoder without type");
    const char *s = NULL;
    if (!strcmp(t, "ByteLevel")) d->type = SP_DEC_BYTELEVEL;
    else if (!strcmp(t, "ByteFallback")) d->type = SP_DEC_BYTEFALLBACK;
    else if (!strcmp(t, "Fuse")) d->type = SP_DEC_FUSE;
    else if (!strcmp(t, "Metaspace")) {
        d->type = SP_DEC_METASPACE;
        const char *r = sp_json_str(j, "replacement");
        d->content_cp = r ? first_cp(r) : 0x2581;
        const char *ps = sp_json_str(j, "prepend_scheme");
        d->prepend = ps ? (!strcmp(ps, "never") ? 2 : !strcmp(ps, "first") ? 1 : 0)
                        : (sp_json_bool(j, "add_prefix_space", true) ? 0 : 2);
    } else if (!strcmp(t, "Strip")) {
        d->type = SP_DEC_STRIP;
        d->content_cp = first_cp(sp_json_str(j, "content"));
        d->start = sp_json_int_clamped(j, "start", 0, -1, 1025);
        d->stop = sp_json_int_clamped(j, "stop", 0, -1, 1025);
        if (d->start < 0 || d->stop < 0 || d->start > 1024 || d->stop > 1024)
            return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: bad Strip decoder bounds");
    } else if (!strcmp(t, "Replace")) {
        d->type = SP_DEC_REPLACE;
        s = sp_json_str(j, "content");
        if (!s) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: Replace decoder without content");
        spindle_status st = sp_pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), &d->pat, err);
        if (st) return st;
    } else if (!strcmp(t, "WordPiece")) {
        d->type = SP_DEC_WORDPIECE;
        s = sp_json_str(j, "prefix");
        if (!s) s = "##";
        d->cleanup = sp_json_bool(j, "cleanup", true);
    } else if (!strcmp(t, "BPEDecoder")) {
        d->type = SP_DEC_BPE;
        s = sp_json_str(j, "suffix");
        if (!s) s = "</w>";
    } else if (!strcmp(t, "Sequence")) {
        d->type = SP_DEC_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(arr)) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: Sequence decoder without list");
        d->subs = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *d->subs);
        if (!d->subs) return oom(err);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            spindle_status st = sp_dec_parse(it, &d->subs[d->n_subs], err);
            d->n_subs++;
            if (st) return st;
        }
    } else {
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "tokenizer.json: unsupported decoder '%s'", t);
    }
    if (s) {
        d->str = strdup(s);
        if (!d->str) return oom(err);
        d->str_len = strlen(s);
    }
    return SPINDLE_OK;
}

void sp_dec_free(sp_dec *d) {
    if (!d) return;
    for (int i = 0; i < d->n_subs; i++) sp_dec_free(&d->subs[i]);
    free(d->subs);
    free(d->str);
    sp_pattern_free(&d->pat);
}

static bool add_replaced(sp_strbuf *o, const char *s, size_t n, const char *from,
                         const char *to) {
    size_t fl = strlen(from), tl = strlen(to), i = 0;
    while (i < n) {
        const char *f = memmem(s + i, n - i, from, fl);
        size_t e = f ? (size_t)(f - s) : n;
        if (!sp_strbuf_add(o, s + i, e - i)) return false;
        if (!f) break;
        if (!sp_strbuf_add(o, to, tl)) return false;
        i = e + fl;
    }
    return true;
}

/* HF wordpiece::cleanup, applied in the same order. */
static bool wp_cleanup(sp_strbuf *a, sp_strbuf *b) {
    static const char *pairs[][2] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"},
        {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        b->len = 0;
        if (!add_replaced(b, a->p ? a->p : "", a->len, pairs[k][0], pairs[k][1])) return false;
        sp_strbuf t = *a;
        *a = *b;
        *b = t;
    }
    return true;
}

static spindle_status one_token(const sp_dec *d, size_t i, size_t count,
                                const char *s, size_t n, sp_strlist *out,
                                sp_strbuf *w, sp_strbuf *w2, spindle_error *err) {
    w->len = 0;
    bool ok = true;
    switch (d->type) {
    case SP_DEC_METASPACE:
        for (size_t k = 0; k < n && ok;) {
            int l;
            uint32_t cp = sp_utf8_next(s + k, n - k, &l);
            if (cp == d->content_cp) {
                if (!(i == 0 && d->prepend != 2)) ok = sp_strbuf_add(w, " ", 1);
            } else ok = sp_strbuf_add(w, s + k, (size_t)l);
            k += (size_t)l;
        }
        break;
    case SP_DEC_STRIP: {
        size_t a = 0, b = n;
        for (int k = 0; k < d->start && a < b; k++) {
            int l;
            if (sp_utf8_next(s + a, b - a, &l) != d->content_cp) break;
            a += (size_t)l;
        }
        for (int k = 0; k < d->stop && b > a; k++) {
            size_t p = b - 1;
            while (p > a && sp_utf8_is_continuation((unsigned char)s[p])) p--;
            int l;
            if (sp_utf8_next(s + p, b - p, &l) != d->content_cp) break;
            b = p;
        }
        ok = sp_strbuf_add(w, s + a, b - a);
        break;
    }
    case SP_DEC_REPLACE: {
        spindle_status st = sp_pattern_replace(&d->pat, s, n, d->str, d->str_len, w, err);
        if (st) return st;
        break;
    }
    case SP_DEC_WORDPIECE:
        if (i != 0) {
            if (n >= d->str_len && !memcmp(s, d->str, d->str_len)) { s += d->str_len; n -= d->str_len; }
            else ok = sp_strbuf_add(w, " ", 1);
        }
        ok = ok && sp_strbuf_add(w, s, n);
        if (ok && d->cleanup) ok = wp_cleanup(w, w2);
        break;
    case SP_DEC_BPE:
        ok = add_replaced(w, s, n, d->str, i + 1 == count ? "" : " ");
        break;
    default:
        return sp_fail(err, SPINDLE_ERR_INTERNAL, "tokenizer: bad decoder");
    }
    if (ok) ok = sp_strlist_push(out, w->p ? w->p : "", w->len);
    return ok ? SPINDLE_OK : oom(err);
}

/* ByteFallback: runs of <0xXX> tokens become their bytes when those form
 * valid UTF-8, else one U+FFFD per byte. */
static bool flush_bytes(sp_strlist *out, sp_strbuf *bytes) {
    if (!bytes->len) return true;
    bool ok = true;
    if (sp_utf8_valid(bytes->p, bytes->len)) ok = sp_strlist_push(out, bytes->p, bytes->len);
    else
        for (size_t k = 0; k < bytes->len && ok; k++) ok = sp_strlist_push(out, "\xEF\xBF\xBD", 3);
    bytes->len = 0;
    return ok;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

spindle_status sp_dec_apply(const sp_dec *d, sp_strlist *io, sp_strlist *tmp,
                            spindle_error *err) {
    if (d->type == SP_DEC_SEQ) {
        for (int k = 0; k < d->n_subs; k++) {
            spindle_status st = sp_dec_apply(&d->subs[k], io, tmp, err);
            if (st) return st;
        }
        return SPINDLE_OK;
    }
    sp_strlist_reset(tmp);
    spindle_status st = SPINDLE_OK;
    sp_strbuf w = {0}, w2 = {0};
    switch (d->type) {
    case SP_DEC_BYTELEVEL:
        for (size_t i = 0; i < io->n && !st; i++) {
            const char *s = io->text.p + io->off[i];
            size_t n = io->len[i], at = w.len;
            bool mapped = true;
            for (size_t k = 0; k < n && mapped;) {
                int l, b = sp_cp_to_byte(sp_utf8_next(s + k, n - k, &l));
                if (b < 0) mapped = false;
                else {
                    char c = (char)b;
                    if (!sp_strbuf_add(&w, &c, 1)) st = oom(err);
                }
                k += (size_t)l;
            }
            if (!mapped) { /* a token outside the byte alphabet: its own text */
                w.len = at;
                if (!sp_strbuf_add(&w, s, n)) st = oom(err);
            }
        }
        if (!st && !sp_utf8_lossy(w.p ? w.p : "", w.len, &w2)) st = oom(err);
        if (!st && !sp_strlist_push(tmp, w2.p ? w2.p : "", w2.len)) st = oom(err);
        break;
    case SP_DEC_FUSE:
        if (!sp_strlist_push(tmp, io->text.p ? io->text.p : "", io->text.len)) st = oom(err);
        break;
    case SP_DEC_BYTEFALLBACK:
        for (size_t i = 0; i < io->n && !st; i++) {
            const char *s = io->text.p + io->off[i];
            size_t n = io->len[i];
            if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hexv(s[3]) >= 0 && hexv(s[4]) >= 0) {
                char c = (char)(hexv(s[3]) * 16 + hexv(s[4]));
                if (!sp_strbuf_add(&w, &c, 1)) st = oom(err);
                continue;
            }
            if (!flush_bytes(tmp, &w) || !sp_strlist_push(tmp, s, n)) st = oom(err);
        }
        if (!st && !flush_bytes(tmp, &w)) st = oom(err);
        break;
    default:
        for (size_t i = 0; i < io->n && !st; i++)
            st = one_token(d, i, io->n, io->text.p + io->off[i], io->len[i], tmp, &w, &w2, err);
    }
    sp_strbuf_free(&w);
    sp_strbuf_free(&w2);
    sp_strlist swap = *io;
    *io = *tmp;
    *tmp = swap;
    return st;
}
