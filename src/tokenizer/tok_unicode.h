/* Unicode data as HF `tokenizers` has it, where Spindle's libraries differ.
 *
 * Why: Spindle's Unicode comes from utf8proc 2.8 (Unicode 15.0) and PCRE2
 * 10.42 (Unicode 14.0); HF's from the Rust crates of its build, measured
 * on tokenizers 0.23: regexes through Oniguruma (Unicode 16.0 classes, e.g.
 * Kaktovik numerals U+1D2C0.. in \p{N}, Todhri U+105C0.. in \p{L}, U+180E
 * not in \s), Lowercase through Rust's char::to_lowercase (Unicode 17.0,
 * e.g. U+A7CB -> U+0264), normalization through
 * unicode-normalization-alignments (tables older than Unicode 12.1: U+32FF,
 * U+A7F2, U+11938 are left alone). HF is the reference, so the tables in
 * tok_unicode_tables.c are measured on HF by scripts/gen_unicode_tables.py
 * and override the libraries. */
#ifndef SP_TOKENIZER_TOK_UNICODE_H
#define SP_TOKENIZER_TOK_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sp_strbuf;

typedef struct sp_uc_range {
    uint32_t lo, hi;
} sp_uc_range;

/* A regex escape ("s", "d", "w") with HF's set for it. */
typedef struct sp_uc_class {
    const char *name;
    const sp_uc_range *v;
    size_t n;
} sp_uc_class;

/* Assigned code points lo..hi of general category SP_UC_CATEGORY_NAMES[gc]. */
typedef struct sp_uc_category_run {
    uint32_t lo, hi;
    uint8_t gc;
} sp_uc_category_run;

enum { SP_UC_BARRIER_CANONICAL = 1, SP_UC_BARRIER_COMPAT = 2 };

/* A code point HF's normalizer leaves alone (as unassigned: a starter that
 * composes with nothing) under the forms in `forms`. */
typedef struct sp_uc_barrier {
    uint32_t cp;
    uint8_t forms;
} sp_uc_barrier;

/* HF's Lowercase of cp: lower[0], then lower[1] when not 0. */
typedef struct sp_uc_lower {
    uint32_t cp;
    uint32_t lower[2];
} sp_uc_lower_map;

extern const sp_uc_class SP_UC_CLASSES[];
extern const size_t SP_UC_N_CLASSES;
extern const char *const SP_UC_CATEGORY_NAMES[];
extern const sp_uc_category_run SP_UC_CATEGORIES[];
extern const size_t SP_UC_N_CATEGORIES;
extern const sp_uc_barrier SP_UC_NORM_BARRIERS[];
extern const size_t SP_UC_N_NORM_BARRIERS;
extern const sp_uc_lower_map SP_UC_LOWER[];
extern const size_t SP_UC_N_LOWER;
/* BERT's classes, from the unicode_categories crate that HF's BertNormalizer,
 * BertPreTokenizer and Punctuation pre-tokenizer use (Unicode older than
 * utf8proc's: e.g. U+061D and U+07FD are not punctuation / marks there):
 * punctuation (ASCII punctuation included), nonspacing marks (Mn), and
 * controls (Cc, Cf, Co less tab, newline and carriage return). */
extern const sp_uc_range SP_UC_BERT_PUNCT[];
extern const size_t SP_UC_N_BERT_PUNCT;
extern const sp_uc_range SP_UC_BERT_NONSPACING[];
extern const size_t SP_UC_N_BERT_NONSPACING;
extern const sp_uc_range SP_UC_BERT_CONTROL[];
extern const size_t SP_UC_N_BERT_CONTROL;

/* Whether cp lies in one of the n sorted, disjoint ranges. */
bool sp_uc_in_ranges(const sp_uc_range *r, size_t n, uint32_t cp);

/* Copy the PCRE2 pattern `src` into `out` with \s \S \d \D \w \W, \p{..}
 * \P{..} \p{^..} of the general categories replaced by explicit sets of HF's
 * members. Other escapes (scripts, binary properties) are kept. False when
 * out of memory. Caseless matching ((?i)) of a replaced category also
 * matches the case partners of its members. */
bool sp_uc_rewrite_regex(const char *src, struct sp_strbuf *out);

/* HF's Lowercase of one code point into out[0..2); returns the count. */
int sp_uc_lower(uint32_t cp, uint32_t out[2]);

/* The SP_UC_BARRIER_* forms under which HF leaves cp alone; 0 if none. */
int sp_uc_norm_barrier(uint32_t cp);

#endif
