/* Internal structures of the tokenizer module: the tokenizer.json pipeline
 * (normalizer -> added-token split -> pre-tokenizer -> model ->
 * post-processor, and decoder) mirrored after Hugging Face `tokenizers`.
 * Offsets are not tracked: Spindle only needs ids and text. */
#ifndef SP_INPUT_TOK_INTERNAL_H
#define SP_INPUT_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>

#include "spindle.h"
#include "base/strbuf.h"
#include "base/utf8.h"

/* ------------------------------------------------------------ utilities */

/* Hash map from byte strings to int32. Keys are borrowed. */
typedef struct sp_strmap {
    const char **keys;
    uint32_t *klens;
    int32_t *vals;
    uint64_t *table; /* hash tag << 32 | (entry index + 1); 0 = empty */
    size_t n, ecap, tcap;
} sp_strmap;

bool sp_strmap_put(sp_strmap *m, const char *k, size_t klen, int32_t v);
/* -1 when absent. */
int32_t sp_strmap_get(const sp_strmap *m, const char *k, size_t klen);
void sp_strmap_free(sp_strmap *m);
uint64_t sp_hash_bytes(const char *s, size_t n);

/* A match pattern: a literal string or a PCRE2 regex (UTF + UCP + JIT). */
typedef struct sp_pattern {
    char *lit;
    size_t lit_len;
    pcre2_code *re;
} sp_pattern;

typedef struct sp_span {
    size_t start, end;
    bool match;
} sp_span;

typedef struct sp_spans {
    sp_span *v;
    size_t n, cap;
} sp_spans;

spindle_status sp_pattern_parse(const cJSON *pat, sp_pattern *out,
                                spindle_error *err);
spindle_status sp_pattern_regex(const char *src, sp_pattern *out,
                                spindle_error *err);
void sp_pattern_free(sp_pattern *p);
/* Fill `spans` with the matches and the gaps between them, covering s
 * (HF Pattern::find_matches). */
spindle_status sp_pattern_find(const sp_pattern *p, const char *s, size_t n,
                               sp_spans *spans, spindle_error *err);
bool sp_spans_push(sp_spans *s, size_t a, size_t b, bool match);
/* Replace every match of p in s with `with`, into out. */
spindle_status sp_pattern_replace(const sp_pattern *p, const char *s, size_t n,
                                  const char *with, size_t wlen, sp_strbuf *out,
                                  spindle_error *err);

/* Unicode predicates used by the BERT-style components (Rust char
 * semantics). */
bool sp_uc_is_whitespace(uint32_t cp);
bool sp_uc_is_punct(uint32_t cp);
bool sp_uc_is_numeric(uint32_t cp);
bool sp_uc_is_alnum(uint32_t cp);
bool sp_uc_is_control(uint32_t cp);

const char *sp_json_str(const cJSON *obj, const char *key);
bool sp_json_bool(const cJSON *obj, const char *key, bool dflt);
/* obj[key] as an int clamped to [lo, hi] (NaN -> lo), or dflt when it is not
 * a number: a double outside int's range has no defined int value. */
int sp_json_int_clamped(const cJSON *obj, const char *key, int dflt, int lo, int hi);

/* ----------------------------------------------------------- normalizer */

typedef enum {
    SP_NORM_NFC, SP_NORM_NFD, SP_NORM_NFKC, SP_NORM_NFKD, SP_NORM_LOWER,
    SP_NORM_PREPEND, SP_NORM_REPLACE, SP_NORM_STRIP, SP_NORM_STRIP_ACCENTS,
    SP_NORM_BERT, SP_NORM_SEQ
} sp_norm_type;

typedef struct sp_norm {
    sp_norm_type type;
    char *str; /* Prepend text / Replace content */
    size_t str_len;
    sp_pattern pat;
    bool left, right;                               /* Strip */
    bool clean, chinese, accents, lower;            /* Bert */
    struct sp_norm *subs;
    int n_subs;
} sp_norm;

spindle_status sp_norm_parse(const cJSON *j, sp_norm *out, spindle_error *err);
void sp_norm_free(sp_norm *n);
spindle_status sp_norm_apply(const sp_norm *n, const char *s, size_t len,
                             sp_strbuf *out, spindle_error *err);

/* --------------------------------------------------------------- pieces */

/* The pre-tokenized string: pieces of text, or finished added tokens. */
typedef struct sp_piece {
    size_t off, len;
    int32_t id;  /* >= 0: an added token, not touched again */
    bool first;  /* starts at offset 0 of the original text */
} sp_piece;

typedef struct sp_pieces {
    sp_strbuf text;
    sp_piece *v;
    size_t n, cap;
} sp_pieces;

bool sp_pieces_push(sp_pieces *p, const char *s, size_t len, int32_t id,
                    bool first);
void sp_pieces_reset(sp_pieces *p);
void sp_pieces_free(sp_pieces *p);

