/* sentence-transformers' module files (src/embedding/st_config.h): the
 * parsers of modules.json, the Pooling config, sentence_bert_config.json
 * and config_sentence_transformers.json on fuzzed text.
 *
 * Input: one byte choosing the parser (low 2 bits: modules, pooling,
 * sbert, prompts), then the file's text. Invariants: an error is one line
 * naming the file; a parsed modules.json has a Pooling path inside the
 * model directory; a pooling mode is one of the three; max_seq_length is
 * positive; a default prompt names a prompt. */
#include "fuzz_common.h"

#include "embedding/st_config.h"

#define LABEL "dir/file.json"

static void check_result(spindle_status st, const spindle_error *e,
                         const sp_st_config *c, int which) {
    if (st) {
        FUZZ_CHECK(e->message[0] && !strchr(e->message, '\n') &&
                       strstr(e->message, LABEL) == e->message,
                   "error '%s'", e->message);
        return;
    }
    if (which == 0)
        FUZZ_CHECK(c->has_modules && c->pooling_path &&
                       c->pooling_path[0] != '/' &&
                       !strstr(c->pooling_path, ".."),
                   "pooling path %s", c->pooling_path ? c->pooling_path : "-");
    FUZZ_CHECK(c->pooling == SP_POOL_MEAN || c->pooling == SP_POOL_CLS ||
                   c->pooling == SP_POOL_LAST, "pooling %d", (int)c->pooling);
    FUZZ_CHECK(c->max_seq_length >= 0, "max_seq_length %d", c->max_seq_length);
    FUZZ_CHECK(!c->default_prompt || sp_st_prompt(c, c->default_prompt),
               "default prompt");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    sp_st_config c;
    memset(&c, 0, sizeof c);
    spindle_error e;
    memset(&e, 0, sizeof e);
    int which = data[0] & 3;
    spindle_status st =
        which == 0 ? sp_st_parse_modules(text, LABEL, &c, &e)
        : which == 1 ? sp_st_parse_pooling(text, LABEL, 384, &c, &e)
        : which == 2 ? sp_st_parse_sbert(text, LABEL, &c, &e)
                     : sp_st_parse_prompts(text, LABEL, &c, &e);
    check_result(st, &e, &c, which);
    sp_st_config_free(&c);
    free(text);
    return 0;
}
