/* Normalizers of tokenizer.json (HF `normalizers`): Unicode forms through
 * utf8proc, Lowercase, Prepend, Replace, Strip, StripAccents,
 * BertNormalizer, Sequence. Each maps a string to a new string. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"
#include "tokenizer/tok_unicode.h"

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

spindle_status sp_norm_parse(const cJSON *j, sp_norm *n, spindle_error *err) {
    memset(n, 0, sizeof *n);
    const char *t = sp_json_str(j, "type");
    if (!t) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: normalizer without type");
    if (!strcmp(t, "NFC")) n->type = SP_NORM_NFC;
    else if (!strcmp(t, "NFD")) n->type = SP_NORM_NFD;
    else if (!strcmp(t, "NFKC")) n->type = SP_NORM_NFKC;
    else if (!strcmp(t, "NFKD")) n->type = SP_NORM_NFKD;
    else if (!strcmp(t, "Lowercase")) n->type = SP_NORM_LOWER;
    else if (!strcmp(t, "StripAccents")) n->type = SP_NORM_STRIP_ACCENTS;
    else if (!strcmp(t, "Strip")) {
        n->type = SP_NORM_STRIP;
        n->left = sp_json_bool(j, "strip_left", true);
        n->right = sp_json_bool(j, "strip_right", true);
    } else if (!strcmp(t, "Prepend") || !strcmp(t, "Replace")) {
        bool prep = !strcmp(t, "Prepend");
        n->type = prep ? SP_NORM_PREPEND : SP_NORM_REPLACE;
        const char *s = sp_json_str(j, prep ? "prepend" : "content");
        if (!s) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: %s normalizer without text", t);
        n->str = strdup(s);
        if (!n->str) return oom(err);
        n->str_len = strlen(s);
        if (!prep) {
            spindle_status st = sp_pattern_parse(
                cJSON_GetObjectItemCaseSensitive(j, "pattern"), &n->pat, err);
            if (st) return st;
        }
    } else if (!strcmp(t, "BertNormalizer")) {
        n->type = SP_NORM_BERT;
        n->clean = sp_json_bool(j, "clean_text", true);
        n->chinese = sp_json_bool(j, "handle_chinese_chars", true);
        n->lower = sp_json_bool(j, "lowercase", true);
        n->accents = sp_json_bool(j, "strip_accents", n->lower);
    } else if (!strcmp(t, "Sequence")) {
        n->type = SP_NORM_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr)) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: Sequence normalizer without list");
        int cnt = cJSON_GetArraySize(arr);
        n->subs = calloc((size_t)cnt + 1, sizeof *n->subs);
        if (!n->subs) return oom(err);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            spindle_status st = sp_norm_parse(it, &n->subs[n->n_subs], err);
            n->n_subs++;
            if (st) return st;
        }
    } else {
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "tokenizer.json: unsupported normalizer '%s'", t);
    }
    return SPINDLE_OK;
}

void sp_norm_free(sp_norm *n) {
    if (!n) return;
    for (int i = 0; i < n->n_subs; i++) sp_norm_free(&n->subs[i]);
    free(n->subs);
    free(n->str);
    sp_pattern_free(&n->pat);
}

static spindle_status utf8proc_form(int opts, const char *s, size_t len,
                                    sp_strbuf *out, spindle_error *err) {
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s,
                                      (utf8proc_ssize_t)len, &res,
                                      (utf8proc_option_t)(opts | UTF8PROC_STABLE));
    if (r < 0) {
        return sp_fail(err, SPINDLE_ERR_INTERNAL, "tokenizer: utf8proc: %s",
                       utf8proc_errmsg(r));
    }
    bool ok = sp_strbuf_add(out, (const char *)res, (size_t)r);
    free(res);
    return ok ? SPINDLE_OK : oom(err);
}

/* A Unicode form as HF's normalizer computes it: code points its tables
 * do not know (barriers, tok_unicode.h) stay as they are; being starters
 * that compose with nothing, they split the text into parts that utf8proc
 * normalizes independently. */
