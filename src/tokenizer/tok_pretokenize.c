/* Pre-tokenizers of tokenizer.json (HF `pre_tokenizers`): ByteLevel, Split,
 * Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit,
 * BertPreTokenizer, Sequence. Each turns pieces into smaller pieces;
 * added-token pieces pass through untouched. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static const char *GPT2_RE =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* \w as Oniguruma (HF's regex engine) has it: Unicode Word, i.e.
 * Alphabetic + marks + decimal digits + connectors + joiners. */
static const char *WS_RE =
    "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]+"
    "|[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}\\s]+";

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * others to U+0100 onwards in byte order. */
static uint32_t byte_cp(unsigned b) {
    if (b <= 32) return 256 + b;
    if (b >= 127 && b <= 160) return 256 + 33 + (b - 127);
    if (b == 173) return 323;
    return b;
}

int sp_cp_to_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 255 && cp != 173)) return (int)cp;
    if (cp >= 256 && cp <= 288) return (int)(cp - 256);
    if (cp >= 289 && cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    return -1;
}

spindle_status sp_split_behavior_parse(const char *s, sp_split_behavior *out,
                                       spindle_error *err) {
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                  "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (s && !strcmp(s, names[i])) { *out = (sp_split_behavior)i; return SPINDLE_OK; }
    return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: unknown split behavior '%s'",
                   s ? s : "(none)");
}

spindle_status sp_pretok_parse(const cJSON *j, sp_pretok *p, spindle_error *err) {
    memset(p, 0, sizeof *p);
    const char *t = sp_json_str(j, "type");
    if (!t) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: pre_tokenizer without type");
    spindle_status st = SPINDLE_OK;
    if (!strcmp(t, "ByteLevel")) {
        p->type = SP_PRE_BYTELEVEL;
        p->add_prefix_space = sp_json_bool(j, "add_prefix_space", true);
        p->use_regex = sp_json_bool(j, "use_regex", true);
        if (p->use_regex) st = sp_pattern_regex(GPT2_RE, &p->pat, err);
    } else if (!strcmp(t, "Split")) {
        p->type = SP_PRE_SPLIT;
        st = sp_pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), &p->pat, err);
        if (!st) st = sp_split_behavior_parse(sp_json_str(j, "behavior"), &p->behavior, err);
        p->invert = sp_json_bool(j, "invert", false);
    } else if (!strcmp(t, "Metaspace")) {
        p->type = SP_PRE_METASPACE;
        const char *r = sp_json_str(j, "replacement");
        if (!r) r = "\xE2\x96\x81";
        size_t rl = strlen(r);
        int l;
        if (rl == 0 || rl > 4) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: bad Metaspace replacement");
        sp_utf8_next(r, rl, &l);
        memcpy(p->repl, r, (size_t)l);
        p->repl_len = l;
        const char *ps = sp_json_str(j, "prepend_scheme");
        p->prepend = ps ? (!strcmp(ps, "first") ? 1 : !strcmp(ps, "never") ? 2 : 0)
                        : (sp_json_bool(j, "add_prefix_space", true) ? 0 : 2);
        p->split = sp_json_bool(j, "split", true);
    } else if (!strcmp(t, "Digits")) {
        p->type = SP_PRE_DIGITS;
        p->individual_digits = sp_json_bool(j, "individual_digits", false);
    } else if (!strcmp(t, "Punctuation")) {
        p->type = SP_PRE_PUNCT;
        const char *b = sp_json_str(j, "behavior");
        p->behavior = SP_SPLIT_ISOLATED;
        if (b) st = sp_split_behavior_parse(b, &p->behavior, err);
    } else if (!strcmp(t, "Whitespace")) {
        p->type = SP_PRE_WHITESPACE;
        st = sp_pattern_regex(WS_RE, &p->pat, err);
    } else if (!strcmp(t, "WhitespaceSplit")) {
        p->type = SP_PRE_WSPLIT;
    } else if (!strcmp(t, "BertPreTokenizer")) {
        p->type = SP_PRE_BERT;
    } else if (!strcmp(t, "Sequence")) {
        p->type = SP_PRE_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr)) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: Sequence pre_tokenizer without list");
        p->subs = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *p->subs);
        if (!p->subs) return oom(err);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            st = sp_pretok_parse(it, &p->subs[p->n_subs], err);
            p->n_subs++;
            if (st) return st;
        }
    } else {
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "tokenizer.json: unsupported pre_tokenizer '%s'", t);
    }
    return st;
}

void sp_pretok_free(sp_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_subs; i++) sp_pretok_free(&p->subs[i]);
    free(p->subs);
    sp_pattern_free(&p->pat);
}

/* HF NormalizedString::split: turn match/gap spans into kept pieces. After
 * this, spans with match == true are to be removed. */