/* -------------------------------------------------------- pre-tokenizer */

typedef enum {
    SP_SPLIT_REMOVED, SP_SPLIT_ISOLATED, SP_SPLIT_PREV, SP_SPLIT_NEXT,
    SP_SPLIT_CONTIGUOUS
} sp_split_behavior;

typedef enum {
    SP_PRE_BYTELEVEL, SP_PRE_SPLIT, SP_PRE_METASPACE, SP_PRE_DIGITS,
    SP_PRE_PUNCT, SP_PRE_WHITESPACE, SP_PRE_WSPLIT, SP_PRE_BERT, SP_PRE_SEQ
} sp_pre_type;

typedef struct sp_pretok {
    sp_pre_type type;
    sp_pattern pat;
    sp_split_behavior behavior;
    bool invert;
    bool add_prefix_space, use_regex; /* ByteLevel */
    char repl[8];                     /* Metaspace replacement (UTF-8) */
    int repl_len;
    int prepend; /* 0 always, 1 first, 2 never */
    bool split;
    bool individual_digits;
    struct sp_pretok *subs;
    int n_subs;
} sp_pretok;

spindle_status sp_pretok_parse(const cJSON *j, sp_pretok *out,
                               spindle_error *err);
void sp_pretok_free(sp_pretok *p);
/* Rewrite `*io` (swapping with `tmp`). */
spindle_status sp_pretok_apply(const sp_pretok *p, sp_pieces *io,
                               sp_pieces *tmp, spindle_error *err);
/* Apply a split behavior to spans (HF NormalizedString::split) in place. */
void sp_split_behave(sp_spans *sp, sp_split_behavior b, bool invert);
spindle_status sp_split_behavior_parse(const char *s, sp_split_behavior *out,
                                       spindle_error *err);

/* GPT-2 byte-level alphabet: the byte a code point stands for, or -1. */
int sp_cp_to_byte(uint32_t cp);

/* ---------------------------------------------------------------- model */

typedef enum { SP_MODEL_BPE, SP_MODEL_WORDPIECE, SP_MODEL_UNIGRAM } sp_model_type;

typedef struct sp_merge_map {
    uint64_t *keys; /* (a << 32 | b) + 1; 0 = empty */
    uint32_t *rank;
    int32_t *new_id;
    size_t cap;
} sp_merge_map;

typedef struct sp_bpe_cache sp_bpe_cache;

typedef struct sp_model {
    sp_model_type type;
    /* vocabulary */
    char **tok;       /* id -> token (NULL for holes) */
    uint32_t *tok_len;
    int32_t n_tok;    /* id space size of the model vocab */
    sp_strmap vocab;
    /* BPE */
    sp_merge_map merges;
    int32_t unk_id;
    bool byte_fallback, fuse_unk, ignore_merges;
    char *cont_prefix, *eow_suffix;
    /* WordPiece: the prefix of a word's first piece; NULL for none (HF's
     * vocab), U+2581 for llama.cpp's phantom-space BERT vocab, where the
     * continuing pieces carry no prefix instead */
    char *word_prefix;
    int32_t byte_ids[256];
    sp_bpe_cache *cache;
    /* WordPiece: max chars per word; Unigram: longest piece in bytes */
    int max_chars;
    /* Unigram */
    double *scores;
    double min_score;
} sp_model;

/* model.vocab / model.merges scanned straight from the text (tok_load.c):
 * refs [0, n_vocab) are vocab entries with ids, the rest merge halves in
 * pairs (id -1). */
typedef struct sp_fast_model {
    sp_strbuf arena;
    size_t *off;
    uint32_t *len;
    int32_t *id;
    size_t n, cap, n_vocab;
    bool have_vocab, have_merges;
} sp_fast_model;

spindle_status sp_fast_extract(char *text, size_t len, sp_fast_model *f,
                               spindle_error *err);
void sp_fast_free(sp_fast_model *f);

spindle_status sp_model_parse(const cJSON *j, const sp_fast_model *fast,
                              sp_model *m, spindle_error *err);
void sp_model_free(sp_model *m);
typedef struct sp_ids {
    int32_t *v;
    size_t n, cap;
} sp_ids;
bool sp_ids_push(sp_ids *ids, int32_t id);
spindle_status sp_model_tokenize(const sp_model *m, const char *s, size_t n,
                                 sp_ids *out, spindle_error *err);
spindle_status sp_bpe_parse(const cJSON *j, const sp_fast_model *fast,
                            sp_model *m, spindle_error *err);
spindle_status sp_bpe_tokenize(const sp_model *m, const char *s, size_t n,
                               sp_ids *out, spindle_error *err);
void sp_bpe_free(sp_model *m);
/* For builders other than tokenizer.json (GGUF): make `m` a BPE model with
 * room for n_merges merges and a word cache, then add merges; a pair that
 * already has a merge keeps the first (llama.cpp's rule). */
