/* Lookups in HF's Unicode tables (tok_unicode_tables.c, see tok_unicode.h
 * for why they exist) and the regex rewrite that puts HF's character
 * classes into PCRE2 patterns. */
#include "tokenizer/tok_unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define UC_MAX 0x10FFFFu

typedef struct range_set {
    sp_uc_range *v;
    size_t n, cap;
} range_set;

/* Append lo..hi (ranges come in ascending order), merging neighbours. */
static bool set_add(range_set *s, uint32_t lo, uint32_t hi) {
    if (s->n && s->v[s->n - 1].hi + 1 >= lo) {
        if (hi > s->v[s->n - 1].hi) s->v[s->n - 1].hi = hi;
        return true;
    }
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 64;
        sp_uc_range *v = realloc(s->v, c * sizeof *v);
        if (!v) return false;
        s->v = v;
        s->cap = c;
    }
    s->v[s->n++] = (sp_uc_range){lo, hi};
    return true;
}

static bool set_complement(const range_set *in, range_set *out) {
    uint32_t next = 0;
    for (size_t i = 0; i < in->n; i++) {
        if (in->v[i].lo > next && !set_add(out, next, in->v[i].lo - 1)) return false;
        next = in->v[i].hi + 1;
    }
    return next > UC_MAX || set_add(out, next, UC_MAX);
}

/* Does general category `gc` belong to the property `name` ("L", "Lu")? */
static bool category_in(uint8_t gc, const char *name) {
    const char *g = SP_UC_CATEGORY_NAMES[gc];
    return name[1] ? !strcmp(g, name) : g[0] == name[0];
}

static bool is_category(const char *name) {
    if (!strcmp(name, "C") || !strcmp(name, "Cn")) return true;
    for (uint8_t k = 0; SP_UC_CATEGORY_NAMES[k]; k++)
        if (category_in(k, name)) return true;
    return false;
}

/* HF's members of an escape ("s") or category ("L", "Cn"); false when
 * unknown (*known = false) or out of memory. */
static bool class_set(const char *name, bool *known, range_set *out) {
    *known = true;
    for (size_t i = 0; i < SP_UC_N_CLASSES; i++) {
        if (strcmp(SP_UC_CLASSES[i].name, name)) continue;
        for (size_t k = 0; k < SP_UC_CLASSES[i].n; k++)
            if (!set_add(out, SP_UC_CLASSES[i].v[k].lo, SP_UC_CLASSES[i].v[k].hi)) return false;
        return true;
    }
    if (!is_category(name)) { *known = false; return true; }
    /* Unassigned code points are in no run: C (not L M N P S Z) and Cn
     * are complements of runs. */
    bool other = !strcmp(name, "C"), unassigned = !strcmp(name, "Cn");
    range_set assigned = {0};
    range_set *dst = (other || unassigned) ? &assigned : out;
    bool ok = true;
    for (size_t i = 0; i < SP_UC_N_CATEGORIES && ok; i++) {
        const sp_uc_category_run *r = &SP_UC_CATEGORIES[i];
        bool take = unassigned || (other ? SP_UC_CATEGORY_NAMES[r->gc][0] != 'C'
                                         : category_in(r->gc, name));
        if (take) ok = set_add(dst, r->lo, r->hi);
    }
    if (ok && dst == &assigned) ok = set_complement(&assigned, out);
    free(assigned.v);
    return ok;
}

/* One class item (range) in PCRE2 syntax; surrogates cannot be named. */
static bool emit_range(sp_strbuf *out, uint32_t lo, uint32_t hi) {
    if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
    if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
    if (lo > hi) return true;
    char b[32];
    int n = lo == hi ? snprintf(b, sizeof b, "\\x{%X}", (unsigned)lo)
                     : snprintf(b, sizeof b, "\\x{%X}-\\x{%X}", (unsigned)lo, (unsigned)hi);
    return sp_strbuf_add(out, b, (size_t)n);
}

/* The set (or its complement) as class items inside a [...] already open,
 * or as a class of its own. */