static spindle_status unicode_form(int opts, const char *s, size_t len,
                                   sp_strbuf *out, spindle_error *err) {
    int forms = (opts & UTF8PROC_COMPAT) ? SP_UC_BARRIER_CANONICAL | SP_UC_BARRIER_COMPAT
                                         : SP_UC_BARRIER_CANONICAL;
    size_t start = 0;
    for (size_t i = 0; i < len;) {
        int l;
        uint32_t cp = sp_utf8_next(s + i, len - i, &l);
        if (sp_uc_norm_barrier(cp) & forms) {
            spindle_status st = start < i ? utf8proc_form(opts, s + start, i - start, out, err)
                                          : SPINDLE_OK;
            if (st) return st;
            if (!sp_strbuf_add(out, s + i, (size_t)l)) return oom(err);
            start = i + (size_t)l;
        }
        i += (size_t)l;
    }
    return start < len || len == 0 ? utf8proc_form(opts, s + start, len - start, out, err)
                                   : SPINDLE_OK;
}

/* StripAccents drops every mark (M*); BertNormalizer only nonspacing ones
 * (Mn), as HF's two implementations differ. */
static bool is_mark(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC ||
           c == UTF8PROC_CATEGORY_ME;
}

static bool is_mark_nonspacing(uint32_t cp) {
    return sp_uc_in_ranges(SP_UC_BERT_NONSPACING, SP_UC_N_BERT_NONSPACING, cp);
}

/* BERT's "control": Cc, Cf, Co by its crate's tables; unassigned code
 * points (Cn) are kept. */
static bool is_other(uint32_t cp) {
    return sp_uc_in_ranges(SP_UC_BERT_CONTROL, SP_UC_N_BERT_CONTROL, cp);
}

static bool is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Char-by-char lowercase as Rust's char::to_lowercase (no context), from
 * HF's table: utf8proc's is of an older Unicode. */
static bool lower_cp(sp_strbuf *out, uint32_t cp) {
    uint32_t low[2];
    int n = sp_uc_lower(cp, low);
    return sp_strbuf_add_cp(out, low[0]) && (n < 2 || sp_strbuf_add_cp(out, low[1]));
}

/* The per-character normalizers; `mode` picks which. */
enum { CH_LOWER, CH_ACCENTS, CH_CLEAN, CH_CHINESE, CH_NONSPACING };

