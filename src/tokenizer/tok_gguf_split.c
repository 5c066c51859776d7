/* Pre-tokenizer of GGUF byte-level BPE vocabularies, following llama.cpp's
 * unicode_regex_split: the regex list chosen by tokenizer.ggml.pre splits
 * the text one regex after another (each regex splits every fragment of the
 * previous one, keeping matches and gaps). Parity with llama.cpp needs its
 * semantics, not a true Unicode regex engine:
 *  - the GPT-2, Llama-3 and Qwen2 regexes run as hand-written scanners over
 *    code-point flags (letter / number / whitespace ...), as llama.cpp does;
 *  - other regexes containing \p{..} run on a "collapsed" text where every
 *    non-ASCII code point becomes one placeholder byte for its category (and
 *    \p{X} in the regex becomes that byte plus the ASCII members), with
 *    ASCII-only character classes — PCRE2 in 8-bit non-UTF mode reproduces
 *    the std::regex llama.cpp uses;
 *  - regexes without \p{..} run on the code points with non-ASCII whitespace
 *    mapped to U+000B (PCRE2 UTF without UCP, like std::wregex in "C").
 * Code-point categories come from utf8proc (llama.cpp ships its own tables;
 * both are generated from UnicodeData.txt, possibly of different versions). */
#include "tokenizer/tok_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"

enum {
    F_UNDEF = 0x01, F_NUMBER = 0x02, F_LETTER = 0x04, F_SEP = 0x08,
    F_MARK = 0x10, F_PUNCT = 0x20, F_SYMBOL = 0x40, F_CONTROL = 0x80,
    F_WS = 0x100
};

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

/* The Unicode White_Space property, the set llama.cpp uses for \s. */
static bool is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static uint16_t cp_flags(uint32_t c) {
    uint16_t f;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: f = F_LETTER; break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: f = F_MARK; break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: f = F_NUMBER; break;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: f = F_PUNCT; break;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO: f = F_SYMBOL; break;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: f = F_SEP; break;
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: f = F_CONTROL; break;
    default: f = F_UNDEF; break;
    }
    if (is_white_space(c)) f |= F_WS;
    return f;
}

/* ------------------------------------------------------------ regex table */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3 "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BLOOM " ?[^(\\s|.,!?\xe2\x80\xa6\xe3\x80\x82\xef\xbc\x8c\xe3\x80\x81\xe0\xa5\xa4\xdb\x94\xd8\x8c)]+"
#define RE_CASED(num) "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+" \
    "((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|" num \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|" \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_DS3 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK_DS3 "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+"
#define RE_CJK_DS "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+"

/* tokenizer.ggml.pre names accepted by llama.cpp, with its regex list and
 * per-name flags (clean_spaces is llama.cpp's default true unless the name
 * turns it off). */
static const sp_gg_pre PRES[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, true, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", {RE_LLAMA3}, true, true, true},
    {"dbrx|smaug-bpe", {RE_LLAMA3}, false, true, false},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK_DS, "\\p{N}"}, false, false, false},
    {"deepseek-v3", {"\\p{N}{1,3}", RE_CJK_DS3, RE_DS3}, false, false, false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, true, false},
    {"starcoder|refact|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2}, false, true, false},
    {"command-r|smollm", {"\\p{N}", RE_GPT2}, false, false, false},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|a.x-4.0|mellum|mpt|olmo|jais|exaone4",
     {RE_GPT2}, false, true, false},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2", {RE_QWEN2}, false, false, false},
    {"stablelm2|megrez", {RE_QWEN2}, false, true, false},
    {"poro-chat", {RE_BLOOM}, false, false, false},
    {"bloom|gpt3-finnish", {RE_BLOOM}, false, true, false},
    {"viking", {RE_BLOOM, "\\p{N}"}, false, false, false},
    {"tekken", {RE_TEKKEN}, true, false, true},
    {"gpt-4o|llama4|kanana2|talkie", {RE_CASED("\\p{N}{1,3}")}, false, false, false},
};

/* ------------------------------------------------------- custom scanners */