spindle_status sp_bpe_prepare(sp_model *m, size_t n_merges, spindle_error *err);
void sp_bpe_merge_add_first(sp_model *m, int32_t a, int32_t b, uint32_t rank,
                            int32_t new_id);
spindle_status sp_wordpiece_tokenize(const sp_model *m, const char *s,
                                     size_t n, sp_ids *out, spindle_error *err);
spindle_status sp_unigram_parse(const cJSON *j, sp_model *m,
                                spindle_error *err);
spindle_status sp_unigram_tokenize(const sp_model *m, const char *s, size_t n,
                                   sp_ids *out, spindle_error *err);
/* Set model vocab entry (used by parsers). */
bool sp_model_set_token(sp_model *m, int32_t id, const char *s, size_t n);

/* -------------------------------------------------------- added tokens */

typedef struct sp_added_token {
    char *content;
    size_t len;
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
} sp_added_token;

typedef struct sp_trie sp_trie;

typedef struct sp_added {
    sp_added_token *v;
    int n;
    sp_trie *raw;   /* non-normalized tokens, matched on raw text */
    sp_trie *norm;  /* normalized tokens, matched on normalized text */
    char **norm_content; /* normalized forms (owned) */
} sp_added;

spindle_status sp_added_parse(const cJSON *arr, const sp_norm *normalizer,
                              sp_added *out, spindle_error *err);
void sp_added_free(sp_added *a);
/* Split `s` on added tokens of one kind (normalized or not) into pieces. */
spindle_status sp_added_split(const sp_added *a, bool normalized,
                              const char *s, size_t n, bool first,
                              sp_pieces *out, spindle_error *err);

/* ----------------------------------------------------- post-processing */

typedef enum { SP_POST_NONE, SP_POST_TEMPLATE, SP_POST_BERT, SP_POST_SEQ } sp_post_type;

typedef struct sp_post {
    sp_post_type type;
    /* TEMPLATE / BERT: single-sequence layout; -2 marks "the sequence" */
    int32_t *single;
    size_t n_single;
    struct sp_post *subs;
    int n_subs;
} sp_post;

spindle_status sp_post_parse(const cJSON *j, sp_post *out, spindle_error *err);
void sp_post_free(sp_post *p);
spindle_status sp_post_apply(const sp_post *p, sp_ids *ids, spindle_error *err);

/* -------------------------------------------------------------- decoder */

typedef enum {
    SP_DEC_BYTELEVEL, SP_DEC_METASPACE, SP_DEC_BYTEFALLBACK, SP_DEC_FUSE,
    SP_DEC_STRIP, SP_DEC_REPLACE, SP_DEC_WORDPIECE, SP_DEC_BPE, SP_DEC_SEQ
} sp_dec_type;

typedef struct sp_dec {
    sp_dec_type type;
    char *str; /* Replace content / WordPiece prefix / BPE suffix / Strip */
    size_t str_len;
    sp_pattern pat;
    uint32_t content_cp; /* Strip content / Metaspace replacement */
    int start, stop;
    bool cleanup;
    int prepend;
    struct sp_dec *subs;
    int n_subs;
} sp_dec;

/* A list of strings sharing one buffer. */
typedef struct sp_strlist {
    sp_strbuf text;
    size_t *off, *len;
    size_t n, cap;
} sp_strlist;

bool sp_strlist_push(sp_strlist *l, const char *s, size_t n);
void sp_strlist_reset(sp_strlist *l);
void sp_strlist_free(sp_strlist *l);

spindle_status sp_dec_parse(const cJSON *j, sp_dec *out, spindle_error *err);
void sp_dec_free(sp_dec *d);
/* decode_chain: io -> io (tmp is scratch). */
spindle_status sp_dec_apply(const sp_dec *d, sp_strlist *io, sp_strlist *tmp,
                            spindle_error *err);

/* ------------------------------------------------------------ tokenizer */

struct spindle_tokenizer {
    sp_model model;
    sp_norm *normalizer;
    sp_pretok *pretok;
    sp_post post;
    sp_dec *decoder;
    sp_added added;
    int32_t bos_id, eos_id;
    int32_t vocab_size;
    int32_t *added_of_id;  /* id -> index in added.v, or -1 */
    cJSON *config;         /* tokenizer_config.json, or NULL */
    char *template_file;   /* chat_template.jinja contents, or NULL */
    struct sp_gguf_vocab *gguf; /* set: a GGUF vocabulary (tok_gguf.c) */
};

int32_t sp_tokenizer_token_to_id(const spindle_tokenizer *tok, const char *s,
                                 size_t n);
/* The token text of id (added vocabulary first), or NULL. */
const char *sp_tokenizer_token(const spindle_tokenizer *tok, int32_t id,
                               size_t *len);

#endif
