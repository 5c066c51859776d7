/* Building a lowered grammar: rules, byte sets, UTF-8 range splitting for
 * code-point classes, and the checks that make the matcher's expansion
 * terminate (every referenced rule defined, no left recursion) and its
 * language non-empty (alternatives that can never complete are marked, so
 * that the matcher never enters one). */
#include "grammar/gram_build.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static bool grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return true;
    int c = *cap ? *cap * 2 : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

bool gb_push(gb_builder *b, gb_vec *v, int32_t e) {
    if (b->oom || !grow((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v))
        return !(b->oom = true);
    v->v[v->n++] = e;
    b->n_elems++;
    return true;
}

static int add_rule(gb_builder *b, char *name) {
    if (!name || !grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1,
                       sizeof *b->rules)) {
        free(name);
        b->oom = true;
        return -1;
    }
    b->rules[b->n_rules] = (gb_rule){.name = name, .first_use = (size_t)-1, .rep_below = -1};
    return b->n_rules++;
}

int gb_rule_id(gb_builder *b, const char *name, size_t len) {
    for (int i = 0; i < b->n_rules; i++)
        if (strlen(b->rules[i].name) == len && !memcmp(b->rules[i].name, name, len))
            return i;
    char *copy = malloc(len + 1);
    if (copy) {
        memcpy(copy, name, len);
        copy[len] = 0;
    }
    return add_rule(b, copy);
}

int gb_new_rule(gb_builder *b, const char *base) {
    size_t n = strlen(base) + 16;
    char *name = malloc(n);
    if (name) snprintf(name, n, "%s-%d", base, b->n_rules);
    int r = add_rule(b, name);
    if (r >= 0) b->rules[r].defined = true;
    return r;
}

gb_vec *gb_add_alt(gb_builder *b, int r) {
    gb_rule *rule = &b->rules[r];
    if (b->oom || !grow((void **)&rule->alts, &rule->cap_alts, rule->n_alts + 1,
                        sizeof *rule->alts)) {
        b->oom = true;
        return NULL;
    }
    rule->alts[rule->n_alts] = (gb_vec){0};
    return &rule->alts[rule->n_alts++];
}

int32_t gb_set(gb_builder *b, const uint8_t set[32]) {
    for (int i = b->n_sets - 1; i >= 0 && i >= b->n_sets - 64; i--)
        if (!memcmp(b->sets[i], set, 32)) return i;
    if (!grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
        b->oom = true;
        return 0;
    }
    memcpy(b->sets[b->n_sets], set, 32);
    return b->n_sets++;
}

int32_t gb_byte(gb_builder *b, uint8_t byte) {
    uint8_t set[32] = {0};
    set[byte >> 3] |= (uint8_t)(1u << (byte & 7));
    return gb_set(b, set);
}

static int32_t byte_range(gb_builder *b, unsigned lo, unsigned hi) {
    uint8_t set[32] = {0};
    for (unsigned c = lo; c <= hi; c++) set[c >> 3] |= (uint8_t)(1u << (c & 7));
    return gb_set(b, set);
}