void sp_split_behave(sp_spans *sp, sp_split_behavior b, bool invert) {
    if (invert)
        for (size_t i = 0; i < sp->n; i++) sp->v[i].match = !sp->v[i].match;
    if (b == SP_SPLIT_REMOVED) return;
    size_t n = sp->n, o = 0;
    bool prev = false;
    if (b == SP_SPLIT_NEXT) {
        /* Walk backwards, writing from the end. */
        size_t w = n;
        for (size_t k = n; k-- > 0;) {
            sp_span s = sp->v[k];
            if (s.match && !prev && w < n) sp->v[w].start = s.start;
            else sp->v[--w] = (sp_span){s.start, s.end, false};
            prev = s.match;
        }
        memmove(sp->v, sp->v + w, (n - w) * sizeof *sp->v);
        sp->n = n - w;
        return;
    }
    for (size_t k = 0; k < n; k++) {
        sp_span s = sp->v[k];
        bool merge = (b == SP_SPLIT_PREV && s.match && !prev) ||
                     (b == SP_SPLIT_CONTIGUOUS && s.match == prev);
        if (merge && o > 0) sp->v[o - 1].end = s.end;
        else sp->v[o++] = (sp_span){s.start, s.end, false};
        prev = s.match;
    }
    sp->n = o;
}

/* Spans where every character satisfying `pred` is its own match. */
static bool char_spans(const char *s, size_t n, bool (*pred)(uint32_t),
                       sp_spans *sp) {
    sp->n = 0;
    size_t last = 0, i = 0;
    while (i < n) {
        int l;
        uint32_t cp = sp_utf8_next(s + i, n - i, &l);
        if (pred(cp)) {
            if (last < i && !sp_spans_push(sp, last, i, false)) return false;
            if (!sp_spans_push(sp, i, i + (size_t)l, true)) return false;
            last = i + (size_t)l;
        }
        i += (size_t)l;
    }
    return last >= n || sp_spans_push(sp, last, n, false);
}

static bool push_spans(sp_pieces *out, const char *s, const sp_spans *sp,
                       bool first) {
    for (size_t k = 0; k < sp->n; k++) {
        const sp_span *x = &sp->v[k];
        if (x->match || x->end == x->start) continue;
        if (!sp_pieces_push(out, s + x->start, x->end - x->start, -1,
                            first && x->start == 0))
            return false;
    }
    return true;
}

static bool is_ws(uint32_t c) { return sp_uc_is_whitespace(c); }

