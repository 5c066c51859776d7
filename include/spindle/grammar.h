/* spindle/grammar.h: grammars: GBNF, regular expressions and JSON Schema as
 * token masks. Part of the public API: include "spindle.h", whose opening
 * comment states the conventions every call here follows. */
#ifndef SPINDLE_GRAMMAR_H
#define SPINDLE_GRAMMAR_H

#include "spindle/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ grammar
 * Structured output: a grammar constrains which tokens may be sampled.
 * GBNF is llama.cpp's grammar format; a JSON Schema is converted to GBNF
 * as llama.cpp's json-schema-to-grammar does (docs/structured-output.md lists
 * the supported subset); JSON_OBJECT is any JSON value. */

/* Every token's byte string as a trie, built once per tokenizer and shared
 * by the grammars compiled against it. Immutable after new: thread-safe;
 * it must outlive every grammar made from it. */
typedef struct spindle_grammar_vocab spindle_grammar_vocab;
spindle_status spindle_grammar_vocab_new(const spindle_tokenizer *tok,
                                         spindle_grammar_vocab **out,
                                         spindle_error *err);
void spindle_grammar_vocab_free(spindle_grammar_vocab *vocab);

typedef enum spindle_grammar_kind {
    SPINDLE_GRAMMAR_GBNF = 0,
    SPINDLE_GRAMMAR_JSON_SCHEMA,
    SPINDLE_GRAMMAR_JSON_OBJECT   /* text ignored (may be NULL) */
} spindle_grammar_kind;

/* A compiled grammar. A text that does not parse, is unsupported or is
 * over the limits fails with SPINDLE_ERR_FORMAT / SPINDLE_ERR_LIMIT and a
 * one-line message naming where and why; so does a grammar that matches
 * no text at all, and one whose text no token of the vocabulary can
 * begin (both SPINDLE_ERR_FORMAT). Alternatives that can never complete
 * are never entered: every text a matcher accepts can still be completed
 * (by some bytes; a vocabulary that lacks them can still leave no token
 * to go on with). Thread-safe, shared by any number of requests; it
 * must outlive them. Its matchers share one lazily built automaton and
 * mask cache (under a lock), so a grammar kept for later requests makes
 * their masks cheaper. Reference counted: new gives one
 * reference, retain another (it returns `grammar`), and free drops one;
 * the last frees it. */
typedef struct spindle_grammar spindle_grammar;
spindle_status spindle_grammar_new(const spindle_grammar_vocab *vocab,
                                   spindle_grammar_kind kind, const char *text,
                                   size_t len, spindle_grammar **out,
                                   spindle_error *err);
spindle_grammar *spindle_grammar_retain(spindle_grammar *grammar);
void spindle_grammar_free(spindle_grammar *grammar);
/* The vocabulary size its masks cover (the tokenizer's). Thread-safe. */
int spindle_grammar_vocab_size(const spindle_grammar *grammar);
/* The GBNF the grammar was built from (a schema's conversion), owned by
 * the grammar. */
const char *spindle_grammar_gbnf(const spindle_grammar *grammar);

/* One generation's position in a grammar. One thread at a time per
 * matcher; it borrows the grammar. */
typedef struct spindle_grammar_matcher spindle_grammar_matcher;
spindle_status spindle_grammar_matcher_new(const spindle_grammar *grammar,
                                           spindle_grammar_matcher **out,
                                           spindle_error *err);
void spindle_grammar_matcher_free(spindle_grammar_matcher *m);
/* bits[t / 32] bit t % 32 set iff token t may come next (the tokenizer's
 * vocabulary size in bits, caller's buffer). Special tokens are never set:
 * whether an end-of-sequence id may come is spindle_grammar_matcher_accepting. */
spindle_status spindle_grammar_matcher_mask(spindle_grammar_matcher *m,
                                            uint32_t *bits, spindle_error *err);
/* Advance by one token; SPINDLE_ERR_ARGUMENT (state unchanged) when the
 * grammar rejects it. */
spindle_status spindle_grammar_matcher_accept(spindle_grammar_matcher *m,
                                              int32_t token, spindle_error *err);
/* The matcher's position as a small id, and a return to a position it
 * had earlier (ids stay valid for the matcher's life): how speculation
 * tries a draft against the grammar and undoes it. A negative or unknown
 * id is ignored; ids are not checked against the matcher they came from
 * (matchers of one grammar may share them). */
int32_t spindle_grammar_matcher_state(const spindle_grammar_matcher *m);
void spindle_grammar_matcher_restore(spindle_grammar_matcher *m, int32_t state);
/* True when the tokens so far form a complete sentence of the grammar. */
bool spindle_grammar_matcher_accepting(const spindle_grammar_matcher *m);
/* True when nothing but the end may follow. */
bool spindle_grammar_matcher_finished(spindle_grammar_matcher *m);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_GRAMMAR_H */
