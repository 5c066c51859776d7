/* tokenizer.json (+ tokenizer_config.json): spindle_tokenizer_load on a
 * directory holding the fuzzed files, then the loaded tokenizer at work.
 *
 * Input: tokenizer.json, optionally a NUL byte and tokenizer_config.json.
 * Invariants: a tokenizer that loads encodes sample text to ids inside its
 * vocabulary, decodes them, and its streaming detokenizer's pieces
 * concatenate to the full decode, for arbitrary ids as well. */
#include "fuzz_tokenizer.h"

static const char sample[] = "Hello, world! It's 2024: caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80"
                             "  <s> </s> <|endoftext|>\n\tend";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char *tokenizer, *config;
    if (!tokenizer) {
        tokenizer = fuzz_path("tokenizer.json");
        config = fuzz_path("tokenizer_config.json");
    }
    char *parts[2];
    fuzz_split(data, size, parts, 2);
    fuzz_write_or_remove(tokenizer, parts[0]);
    fuzz_write_or_remove(config, parts[1]);
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    spindle_status st = spindle_tokenizer_load(fuzz_scratch_dir(), &tok, &err);
    if (st == SPINDLE_OK) {
        fuzz_exercise_tokenizer(tok, sample, sizeof sample - 1);
        size_t n_ids = 0, len = 0;
        int32_t *ids = fuzz_ids_from_bytes(tok, data, size < 64 ? size : 64, &n_ids);
        free(fuzz_decode_both_ways(tok, ids, n_ids, false, &len));
        free(ids);
        (void)sp_tokenizer_chat_template(tok, NULL);
        (void)sp_tokenizer_config_string(tok, "eos_token");
        spindle_tokenizer_free(tok);
    } else {
        fuzz_check_error(st, &err);
        FUZZ_CHECK(!tok, "tokenizer returned with an error");
    }
    fuzz_free_parts(parts, 2);
    return 0;
}