/* Split one piece s[0..n) into `out`. */
static spindle_status split_piece(const sp_pretok *p, const char *s, size_t n,
                                  bool first, sp_pieces *out, sp_spans *sp,
                                  sp_strbuf *scratch, spindle_error *err) {
    spindle_status st;
    switch (p->type) {
    case SP_PRE_SPLIT:
    case SP_PRE_WHITESPACE:
        if ((st = sp_pattern_find(&p->pat, s, n, sp, err))) return st;
        sp_split_behave(sp, p->type == SP_PRE_SPLIT ? p->behavior : SP_SPLIT_REMOVED,
                        p->type == SP_PRE_SPLIT ? p->invert : true);
        break;
    case SP_PRE_DIGITS:
        if (!char_spans(s, n, sp_uc_is_numeric, sp)) return oom(err);
        sp_split_behave(sp, p->individual_digits ? SP_SPLIT_ISOLATED : SP_SPLIT_CONTIGUOUS, false);
        break;
    case SP_PRE_PUNCT:
        if (!char_spans(s, n, sp_uc_is_punct, sp)) return oom(err);
        sp_split_behave(sp, p->behavior, false);
        break;
    case SP_PRE_WSPLIT:
        if (!char_spans(s, n, is_ws, sp)) return oom(err);
        break;
    case SP_PRE_BERT: {
        if (!char_spans(s, n, is_ws, sp)) return oom(err);
        sp_pieces mid = {0};
        bool ok = push_spans(&mid, s, sp, first);
        for (size_t i = 0; ok && i < mid.n; i++) {
            ok = char_spans(mid.text.p + mid.v[i].off, mid.v[i].len, sp_uc_is_punct, sp);
            if (ok) {
                sp_split_behave(sp, SP_SPLIT_ISOLATED, false);
                ok = push_spans(out, mid.text.p + mid.v[i].off, sp, mid.v[i].first);
            }
        }
        sp_pieces_free(&mid);
        return ok ? SPINDLE_OK : oom(err);
    }
    case SP_PRE_METASPACE: {
        scratch->len = 0;
        bool ok = true;
        size_t i = 0;
        /* HF checks for the replacement after replacing spaces. */
        bool starts = (n && s[0] == ' ') ||
                      (n >= (size_t)p->repl_len && !memcmp(s, p->repl, (size_t)p->repl_len));
        if ((p->prepend == 0 || (p->prepend == 1 && first)) && !starts)
            ok = sp_strbuf_add(scratch, p->repl, (size_t)p->repl_len);
        while (ok && i < n) {
            const char *sp_at = memchr(s + i, ' ', n - i);
            size_t e = sp_at ? (size_t)(sp_at - s) : n;
            ok = sp_strbuf_add(scratch, s + i, e - i);
            if (ok && sp_at) ok = sp_strbuf_add(scratch, p->repl, (size_t)p->repl_len);
            i = e + (sp_at ? 1 : 0);
        }
        if (!ok) return oom(err);
        if (!p->split) {
            if (scratch->len && !sp_pieces_push(out, scratch->p, scratch->len, -1, first)) return oom(err);
            return SPINDLE_OK;
        }
        sp_pattern lit = {.lit = (char *)p->repl, .lit_len = (size_t)p->repl_len};
        if ((st = sp_pattern_find(&lit, scratch->p, scratch->len, sp, err))) return st;
        sp_split_behave(sp, SP_SPLIT_NEXT, false);
        return push_spans(out, scratch->p, sp, first) ? SPINDLE_OK : oom(err);
    }
    case SP_PRE_BYTELEVEL: {
        const char *src = s;
        size_t len = n;
        if (p->add_prefix_space && !(n && s[0] == ' ')) {
            scratch->len = 0;
            if (!sp_strbuf_add(scratch, " ", 1) || !sp_strbuf_add(scratch, s, n)) return oom(err);
            src = scratch->p;
            len = scratch->len;
        }
        if (p->use_regex) {
            if ((st = sp_pattern_find(&p->pat, src, len, sp, err))) return st;
            sp_split_behave(sp, SP_SPLIT_ISOLATED, false);
        } else {
            sp->n = 0;
            if (!sp_spans_push(sp, 0, len, false)) return oom(err);
        }
        for (size_t k = 0; k < sp->n; k++) {
            size_t a = sp->v[k].start, b = sp->v[k].end;
            if (a == b) continue;
            size_t at = out->text.len;
            if (!sp_strbuf_reserve(&out->text, 2 * (b - a))) return oom(err);
            char *w = out->text.p + at;
            for (size_t i = a; i < b; i++) {
                uint32_t cp = byte_cp((unsigned char)src[i]);
                w += sp_utf8_encode(cp, w);
            }
            size_t wl = (size_t)(w - (out->text.p + at));
            /* Register the bytes written in place as a piece. */
            if (!sp_pieces_push(out, NULL, wl, -1, first && a == 0)) return oom(err);
            out->v[out->n - 1].off = at;
            out->text.len = at + wl;
        }
        return SPINDLE_OK;
    }
    case SP_PRE_SEQ:
        break;
    }
    return push_spans(out, s, sp, first) ? SPINDLE_OK : oom(err);
}

spindle_status sp_pretok_apply(const sp_pretok *p, sp_pieces *io, sp_pieces *tmp,
                               spindle_error *err) {
    if (p->type == SP_PRE_SEQ) {
        for (int i = 0; i < p->n_subs; i++) {
            spindle_status st = sp_pretok_apply(&p->subs[i], io, tmp, err);
            if (st) return st;
        }
        return SPINDLE_OK;
    }
    sp_pieces_reset(tmp);
    sp_spans sp = {0};
    sp_strbuf scratch = {0};
    spindle_status st = SPINDLE_OK;
    for (size_t i = 0; i < io->n && !st; i++) {
        const sp_piece *pc = &io->v[i];
        if (pc->id >= 0) {
            if (!sp_pieces_push(tmp, "", 0, pc->id, pc->first)) st = oom(err);
            continue;
        }
        st = split_piece(p, io->text.p + pc->off, pc->len, pc->first, tmp, &sp,
                         &scratch, err);
    }
    free(sp.v);
    sp_strbuf_free(&scratch);
    sp_pieces swap = *io;
    *io = *tmp;
    *tmp = swap;
    return st;
}

bool sp_pieces_push(sp_pieces *p, const char *s, size_t len, int32_t id,
                    bool first) {
    if (p->n == p->cap) {
        size_t c = p->cap ? p->cap * 2 : 16;
        sp_piece *v = realloc(p->v, c * sizeof *v);
        if (!v) return false;
        p->v = v;
        p->cap = c;
    }
    size_t off = p->text.len;
    if (s && !sp_strbuf_add(&p->text, s, len)) return false;
    p->v[p->n++] = (sp_piece){off, len, id, first};
    return true;
}

void sp_pieces_reset(sp_pieces *p) {
    p->n = 0;
    p->text.len = 0;
}

void sp_pieces_free(sp_pieces *p) {
    sp_strbuf_free(&p->text);
    free(p->v);
    memset(p, 0, sizeof *p);
}