static spindle_status per_char(int mode, const char *s, size_t len,
                               sp_strbuf *out, spindle_error *err) {
    bool ok = sp_strbuf_reserve(out, len);
    for (size_t i = 0; i < len && ok;) {
        int l;
        uint32_t cp = sp_utf8_next(s + i, len - i, &l);
        switch (mode) {
        case CH_LOWER:
            ok = cp < 0x80 ? sp_strbuf_add_cp(out, (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp)
                           : lower_cp(out, cp);
            break;
        case CH_ACCENTS:
            if (!is_mark(cp)) ok = sp_strbuf_add(out, s + i, (size_t)l);
            break;
        case CH_NONSPACING:
            if (!is_mark_nonspacing(cp)) ok = sp_strbuf_add(out, s + i, (size_t)l);
            break;
        case CH_CLEAN:
            if (cp == 0 || cp == 0xFFFD ||
                (cp != '\t' && cp != '\n' && cp != '\r' && is_other(cp)))
                break;
            if (cp == '\t' || cp == '\n' || cp == '\r' || sp_uc_is_whitespace(cp))
                ok = sp_strbuf_add(out, " ", 1);
            else ok = sp_strbuf_add(out, s + i, (size_t)l);
            break;
        default:
            if (is_chinese(cp))
                ok = sp_strbuf_add(out, " ", 1) && sp_strbuf_add(out, s + i, (size_t)l) &&
                     sp_strbuf_add(out, " ", 1);
            else ok = sp_strbuf_add(out, s + i, (size_t)l);
        }
        i += (size_t)l;
    }
    return ok ? SPINDLE_OK : oom(err);
}

/* Runs steps one after another through two scratch buffers. */
static spindle_status chain(int n_steps, const int *modes, const char *s,
                            size_t len, sp_strbuf *out, spindle_error *err) {
    sp_strbuf a = {0}, b = {0};
    const char *cur = s;
    size_t cur_len = len;
    spindle_status st = SPINDLE_OK;
    for (int i = 0; i < n_steps && !st; i++) {
        sp_strbuf *dst = (i & 1) ? &b : &a;
        dst->len = 0;
        if (modes[i] < 0) st = unicode_form(UTF8PROC_DECOMPOSE, cur, cur_len, dst, err);
        else st = per_char(modes[i], cur, cur_len, dst, err);
        if (!st && !sp_strbuf_reserve(dst, 0)) st = oom(err);
        cur = dst->p;
        cur_len = dst->len;
    }
    if (!st && !sp_strbuf_add(out, cur, cur_len)) st = oom(err);
    sp_strbuf_free(&a);
    sp_strbuf_free(&b);
    return st;
}

spindle_status sp_norm_apply(const sp_norm *n, const char *s, size_t len,
                             sp_strbuf *out, spindle_error *err) {
    switch (n->type) {
    case SP_NORM_NFC: {
        /* Text below U+0300 is already NFC: nothing there decomposes or
         * composes. This is the common case and skips utf8proc. */
        size_t i = 0;
        const unsigned char *u = (const unsigned char *)s;
        while (i < len && (u[i] < 0xC0 || (u[i] < 0xCC))) i++;
        if (i == len) return sp_strbuf_add(out, s, len) ? SPINDLE_OK : oom(err);
        return unicode_form(UTF8PROC_COMPOSE, s, len, out, err);
    }
    case SP_NORM_NFD: return unicode_form(UTF8PROC_DECOMPOSE, s, len, out, err);
    case SP_NORM_NFKC:
        return unicode_form(UTF8PROC_COMPOSE | UTF8PROC_COMPAT, s, len, out, err);
    case SP_NORM_NFKD:
        return unicode_form(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, s, len, out, err);
    case SP_NORM_LOWER: return per_char(CH_LOWER, s, len, out, err);
    case SP_NORM_STRIP_ACCENTS: return per_char(CH_ACCENTS, s, len, out, err);
    case SP_NORM_PREPEND:
        if (len && !sp_strbuf_add(out, n->str, n->str_len)) return oom(err);
        return sp_strbuf_add(out, s, len) ? SPINDLE_OK : oom(err);
    case SP_NORM_REPLACE:
        return sp_pattern_replace(&n->pat, s, len, n->str, n->str_len, out, err);
    case SP_NORM_STRIP: {
        size_t a = 0, b = len;
        while (n->left && a < b) {
            int l;
            uint32_t cp = sp_utf8_next(s + a, b - a, &l);
            if (!sp_uc_is_whitespace(cp)) break;
            a += (size_t)l;
        }
        while (n->right && b > a) {
            size_t k = b - 1;
            while (k > a && sp_utf8_is_continuation((unsigned char)s[k])) k--;
            int l;
            if (!sp_uc_is_whitespace(sp_utf8_next(s + k, b - k, &l))) break;
            b = k;
        }
        return sp_strbuf_add(out, s + a, b - a) ? SPINDLE_OK : oom(err);
    }
    case SP_NORM_BERT: {
        int modes[5], k = 0;
        if (n->clean) modes[k++] = CH_CLEAN;
        if (n->chinese) modes[k++] = CH_CHINESE;
        if (n->accents) { modes[k++] = -1; modes[k++] = CH_NONSPACING; }
        if (n->lower) modes[k++] = CH_LOWER;
        return chain(k, modes, s, len, out, err);
    }
    case SP_NORM_SEQ: {
        sp_strbuf a = {0}, b = {0};
        const char *cur = s;
        size_t cur_len = len;
        spindle_status st = SPINDLE_OK;
        for (int i = 0; i < n->n_subs && !st; i++) {
            sp_strbuf *dst = (i & 1) ? &b : &a;
            dst->len = 0;
            st = sp_norm_apply(&n->subs[i], cur, cur_len, dst, err);
            if (!st && !sp_strbuf_reserve(dst, 0)) st = oom(err);
            cur = dst->p;
            cur_len = dst->len;
        }
        if (!st && !sp_strbuf_add(out, cur, cur_len)) st = oom(err);
        sp_strbuf_free(&a);
        sp_strbuf_free(&b);
        return st;
    }
    }
    return sp_fail(err, SPINDLE_ERR_INTERNAL, "tokenizer: bad normalizer");
}