typedef struct scan {
    const uint32_t *cps;
    const uint16_t *fl;
    size_t ini, end, prev;
    sp_gg_offsets *out;
    bool ok;
} scan;

static uint32_t cpt_at(const scan *s, size_t p) { return p >= s->ini && p < s->end ? s->cps[p] : 0xFFFFFFFFu; }
static uint16_t fl_at(const scan *s, size_t p) { return p >= s->ini && p < s->end ? s->fl[p] : 0; }

static bool offs_push(sp_gg_offsets *o, size_t len) {
    if (o->n == o->cap) {
        size_t c = o->cap ? o->cap * 2 : 64;
        size_t *v = realloc(o->v, c * sizeof *v);
        if (!v) return false;
        o->v = v;
        o->cap = c;
    }
    o->v[o->n++] = len;
    return true;
}

static size_t add_tok(scan *s, size_t end) {
    size_t len = end - s->prev;
    if (len && !offs_push(s->out, len)) s->ok = false;
    s->prev = end;
    return len;
}

#define NOT_WLN(f) (!((f) & (F_WS | F_LETTER | F_NUMBER)) && (f))

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|... contraction at pos (case-folded when `fold`): its length or 0. */
static size_t contraction(const scan *s, size_t pos, bool fold) {
    if (cpt_at(s, pos) != '\'' || pos + 1 >= s->end) return 0;
    uint32_t a = cpt_at(s, pos + 1);
    if (fold) a = ascii_lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= s->end) return 0;
    uint32_t b = cpt_at(s, pos + 2);
    if (fold) b = ascii_lower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* The whitespace tail shared by all scanners: \s+(?!\S) | \s+ | one char. */
static void ws_tail(scan *s, size_t *pos) {
    size_t n = 0;
    while (fl_at(s, *pos + n) & F_WS) n++;
    if (n > 1 && cpt_at(s, *pos + n) != 0xFFFFFFFFu) *pos += n - 1;
    else if (n > 0) *pos += n;
    else *pos += 1;
    add_tok(s, *pos);
}

static void scan_gpt2(scan *s) {
    for (size_t pos = s->ini; pos < s->end && s->ok;) {
        size_t c = contraction(s, pos, false);
        if (c) { pos += add_tok(s, pos + c); continue; }
        uint32_t cpt = cpt_at(s, pos);
        uint16_t f2 = cpt == ' ' ? fl_at(s, pos + 1) : fl_at(s, pos);
        uint16_t cls = (f2 & F_LETTER) ? F_LETTER : (f2 & F_NUMBER) ? F_NUMBER : 0;
        if (cls) {
            pos += cpt == ' ';
            while (fl_at(s, pos) & cls) pos++;
            add_tok(s, pos);
            continue;
        }
        if (NOT_WLN(f2)) {
            pos += cpt == ' ';
            while (NOT_WLN(fl_at(s, pos))) pos++;
            add_tok(s, pos);
            continue;
        }
        ws_tail(s, &pos);
    }
}

/* Llama-3 (max_digits 3) and Qwen2 (max_digits 1). */
static void scan_llama3(scan *s, size_t max_digits) {
    for (size_t pos = s->ini; pos < s->end && s->ok;) {
        size_t c = contraction(s, pos, true);
        if (c) { pos += add_tok(s, pos + c); continue; }
        uint32_t cpt = cpt_at(s, pos);
        uint16_t f = fl_at(s, pos);
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(cpt == '\r' || cpt == '\n' || (f & F_NUMBER)) &&
            ((f & F_LETTER) || (fl_at(s, pos + 1) & F_LETTER))) {
            pos++;
            while (fl_at(s, pos) & F_LETTER) pos++;
            add_tok(s, pos);
            continue;
        }
        if (f & F_NUMBER) { /* \p{N}{1,max} */
            size_t ini = pos;
            while (fl_at(s, pos) & F_NUMBER) {
                if (++pos - ini >= max_digits) { add_tok(s, pos); ini = pos; }
            }
            add_tok(s, pos);
            continue;
        }
        /* ' '?[^\s\p{L}\p{N}]+[\r\n]* */
        uint16_t f2 = cpt == ' ' ? fl_at(s, pos + 1) : f;
        if (NOT_WLN(f2) && f) {
            pos += cpt == ' ';
            while (NOT_WLN(fl_at(s, pos))) pos++;
            while (cpt_at(s, pos) == '\r' || cpt_at(s, pos) == '\n') pos++;
            add_tok(s, pos);
            continue;
        }
        /* \s*[\r\n]+ ends after the last \r or \n of the whitespace run */
        size_t n = 0, last_rn = 0;
        while (fl_at(s, pos + n) & F_WS) {
            uint32_t c2 = cpt_at(s, pos + n);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + n + 1;
            n++;
        }
        if (last_rn > 0) {
            pos = last_rn;
            add_tok(s, pos);
            continue;
        }
        ws_tail(s, &pos);
    }
}

