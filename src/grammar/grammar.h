/* The grammar engine's internals: a grammar lowered to bytes, the matcher
 * that walks it one byte at a time, and the vocabulary trie that turns a
 * matcher state into a token mask.
 *
 * Lowered form: every rule is a list of alternatives, each a sequence of
 * elements ending in SP_G_END. An element >= 0 is a terminal, the index of
 * a 256-bit byte set; an element <= SP_G_REF(0) refers to a rule. GBNF's
 * code-point classes become alternations of UTF-8 byte-range sequences, so
 * the matcher never sees a code point. */
#ifndef SP_GRAMMAR_GRAMMAR_H
#define SP_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"
#include "base/strbuf.h"

#define SP_G_END (-1)
#define SP_G_REF(rule) (-2 - (rule))
#define SP_G_REF_RULE(elem) (-2 - (elem))

/* Limits that keep a hostile grammar from taking unbounded time or memory:
 * over any of them, parsing fails with an error naming the limit. */
#define SP_GRAMMAR_MAX_SOURCE (1 << 20)   /* bytes of grammar text */
#define SP_GRAMMAR_MAX_ELEMS (1 << 20)    /* lowered elements in all */
#define SP_GRAMMAR_MAX_NESTING 64         /* nested groups */
#define SP_GRAMMAR_MAX_REPEAT 1000        /* m and n of x{m,n} */

typedef struct sp_gram {
    int32_t *elems;         /* every alternative's elements, END-terminated */
    /* x{m,n}'s optional part is a chain of rules r_k ::= x r_(k-1) | ""
     * (r_1 ::= x | ""): rep_units[r] = k for such a link (0 for any other
     * rule) and rep_below[r] = r_(k-1) (-1 for r_1). Their first
     * alternatives share one layout, so a position in r_k's has the same
     * offset in r_j's; the matcher uses that to treat "k units left" as
     * "C left" when k > C for tokens of at most C bytes. */
    int32_t *rep_units, *rep_below;
    int32_t *alt_start;     /* alternative -> its first element */
    /* alternative -> 1 when it can never complete (it needs a character
     * class that matches nothing or a rule that never ends): the matcher
     * never enters one, so every prefix it accepts can still complete. */
    uint8_t *alt_dead;
    int32_t *rule_alt;      /* rule -> first alternative; [n_rules] ends */
    uint8_t (*sets)[32];    /* terminal byte sets (bit b: byte b matches) */
    char **names;           /* rule names (generated ones too) */
    int n_elems, n_alts, n_rules, n_sets;
    int root;
} sp_gram;

/* Parse GBNF text (llama.cpp's grammar format) into `out`. A failure gets
 * a one-line error "grammar line L col C: why"; a grammar that matches no
 * text at all fails too (SPINDLE_ERR_FORMAT, the message starting with
 * SP_GRAMMAR_EMPTY). */
#define SP_GRAMMAR_EMPTY "grammar matches no text"
spindle_status sp_gbnf_parse(const char *text, size_t len, sp_gram *out,
                             spindle_error *err);
void sp_gram_free(sp_gram *g);

static inline bool sp_gram_set_has(const sp_gram *g, int32_t set, uint8_t b) {
    return (g->sets[set][b >> 3] >> (b & 7)) & 1;
}

/* JSON Schema text -> GBNF text (llama.cpp's json-schema-to-grammar rules
 * and whitespace). `*gbnf` is malloc'ed (caller frees). Unsupported or
 * malformed schemas fail naming the keyword and its JSON pointer. */
spindle_status sp_json_schema_to_gbnf(const char *schema, size_t len,
                                      char **gbnf, spindle_error *err);
/* A regular expression (ECMA subset, as JSON Schema's `pattern`) as a GBNF
 * expression appended to `out`. Fails naming the offset and why. */
spindle_status sp_regex_to_gbnf(const char *re, size_t len, sp_strbuf *out,
                                spindle_error *err);
/* The same, cut to strings of min_len..max_len characters (max_len < 0:
 * no cap) where that is exact without intersecting languages: the
 * pattern's own lengths are within the range, or it is anchored (^...$)
 * with one repeated part of fixed width, whose count is cut. Fails
 * otherwise, saying so. */
spindle_status sp_regex_to_gbnf_lengths(const char *re, size_t len, long min_len,
                                        long max_len, sp_strbuf *out, spindle_error *err);

/* ------------------------------------------------------ vocabulary trie */

