/* The forced tool call's grammar (src/server/tool_grammar.c): a chat body
 * whose tools and tool_choice ("required" or a named function) the request
 * parser accepted becomes a JSON Schema over the call objects, is converted
 * and compiled against a real vocabulary (Qwen3's, loaded once: no model),
 * and wrapped in the template format's markup, which is compiled too.
 *
 * Input: an options byte (bit 0: Llama 3 JSON instead of Hermes/Qwen
 * <tool_call> markup; bit 1: the prompt opened <think>), then the body.
 * Invariants: a failure is a 4xx (503 for memory) with a one-line message
 * and leaves the request's grammar alone; a success is a compiled grammar
 * whose GBNF has a root rule and parses again. */
#include "fuzz_tokenizer.h"

#include <pthread.h>

#include "grammar/grammar.h"
#include "server/state.h"

#define VOCAB (1 << 20)

static const char *const names[] = {"tiny"};
static const sp_api_limits limits = {.vocab_size = VOCAB, .model_names = names,
                                     .n_model_names = 1, .default_max_tokens = 16};

static sp_server server;

/* The tokenizer and its vocabulary trie, once (slow: not in an input's
 * time). */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char dir[512];
    server.tok = fuzz_load_real_tokenizer("qwen3", dir, sizeof dir);
    pthread_mutex_init(&server.lock, NULL);
    spindle_error err = {0};
    FUZZ_CHECK(!spindle_grammar_vocab_new(server.tok, &server.grammar_vocab, &err), "%s",
               err.message);
    return 0;
}

static void check_compiled(const spindle_grammar *g) {
    const char *gbnf = spindle_grammar_gbnf(g);
    FUZZ_CHECK(gbnf && strstr(gbnf, "root ::="), "no root rule");
    sp_gram parsed;
    spindle_error err = {0};
    spindle_status st = sp_gbnf_parse(gbnf, strlen(gbnf), &parsed, &err);
    FUZZ_CHECK(st == SPINDLE_OK, "compiled GBNF does not parse again: %s", err.message);
    sp_gram_free(&parsed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    sp_server *s = &server;
    s->tool_format = data[0] & 1 ? SP_TOOLS_LLAMA3 : SP_TOOLS_HERMES;
    const bool in_think = data[0] & 2;
    sp_api_request r;
    sp_api_error e;
    memset(&e, 0, sizeof e);
    if (!sp_api_parse_generation(SP_API_CHAT, (const char *)data + 1, size - 1, &limits, &r,
                                 &e)) {
        sp_api_request_free(&r);
        return 0;
    }
    if (sp_server_tool_grammar_applies(s, &r)) {
        spindle_grammar *before = r.grammar;
        memset(&e, 0, sizeof e);
        if (sp_server_compile_tool_grammar(s, &r, in_think, &e)) {
            FUZZ_CHECK(r.grammar && r.gen.grammar == r.grammar, "no grammar");
            check_compiled(r.grammar);
        } else {
            if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "rejected: %s\n", e.message);
            FUZZ_CHECK((e.http_status >= 400 && e.http_status < 500) || e.http_status == 503,
                       "status %d", e.http_status);
            FUZZ_CHECK(e.message[0] && !strchr(e.message, '\n'), "message '%s'", e.message);
            FUZZ_CHECK(r.grammar == before, "grammar replaced by a failure");
        }
    }
    sp_api_request_free(&r);
    return 0;
}