/* ----------------------------------------------------- PCRE2 fallbacks */

static const char *ucat_repl(const char *p, size_t n, char *ph) {
    static const struct { const char *name; char ph; const char *ascii; } T[] = {
        {"\\p{N}", (char)0xD1, "0-9"},
        {"\\p{L}", (char)0xD2, "A-Za-z"},
        {"\\p{P}", (char)0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
        {"\\p{M}", (char)0xD4, ""},
        {"\\p{S}", (char)0xD5, "\\$\\+<->\\^`\\|\\~"},
        {"\\p{Lu}", (char)0xD2, "A-Za-z"}, {"\\p{Ll}", (char)0xD2, "A-Za-z"},
        {"\\p{Lt}", (char)0xD2, "A-Za-z"}, {"\\p{Lm}", (char)0xD2, "A-Za-z"},
        {"\\p{Lo}", (char)0xD2, "A-Za-z"},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (strlen(T[i].name) == n && !memcmp(T[i].name, p, n)) {
            *ph = T[i].ph;
            return T[i].ascii;
        }
    return NULL;
}

static bool has_ucat(const char *re) {
    static const char *names[] = {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}"};
    for (size_t i = 0; i < 5; i++)
        if (strstr(re, names[i])) return true;
    return false;
}

/* llama.cpp's rewrite of a \p{..} regex for the collapsed text. */
static bool collapse_regex(const char *re, sp_strbuf *out) {
    bool inside = false;
    size_t n = strlen(re);
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
            inside = true;
            if (!sp_strbuf_add(out, "[", 1)) return false;
            continue;
        }
        if (inside && re[i] == ']' && re[i - 1] != '\\') {
            inside = false;
            if (!sp_strbuf_add(out, "]", 1)) return false;
            continue;
        }
        if (re[i] == '\\' && i + 3 < n && re[i + 1] == 'p' && re[i + 2] == '{') {
            const char *close = strchr(re + i + 3, '}');
            char ph;
            const char *ascii = close && (size_t)(close - re) <= i + 10
                                    ? ucat_repl(re + i, (size_t)(close - re) - i + 1, &ph) : NULL;
            if (ascii) {
                char phs[5];
                snprintf(phs, sizeof phs, "\\x%02X", (unsigned char)ph);
                if ((!inside && !sp_strbuf_add(out, "[", 1)) || !sp_strbuf_add(out, phs, 4) ||
                    !sp_strbuf_add(out, ascii, strlen(ascii)) || (!inside && !sp_strbuf_add(out, "]", 1)))
                    return false;
                i = (size_t)(close - re);
                continue;
            }
        }
        if (!sp_strbuf_add(out, re + i, 1)) return false;
    }
    return sp_strbuf_add(out, "", 0); /* NUL-terminated, also when empty */
}