static int utf8_bytes(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Split [lo, hi] into ranges whose UTF-8 forms are byte-range sequences
 * of one length (the regex-syntax crate's Utf8Sequences), one alternative
 * of rule r each. */
static void utf8_split(gb_builder *b, int r, uint32_t lo, uint32_t hi) {
    static const uint32_t edges[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= edges[i] && hi > edges[i]) {
            utf8_split(b, r, lo, edges[i]);
            utf8_split(b, r, edges[i] + 1, hi);
            return;
        }
    if (hi >= 0x80)
        for (int i = 1; i < 4; i++) {
            uint32_t m = (1u << (6 * i)) - 1;
            if ((lo & ~m) != (hi & ~m)) {
                if (lo & m) {
                    utf8_split(b, r, lo, lo | m);
                    utf8_split(b, r, (lo | m) + 1, hi);
                    return;
                }
                if ((hi & m) != m) {
                    utf8_split(b, r, lo, (hi & ~m) - 1);
                    utf8_split(b, r, hi & ~m, hi);
                    return;
                }
            }
        }
    uint8_t a[4], z[4];
    int n = utf8_bytes(lo, a);
    utf8_bytes(hi, z);
    gb_vec *alt = gb_add_alt(b, r);
    for (int k = 0; alt && k < n; k++) gb_push(b, alt, byte_range(b, a[k], z[k]));
    if (alt) gb_push(b, alt, SP_G_END);
}

bool gb_code_point_class(gb_builder *b, gb_vec *v, const uint32_t *ranges,
                         int n_ranges, const char *rule_base) {
    bool ascii = n_ranges == 0 || ranges[2 * n_ranges - 1] < 0x80;
    if (ascii) {
        uint8_t set[32] = {0};
        for (int i = 0; i < n_ranges; i++)
            for (uint32_t c = ranges[2 * i]; c <= ranges[2 * i + 1]; c++)
                set[c >> 3] |= (uint8_t)(1u << (c & 7));
        return gb_push(b, v, gb_set(b, set));
    }
    int r = gb_new_rule(b, rule_base);
    if (r < 0) return false;
    uint8_t low[32] = {0};
    bool any_low = false;
    for (int i = 0; i < n_ranges; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        for (; lo <= hi && lo < 0x80; lo++) {
            low[lo >> 3] |= (uint8_t)(1u << (lo & 7));
            any_low = true;
        }
        if (lo <= hi) utf8_split(b, r, lo, hi);
    }
    if (any_low) { /* every ASCII byte in one alternative */
        gb_vec *alt = gb_add_alt(b, r);
        if (alt) {
            gb_push(b, alt, gb_set(b, low));
            gb_push(b, alt, SP_G_END);
        }
    }
    return gb_push(b, v, SP_G_REF(r));
}

static int cmp_range(const void *a, const void *b) {
    uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
    return x < y ? -1 : x > y;
}

/* Sort and merge ranges, drop surrogates, complement when negated. */
int gb_normalize_ranges(uint32_t *r, int n, bool negate, uint32_t *out) {
    qsort(r, (size_t)n, 2 * sizeof *r, cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[2 * i] <= out[2 * m - 1] + 1) {
            if (r[2 * i + 1] > out[2 * m - 1]) out[2 * m - 1] = r[2 * i + 1];
        } else {
            out[2 * m] = r[2 * i];
            out[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    if (negate) {
        /* The complement in place: gap k (before range i, so k <= i) is
         * written only after range i is read. */
        uint32_t next = 0;
        int k = 0;
        for (int i = 0; i < m; i++) {
            const uint32_t lo = out[2 * i], hi = out[2 * i + 1];
            if (lo > next) { out[2 * k] = next; out[2 * k + 1] = lo - 1; k++; }
            next = hi + 1;
        }
        if (next <= 0x10FFFF) { out[2 * k] = next; out[2 * k + 1] = 0x10FFFF; k++; }
        m = k;
    }
    /* Cut the surrogate block out of every range (room: one split). */
    for (int i = 0; i < m; i++) {
        uint32_t lo = out[2 * i], hi = out[2 * i + 1];
        if (lo >= 0xD800 && hi <= 0xDFFF) continue;
        if (lo < 0xD800 && hi > 0xDFFF) {
            memmove(out + 2 * i + 2, out + 2 * i, (size_t)(m - i) * 2 * sizeof *out);
            out[2 * i + 1] = 0xD7FF;
            out[2 * i + 2] = 0xE000;
            m++;
            i++;
            continue;
        }
        if (lo >= 0xD800 && lo <= 0xDFFF) out[2 * i] = 0xE000;
        if (hi >= 0xD800 && hi <= 0xDFFF) out[2 * i + 1] = 0xD7FF;
    }
    int w = 0;
    for (int i = 0; i < m; i++)
        if (!(out[2 * i] >= 0xD800 && out[2 * i + 1] <= 0xDFFF)) {
            out[2 * w] = out[2 * i];
            out[2 * w + 1] = out[2 * i + 1];
            w++;
        }
    return w;
}

void gb_where(const char *text, size_t at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && text[i]; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if ((text[i] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

static bool set_empty(const gb_builder *b, int32_t set) {
    for (int i = 0; i < 32; i++)
        if (b->sets[set][i]) return false;
    return true;
}

/* holds[r] for the least fixed point of "rule r holds when every element
 * of one of its alternatives holds", where a rule call holds when its rule
 * does and a terminal when `terminals` is set and its byte set is not
 * empty: nullable (terminals false) and productive (true). Linear in the
 * grammar's size, so that no hostile grammar makes it slow: each
 * alternative counts its calls not yet known to hold, and a rule that
 * comes to hold counts down the alternatives that call it. False when out
 * of memory. */
static bool rule_fixpoint(const gb_builder *b, bool terminals, bool *holds) {
    int n_alts = 0;
    long n_calls = 0;
    for (int r = 0; r < b->n_rules; r++)
        for (int a = 0; a < b->rules[r].n_alts; a++, n_alts++)
            for (int k = 0; k < b->rules[r].alts[a].n; k++)
                n_calls += b->rules[r].alts[a].v[k] <= SP_G_REF(0);
    int *alt_rule = malloc(((size_t)n_alts + 1) * sizeof *alt_rule);
    int *missing = malloc(((size_t)n_alts + 1) * sizeof *missing);
    long *first = calloc((size_t)b->n_rules + 1, sizeof *first);
    long *cursor = malloc(((size_t)b->n_rules + 1) * sizeof *cursor);
    int *callers = malloc(((size_t)n_calls + 1) * sizeof *callers);
    int *queue = malloc(((size_t)b->n_rules + 1) * sizeof *queue);
    bool ok = alt_rule && missing && first && cursor && callers && queue;
    for (int r = 0, i = 0; ok && r < b->n_rules; r++)
        for (int a = 0; a < b->rules[r].n_alts; a++, i++) {
            const gb_vec *alt = &b->rules[r].alts[a];
            alt_rule[i] = r;
            missing[i] = 0;
            for (int k = 0; k < alt->n && alt->v[k] != SP_G_END; k++) {
                if (alt->v[k] <= SP_G_REF(0)) {
                    missing[i]++;
                    first[SP_G_REF_RULE(alt->v[k]) + 1]++;
                } else if (!terminals || set_empty(b, alt->v[k])) {
                    missing[i] = INT_MAX / 2;  /* never holds */
                }
            }
        }
    for (int r = 0; ok && r < b->n_rules; r++) first[r + 1] += first[r];
    if (ok) memcpy(cursor, first, (size_t)b->n_rules * sizeof *cursor);
    for (int r = 0, i = 0; ok && r < b->n_rules; r++)
        for (int a = 0; a < b->rules[r].n_alts; a++, i++)
            for (int k = 0; k < b->rules[r].alts[a].n; k++)
                if (b->rules[r].alts[a].v[k] <= SP_G_REF(0))
                    callers[cursor[SP_G_REF_RULE(b->rules[r].alts[a].v[k])]++] = i;
    int head = 0, tail = 0;
    for (int i = 0; ok && i < n_alts; i++)
        if (missing[i] == 0 && !holds[alt_rule[i]]) holds[queue[tail++] = alt_rule[i]] = true;
    while (ok && head < tail) {
        int s = queue[head++];
        for (long u = first[s]; u < first[s + 1]; u++) {
            int i = callers[u];
            if (--missing[i] == 0 && !holds[alt_rule[i]])
                holds[queue[tail++] = alt_rule[i]] = true;
        }
    }
    free(alt_rule);
    free(missing);
    free(first);
    free(cursor);
    free(callers);
    free(queue);
    return ok;
}

/* Whether alternative `alt` can complete: each of its terminals matches
 * some byte and each rule it calls can complete (productive). */
static bool alt_completes(const gb_builder *b, const gb_vec *alt, const bool *productive) {
    for (int k = 0; k < alt->n && alt->v[k] != SP_G_END; k++) {
        int32_t e = alt->v[k];
        if (e >= 0 ? set_empty(b, e) : !productive[SP_G_REF_RULE(e)]) return false;
    }
    return true;
}

/* The grammar's language is empty: name the root and, where the root
 * calls one, the first rule it calls that matches nothing. */
static spindle_status empty_language(const gb_builder *b, int root, const bool *productive,
                                     spindle_error *err) {
    const gb_rule *r = &b->rules[root];
    for (int a = 0; a < r->n_alts; a++)
        for (int k = 0; k < r->alts[a].n && r->alts[a].v[k] != SP_G_END; k++) {
            int32_t e = r->alts[a].v[k];
            if (e <= SP_G_REF(0) && SP_G_REF_RULE(e) != root && !productive[SP_G_REF_RULE(e)])
                return sp_fail(err, SPINDLE_ERR_FORMAT,
                               SP_GRAMMAR_EMPTY ": rule 'root' can never complete "
                               "(rule '%s' matches nothing: a character class that matches "
                               "nothing, or recursion with no way out)",
                               b->rules[SP_G_REF_RULE(e)].name);
        }
    return sp_fail(err, SPINDLE_ERR_FORMAT,
                   SP_GRAMMAR_EMPTY ": rule 'root' can never complete (a character "
                   "class that matches nothing, or recursion with no way out)");
}

/* Depth-first search of the "starts with" graph (rule -> the rules it can
 * begin with); a rule met again on the current path is left-recursive. */
static int left_cycle(const gb_builder *b, const bool *nullable, int r,
                      uint8_t *color) {
    color[r] = 1;
    for (int a = 0; a < b->rules[r].n_alts; a++) {
        const gb_vec *alt = &b->rules[r].alts[a];
        for (int k = 0; k < alt->n && alt->v[k] <= SP_G_REF(0); k++) {
            int s = SP_G_REF_RULE(alt->v[k]);
            if (color[s] == 1) return s;
            if (color[s] == 0) {
                int c = left_cycle(b, nullable, s, color);
                if (c >= 0) return c;
            }
            if (!nullable[s]) break;
        }
    }
    color[r] = 2;
    return -1;
}

static spindle_status check(gb_builder *b, const char *text,
                            spindle_error *err) {
    int line, col;
    for (int r = 0; r < b->n_rules; r++)
        if (!b->rules[r].defined) {
            gb_where(text, b->rules[r].first_use, &line, &col);
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "grammar line %d col %d: rule '%s' is used but "
                           "never defined", line, col, b->rules[r].name);
        }
    bool *nullable = calloc((size_t)b->n_rules + 1, 1);
    uint8_t *color = calloc((size_t)b->n_rules + 1, 1);
    if (!nullable || !color) {
        free(nullable);
        free(color);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    }
    if (!rule_fixpoint(b, false, nullable)) {
        free(nullable);
        free(color);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    }
    int cycle = -1;
    for (int r = 0; r < b->n_rules && cycle < 0; r++)
        if (!color[r]) cycle = left_cycle(b, nullable, r, color);
    free(nullable);
    free(color);
    if (cycle >= 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "grammar: rule '%s' is left-recursive (directly, or "
                       "through rules or repetitions that can match nothing)",
                       b->rules[cycle].name);
    return SPINDLE_OK;
}

spindle_status gb_finish(gb_builder *b, const char *text, sp_gram *out,
                         spindle_error *err) {
    memset(out, 0, sizeof *out);
    if (b->oom) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    int root = -1;
    for (int r = 0; r < b->n_rules; r++)
        if (!strcmp(b->rules[r].name, "root")) root = r;
    if (root < 0 || !b->rules[root].defined)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "grammar: no rule named 'root' is defined");
    spindle_status st = check(b, text, err);
    if (st) return st;
    bool *productive = calloc((size_t)b->n_rules + 1, 1);
    if (!productive) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    if (!rule_fixpoint(b, true, productive)) {
        free(productive);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    }
    if (!productive[root]) {
        st = empty_language(b, root, productive, err);
        free(productive);
        return st;
    }
    int n_alts = 0;
    for (int r = 0; r < b->n_rules; r++) n_alts += b->rules[r].n_alts;
    out->elems = malloc((size_t)(b->n_elems + 1) * sizeof *out->elems);
    out->alt_start = malloc((size_t)(n_alts + 1) * sizeof *out->alt_start);
    out->rule_alt = malloc((size_t)(b->n_rules + 1) * sizeof *out->rule_alt);
    out->names = calloc((size_t)b->n_rules + 1, sizeof *out->names);
    out->sets = malloc((size_t)(b->n_sets + 1) * sizeof *out->sets);
    out->rep_units = malloc((size_t)(b->n_rules + 1) * sizeof *out->rep_units);
    out->rep_below = malloc((size_t)(b->n_rules + 1) * sizeof *out->rep_below);
    out->alt_dead = malloc((size_t)n_alts + 1);
    if (!out->elems || !out->alt_start || !out->rule_alt || !out->names ||
        !out->sets || !out->rep_units || !out->rep_below || !out->alt_dead) {
        free(productive);
        sp_gram_free(out);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    }
    for (int r = 0; r < b->n_rules; r++) {
        out->rule_alt[r] = out->n_alts;
        for (int a = 0; a < b->rules[r].n_alts; a++) {
            const gb_vec *alt = &b->rules[r].alts[a];
            out->alt_dead[out->n_alts] = !alt_completes(b, alt, productive);
            out->alt_start[out->n_alts++] = out->n_elems;
            if (alt->n)
                memcpy(out->elems + out->n_elems, alt->v, (size_t)alt->n * sizeof *alt->v);
            out->n_elems += alt->n;
        }
        out->names[r] = b->rules[r].name;
        out->rep_units[r] = b->rules[r].rep_units;
        out->rep_below[r] = b->rules[r].rep_below;
        b->rules[r].name = NULL;
    }
    out->rule_alt[b->n_rules] = out->n_alts;
    free(productive);
    if (b->n_sets) memcpy(out->sets, b->sets, (size_t)b->n_sets * sizeof *b->sets);
    out->n_rules = b->n_rules;
    out->n_sets = b->n_sets;
    out->root = root;
    return SPINDLE_OK;
}

void gb_free(gb_builder *b) {
    for (int r = 0; r < b->n_rules; r++) {
        for (int a = 0; a < b->rules[r].n_alts; a++) free(b->rules[r].alts[a].v);
        free(b->rules[r].alts);
        free(b->rules[r].name);
    }
    free(b->rules);
    free(b->sets);
    memset(b, 0, sizeof *b);
}

void sp_gram_free(sp_gram *g) {
    if (!g) return;
    for (int r = 0; g->names && r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->elems);
    free(g->alt_start);
    free(g->rule_alt);
    free(g->sets);
    free(g->rep_units);
    free(g->rep_below);
    free(g->alt_dead);
    memset(g, 0, sizeof *g);
}