static bool emit_set(sp_strbuf *out, const range_set *s, bool negate, bool in_class) {
    range_set comp = {0};
    const range_set *src = s;
    if (negate && in_class) {
        if (!set_complement(s, &comp)) return false;
        src = &comp;
    }
    bool ok = in_class || sp_strbuf_add(out, negate ? "[^" : "[", negate ? 2 : 1);
    for (size_t i = 0; i < src->n && ok; i++) ok = emit_range(out, src->v[i].lo, src->v[i].hi);
    if (ok && !in_class) ok = sp_strbuf_add(out, "]", 1);
    free(comp.v);
    return ok;
}

/* At src (just after a backslash): the escape's class name into name[]
 * and whether it is negated; returns its length, 0 if it is not one of
 * the class escapes. */
static size_t class_escape(const char *src, char name[16], bool *negate) {
    char c = src[0];
    if (strchr("sSdDwW", c) && c) {
        name[0] = (char)(c | 0x20);
        name[1] = 0;
        *negate = c < 'a';
        return 1;
    }
    if (c != 'p' && c != 'P') return 0;
    *negate = c == 'P';
    if (src[1] != '{') return 0; /* Oniguruma reads \pL as "pL"; left to PCRE2 */
    const char *end = strchr(src + 2, '}');
    const char *s = src + 2;
    if (!end) return 0;
    if (*s == '^') { *negate = !*negate; s++; }
    size_t n = (size_t)(end - s);
    if (n == 0 || n >= 16) return 0;
    memcpy(name, s, n);
    name[n] = 0;
    return (size_t)(end - src) + 1;
}

bool sp_uc_rewrite_regex(const char *src, sp_strbuf *out) {
    bool in_class = false, ok = true;
    size_t i = 0;
    while (src[i] && ok) {
        char c = src[i];
        if (c == '\\' && src[i + 1] == 'Q') { /* literal up to \E */
            const char *e = strstr(src + i + 2, "\\E");
            size_t n = e ? (size_t)(e - (src + i)) + 2 : strlen(src + i);
            ok = sp_strbuf_add(out, src + i, n);
            i += n;
            continue;
        }
        if (c == '\\' && src[i + 1]) {
            char name[16];
            bool negate, known = false;
            size_t n = class_escape(src + i + 1, name, &negate);
            range_set set = {0};
            if (n) ok = class_set(name, &known, &set);
            if (ok && known) ok = emit_set(out, &set, negate, in_class);
            else if (ok) { n = 1; ok = sp_strbuf_add(out, src + i, 2); }
            free(set.v);
            i += 1 + (known ? n : 1);
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            size_t n = 1;
            if (src[i + n] == '^') n++;
            if (src[i + n] == ']') n++; /* a leading ] is a literal */
            ok = sp_strbuf_add(out, src + i, n);
            i += n;
            continue;
        }
        if (c == '[' && in_class && src[i + 1] == ':') { /* [:alpha:] */
            const char *e = strstr(src + i + 2, ":]");
            size_t n = e ? (size_t)(e - (src + i)) + 2 : 1;
            ok = sp_strbuf_add(out, src + i, n);
            i += n;
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        ok = sp_strbuf_add(out, src + i, 1);
        i++;
    }
    return ok && sp_strbuf_reserve(out, 1) && (out->p[out->len] = 0, true);
}

int sp_uc_lower(uint32_t cp, uint32_t out[2]) {
    size_t lo = 0, hi = SP_UC_N_LOWER;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (SP_UC_LOWER[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo == SP_UC_N_LOWER || SP_UC_LOWER[lo].cp != cp) {
        out[0] = cp;
        return 1;
    }
    out[0] = SP_UC_LOWER[lo].lower[0];
    out[1] = SP_UC_LOWER[lo].lower[1];
    return out[1] ? 2 : 1;
}

int sp_uc_norm_barrier(uint32_t cp) {
    if (!SP_UC_N_NORM_BARRIERS || cp < SP_UC_NORM_BARRIERS[0].cp) return 0;
    size_t lo = 0, hi = SP_UC_N_NORM_BARRIERS;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (SP_UC_NORM_BARRIERS[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < SP_UC_N_NORM_BARRIERS && SP_UC_NORM_BARRIERS[lo].cp == cp
               ? SP_UC_NORM_BARRIERS[lo].forms : 0;
}

bool sp_uc_in_ranges(const sp_uc_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo) hi = mid;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}