static spindle_status compile(const char *re, sp_gg_regex *r, spindle_error *err) {
    sp_strbuf src = {0};
    uint32_t opts = PCRE2_DOLLAR_ENDONLY; /* ECMAScript '$' is end of input only */
    if (!strcmp(re, RE_GPT2)) { r->custom = 1; return SPINDLE_OK; }
    if (!strcmp(re, RE_LLAMA3)) { r->custom = 3; return SPINDLE_OK; }
    if (!strcmp(re, RE_QWEN2)) { r->custom = 2; return SPINDLE_OK; }
    r->collapsed = has_ucat(re);
    if (r->collapsed) {
        if (!collapse_regex(re, &src)) { sp_strbuf_free(&src); return oom(err); }
        re = src.p;
    } else {
        opts |= PCRE2_UTF;
    }
    int ec;
    PCRE2_SIZE eo;
    r->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
    sp_strbuf_free(&src);
    if (!r->re) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer: pre-tokenizer regex %zu fails to compile", (size_t)eo);
    pcre2_jit_compile(r->re, PCRE2_JIT_COMPLETE);
    return SPINDLE_OK;
}

const sp_gg_pre *sp_gg_pre_find(const char *pre, size_t len) {
    for (size_t i = 0; i < sizeof PRES / sizeof PRES[0]; i++)
        for (const char *p = PRES[i].names; *p;) {
            size_t n = strcspn(p, "|");
            if (n == len && !memcmp(p, pre, len)) return &PRES[i];
            p += n + (p[n] == '|');
        }
    return NULL;
}

spindle_status sp_gg_splitter_init(const char *pre, sp_gg_splitter *s, spindle_error *err) {
    memset(s, 0, sizeof *s);
    const sp_gg_pre *d = sp_gg_pre_find(pre, strlen(pre));
    if (!d) return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "tokenizer: GGUF pre-tokenizer '%.60s' is not supported", pre);
    s->ignore_merges = d->ignore_merges;
    s->clean_spaces = d->clean_spaces;
    s->add_bos = d->add_bos;
    for (int i = 0; i < SP_GG_MAX_RE && d->re[i]; i++) {
        spindle_status st = compile(d->re[i], &s->re[i], err);
        s->n = i + 1;
        if (st) return st;
    }
    return SPINDLE_OK;
}

void sp_gg_splitter_free(sp_gg_splitter *s) {
    for (int i = 0; i < s->n; i++)
        if (s->re[i].re) pcre2_code_free(s->re[i].re);
    memset(s, 0, sizeof *s);
}

/* Split each fragment of `in` with a PCRE2 regex over `subj`, where code
 * point i starts at byte cp_off[i] (cp_off[n] = total). */
static spindle_status regex_split(const sp_gg_regex *r, const char *subj, const size_t *cp_off,
                                  size_t n_cp, const sp_gg_offsets *in, sp_gg_offsets *out,
                                  spindle_error *err) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->re, NULL);
    if (!md) return oom(err);
    /* byte offset -> code point index */
    size_t total = cp_off[n_cp];
    size_t *cp_of = malloc((total + 1) * sizeof *cp_of);
    if (!cp_of) { pcre2_match_data_free(md); return oom(err); }
    for (size_t i = 0; i <= n_cp; i++) cp_of[cp_off[i]] = i;
    spindle_status st = SPINDLE_OK;
    size_t start = 0;
    for (size_t f = 0; f < in->n && !st; f++) {
        size_t b0 = cp_off[start], b1 = cp_off[start + in->v[f]];
        size_t at = 0, done = 0; /* byte offsets relative to b0 */
        while (at <= b1 - b0) {
            int rc = pcre2_match(r->re, (PCRE2_SPTR)(subj + b0), b1 - b0, at, 0, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) { st = sp_fail(err, SPINDLE_ERR_INTERNAL, "tokenizer: regex match failed (%d)", rc); break; }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* empty match: step one code point */
                at = ms + 1;
                while (at < b1 - b0 && sp_utf8_is_continuation((unsigned char)subj[b0 + at]) && !r->collapsed) at++;
                continue;
            }
            size_t cs = cp_of[b0 + ms], ce = cp_of[b0 + me], cd = cp_of[b0 + done];
            if ((cs > cd && !offs_push(out, cs - cd)) || !offs_push(out, ce - cs)) { st = oom(err); break; }
            done = at = me;
        }
        size_t cd = cp_of[b0 + done], cend = start + in->v[f];
        if (!st && cend > cd && !offs_push(out, cend - cd)) st = oom(err);
        start = cend;
    }
    free(cp_of);
    pcre2_match_data_free(md);
    return st;
}

