/* The rule builder the GBNF parser fills (gram_build.c): rules of
 * alternatives of element vectors, byte sets, and the final checks and
 * flattening into an sp_gram. Internal to src/grammar/. */
#ifndef SP_GRAMMAR_GRAM_BUILD_H
#define SP_GRAMMAR_GRAM_BUILD_H

#include "grammar/grammar.h"

typedef struct gb_vec {
    int32_t *v;
    int n, cap;
} gb_vec;

typedef struct gb_rule {
    char *name;
    gb_vec *alts;
    int n_alts, cap_alts;
    bool defined;
    size_t first_use;   /* source offset of its first reference */
    int rep_units;      /* > 0: link of a bounded repetition, see sp_gram */
    int rep_below;      /* the link allowing one unit fewer, or -1 */
} gb_rule;

typedef struct gb_builder {
    gb_rule *rules;
    int n_rules, cap_rules;
    uint8_t (*sets)[32];
    int n_sets, cap_sets;
    long n_elems;         /* all elements so far (the size limit) */
    bool oom;
} gb_builder;

bool gb_push(gb_builder *b, gb_vec *v, int32_t e);
/* The rule named name[0..len), created (undefined) when new; -1 on OOM. */
int gb_rule_id(gb_builder *b, const char *name, size_t len);
/* A fresh rule named "<base>-<n>". -1 on OOM. */
int gb_new_rule(gb_builder *b, const char *base);
/* Append a new empty alternative to rule r; NULL on OOM. */
gb_vec *gb_add_alt(gb_builder *b, int r);
/* The terminal index of a byte set. */
int32_t gb_set(gb_builder *b, const uint8_t set[32]);
int32_t gb_byte(gb_builder *b, uint8_t byte);
/* Append to `v` the elements matching one code point of the ranges
 * (sorted, disjoint, inclusive pairs, no surrogates), as UTF-8 bytes: one
 * byte set when all are ASCII, else a reference to a new rule. */
bool gb_code_point_class(gb_builder *b, gb_vec *v, const uint32_t *ranges,
                         int n_ranges, const char *rule_base);
/* Sort and merge the n inclusive code-point ranges of r (clobbered),
 * complement them when negate, and drop surrogates; writes the result to
 * out (room for n + 2 pairs) and returns its count of pairs. */
int gb_normalize_ranges(uint32_t *r, int n, bool negate, uint32_t *out);
/* Check (undefined rules, missing root, left recursion) and flatten. */
spindle_status gb_finish(gb_builder *b, const char *text, sp_gram *out,
                         spindle_error *err);
void gb_free(gb_builder *b);
/* "line L col C" of offset `at` in text. */
void gb_where(const char *text, size_t at, int *line, int *col);

#endif