typedef struct sp_trie_node {
    int32_t end;        /* one past the last node of this subtree */
    int32_t tok_first;  /* into its sp_trie_part's tokens */
    int32_t n_tok;
    uint16_t depth;     /* bytes from the root (the root is 0) */
    uint8_t byte;
} sp_trie_node;

/* The vocabulary is also split by token length into bands: band b holds
 * the tokens of (sp_trie_band_max[b-1], sp_trie_band_max[b]] bytes, the
 * last band every longer one. The matcher takes band b's part of a mask
 * from a cached state whose bounded repetitions were capped at the band's
 * maximum (see matcher.c) and walks only the last band from the exact
 * state. */
#define SP_TRIE_BANDS 4
static const int sp_trie_band_max[SP_TRIE_BANDS - 1] = {8, 16, 32};

typedef struct sp_trie_part {
    sp_trie_node *nodes;    /* preorder; nodes[0] is the root */
    int32_t *tokens;        /* token ids, grouped by node */
    int n_nodes;
} sp_trie_part;

typedef struct sp_vocab_trie {
    sp_trie_part full;      /* every token */
    sp_trie_part band[SP_TRIE_BANDS];
    uint32_t *band_bits[SP_TRIE_BANDS]; /* [(n_vocab + 31) / 32] each */
    int n_vocab;
    char *bytes;            /* every token's bytes, back to back */
    size_t *tok_off;        /* [n_vocab] into bytes */
    uint32_t *tok_len;      /* [n_vocab]; 0: special, never matched */
    int max_depth;          /* the longest token's bytes + 1 */
} sp_vocab_trie;

spindle_status sp_vocab_trie_build(const spindle_tokenizer *tok,
                                   sp_vocab_trie *out, spindle_error *err);
void sp_vocab_trie_free(sp_vocab_trie *t);

/* ------------------------------------------------------------- matcher */

/* A grammar's automaton over a vocabulary, determinized lazily as matchers
 * walk it, with its transitions and token masks cached: shared by every
 * matcher of one compiled grammar, so what one request computed the next
 * one reuses. Reference counted; internally locked (any thread). */
typedef struct sp_gauto sp_gauto;

/* A new automaton (one reference, the caller's). `trie` may be NULL for
 * accept-only use (no masks). Fails "grammar matches nothing" when the
 * root derives no input. */
spindle_status sp_gauto_new(const sp_gram *g, const sp_vocab_trie *trie,
                            sp_gauto **out, spindle_error *err);
sp_gauto *sp_gauto_retain(sp_gauto *a);
void sp_gauto_release(sp_gauto *a);
/* Mask cache slots of automata made from now on (at most 256, the
 * default): tests lower it so that eviction runs. */
extern int sp_gauto_mask_slots;
/* True when it failed (over a limit: its matchers fail from then on) or
 * holds a quarter of its state or node limits: the grammar then starts a
 * fresh one for new matchers, so a long-lived grammar cannot push its
 * later requests over the limits. */
bool sp_gauto_crowded(sp_gauto *a);

typedef struct sp_gmatch sp_gmatch;

/* A matcher on a private automaton (tests, fuzzing). */
spindle_status sp_gmatch_new(const sp_gram *g, const sp_vocab_trie *trie,
                             sp_gmatch **out, spindle_error *err);
/* A matcher on a shared automaton (takes its own reference). */
spindle_status sp_gmatch_new_on(sp_gauto *a, sp_gmatch **out, spindle_error *err);
void sp_gmatch_free(sp_gmatch *m);
/* Feed bytes; false (state unchanged) when the grammar rejects them. */
bool sp_gmatch_accept_bytes(sp_gmatch *m, const uint8_t *bytes, size_t n,
                            spindle_error *err);
/* True when the input so far is a complete sentence of the grammar. */
bool sp_gmatch_accepting(const sp_gmatch *m);
/* True when no byte can follow (only end of input). */
bool sp_gmatch_finished(sp_gmatch *m);
/* The current state's id, and a return to one this matcher had before
 * (states are the automaton's, interned and never freed, so an id stays
 * valid): a draft is tried and undone without copying the matcher. */
int32_t sp_gmatch_state(const sp_gmatch *m);
void sp_gmatch_set_state(sp_gmatch *m, int32_t state);
/* Bit t of `bits` (n_vocab bits, 32 per word) set iff token t's bytes are
 * accepted from the current state. Special tokens are never set. */
spindle_status sp_gmatch_mask(sp_gmatch *m, uint32_t *bits,
                              spindle_error *err);

#endif