spindle_status sp_gg_split(const sp_gg_splitter *s, const char *text, size_t n,
                           sp_gg_offsets *out, spindle_error *err) {
    out->n = 0;
    if (!n) return SPINDLE_OK;
    uint32_t *cps = malloc(n * sizeof *cps);
    uint16_t *fl = malloc(n * sizeof *fl);
    size_t *cp_off = malloc((n + 1) * sizeof *cp_off);
    char *coll = malloc(n + 1);
    sp_strbuf wide = {0};
    size_t *wide_off = malloc((n + 1) * sizeof *wide_off);
    sp_gg_offsets cur = {0}, nxt = {0};
    spindle_status st = SPINDLE_OK;
    if (!cps || !fl || !cp_off || !coll || !wide_off) { st = oom(err); goto done; }
    size_t m = 0;
    for (size_t i = 0; i < n; m++) {
        int l;
        cp_off[m] = i;
        cps[m] = sp_utf8_next(text + i, n - i, &l);
        fl[m] = cp_flags(cps[m]);
        i += (size_t)l;
    }
    cp_off[m] = n;
    /* collapsed text (one byte per code point) and the \s-mapped text */
    for (size_t i = 0; i < m; i++) {
        uint32_t c = cps[i];
        if (c < 128) coll[i] = (char)c;
        else if (fl[i] & F_WS) coll[i] = 0x0B;
        else {
            uint16_t cat = fl[i] & 0xFF;
            coll[i] = (char)(cat == F_NUMBER ? 0xD1 : cat == F_LETTER ? 0xD2 : cat == F_PUNCT ? 0xD3
                           : cat == F_MARK ? 0xD4 : cat == F_SYMBOL ? 0xD5 : 0xD0);
        }
        wide_off[i] = wide.len;
        if (c > 0x7F && (fl[i] & F_WS)) c = 0x0B;
        if (!sp_strbuf_add_cp(&wide, c)) { st = oom(err); goto done; }
    }
    wide_off[m] = wide.len;
    coll[m] = '\0';
    size_t *ident = malloc((m + 1) * sizeof *ident);
    if (!ident) { st = oom(err); goto done; }
    for (size_t i = 0; i <= m; i++) ident[i] = i;
    if (!offs_push(&cur, m)) { free(ident); st = oom(err); goto done; }
    for (int r = 0; r < s->n && !st; r++) {
        const sp_gg_regex *re = &s->re[r];
        nxt.n = 0;
        if (re->custom) {
            scan sc = {cps, fl, 0, 0, 0, &nxt, true};
            size_t start = 0;
            for (size_t f = 0; f < cur.n && sc.ok; f++) {
                sc.ini = sc.prev = start;
                sc.end = start + cur.v[f];
                if (re->custom == 1) scan_gpt2(&sc);
                else scan_llama3(&sc, re->custom == 3 ? 3 : 1);
                start = sc.end;
            }
            if (!sc.ok) st = oom(err);
        } else if (re->collapsed) {
            st = regex_split(re, coll, ident, m, &cur, &nxt, err);
        } else {
            st = regex_split(re, wide.p, wide_off, m, &cur, &nxt, err);
        }
        sp_gg_offsets t = cur; cur = nxt; nxt = t;
    }
    free(ident);
    /* lengths in code points -> lengths in bytes */
    if (!st) {
        size_t start = 0;
        for (size_t f = 0; f < cur.n && !st; f++) {
            if (!offs_push(out, cp_off[start + cur.v[f]] - cp_off[start])) st = oom(err);
            start += cur.v[f];
        }
    }
done:
    free(cps); free(fl); free(cp_off); free(coll); free(wide_off);
    sp_strbuf_free(&wide);
    free(cur.v); free(nxt.v);
    return st;
}
