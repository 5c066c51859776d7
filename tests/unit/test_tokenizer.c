/* The tokenizer API on small hand-written files: load errors, the
 * tokenizer_config.json accessors (strings, {content} objects, named chat
 * templates, chat_template.jinja), bos/eos ids, a WordPiece pipeline whose
 * expected ids follow from the vocabulary written here, invalid UTF-8
 * replacement, and the streaming detokenizer over byte-fallback tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"
#include "spindle.h"

static char dir[64];

static void write_file(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_file(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* WordPiece over a lowercase/whitespace pipeline; ids are positions in
 * this vocabulary. */
static const char *WP_JSON =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
    "\"added_tokens\":[{\"id\":0,\"content\":\"[UNK]\",\"special\":true,\"normalized\":false,"
    "\"lstrip\":false,\"rstrip\":false,\"single_word\":false},"
    "{\"id\":1,\"content\":\"[CLS]\",\"special\":true,\"normalized\":false,"
    "\"lstrip\":false,\"rstrip\":false,\"single_word\":false},"
    "{\"id\":2,\"content\":\"[SEP]\",\"special\":true,\"normalized\":false,"
    "\"lstrip\":false,\"rstrip\":false,\"single_word\":false}],"
    "\"normalizer\":{\"type\":\"Lowercase\"},"
    "\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"},"
    "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",2],\"cls\":[\"[CLS]\",1]},"
    "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
    "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","
    "\"max_input_chars_per_word\":100,\"vocab\":{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,"
    "\"hello\":3,\"wor\":4,\"##ld\":5,\"\\u00e9t\\u00e9\":6,\"\\ufffd\":7}}}";

static const char *CONFIG_JSON =
    "{\"bos_token\":{\"content\":\"[CLS]\",\"lstrip\":false},\"eos_token\":\"[SEP]\","
    "\"pad_token\":null,"
    "\"chat_template\":[{\"name\":\"default\",\"template\":\"DEFAULT\"},"
    "{\"name\":\"tool_use\",\"template\":\"TOOLS\"}]}";

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/sp_tok_test_%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    return system(cmd);
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static void test_load_errors(void **state) {
    (void)state;
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    assert_int_equal(spindle_tokenizer_load("/nonexistent/dir", &tok, &err), SPINDLE_ERR_IO);
    assert_null(tok);
    assert_true(strlen(err.message) > 0);
    write_file("tokenizer.json", "{\"model\": ");
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_ERR_FORMAT);
    write_file("tokenizer.json", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}");
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_ERR_FORMAT);
    assert_non_null(strstr(err.message, "merge"));
    write_file("tokenizer.json", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-4},\"merges\":[]}}");
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_ERR_FORMAT);
    assert_null(tok);
}

static void test_config_and_pipeline(void **state) {
    (void)state;
    write_file("tokenizer.json", WP_JSON);
    write_file("tokenizer_config.json", CONFIG_JSON);
    remove_file("chat_template.jinja");
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_OK);
    assert_string_equal(sp_tokenizer_config_string(tok, "bos_token"), "[CLS]");
    assert_string_equal(sp_tokenizer_config_string(tok, "eos_token"), "[SEP]");
    assert_null(sp_tokenizer_config_string(tok, "pad_token"));
    assert_null(sp_tokenizer_config_string(tok, "unk_token"));
    assert_int_equal(spindle_tokenizer_bos_id(tok), 1);
    assert_int_equal(spindle_tokenizer_eos_id(tok), 2);
    assert_int_equal(spindle_tokenizer_vocab_size(tok), 8);
    assert_string_equal(sp_tokenizer_chat_template(tok, NULL), "DEFAULT");
    assert_string_equal(sp_tokenizer_chat_template(tok, "tool_use"), "TOOLS");
    assert_null(sp_tokenizer_chat_template(tok, "missing"));
    assert_string_equal(spindle_tokenizer_id_to_token(tok, 5), "##ld");
    assert_null(spindle_tokenizer_id_to_token(tok, 8));

    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "Hello WORLD \xC3\x89t\xC3\xA9 xyz";
    assert_int_equal(spindle_tokenizer_encode(tok, text, strlen(text), true, &ids, &n, &err), SPINDLE_OK);
    int32_t want[] = {1, 3, 4, 5, 6, 0, 2};
    assert_int_equal(n, 7);
    assert_memory_equal(ids, want, sizeof want);
    spindle_free(ids);

    /* Invalid UTF-8: a lone continuation byte and a truncated sequence
     * each become one U+FFFD (id 7), like Python's errors="replace". */
    const char bad[] = "\x80 hello \xE2\x82";
    assert_int_equal(spindle_tokenizer_encode(tok, bad, sizeof bad - 1, false, &ids, &n, &err), SPINDLE_OK);
    int32_t want_bad[] = {7, 3, 7};
    assert_int_equal(n, 3);
    assert_memory_equal(ids, want_bad, sizeof want_bad);
    spindle_free(ids);

    char *out = NULL;
    size_t len = 0;
    int32_t dec[] = {1, 3, 4, 5, 2};
    assert_int_equal(spindle_tokenizer_decode(tok, dec, 5, true, &out, &len, &err), SPINDLE_OK);
    assert_string_equal(out, "hello world");
    spindle_free(out);
    spindle_tokenizer_free(tok);

    /* chat_template.jinja takes precedence for the default template. */
    write_file("chat_template.jinja", "FROM FILE");
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_OK);
    assert_string_equal(sp_tokenizer_chat_template(tok, NULL), "FROM FILE");
    assert_string_equal(sp_tokenizer_chat_template(tok, "tool_use"), "TOOLS");
    spindle_tokenizer_free(tok);
    remove_file("chat_template.jinja");
    remove_file("tokenizer_config.json");
}

/* Byte-fallback BPE: "é" is only reachable as bytes <0xC3><0xA9>. */
static void test_stream_byte_fallback(void **state) {
    (void)state;
    write_file("tokenizer.json",
               "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"unk_token\":\"<unk>\","
               "\"vocab\":{\"<unk>\":0,\"<0xC3>\":1,\"<0xA9>\":2,\"\\u2581a\":3,\"\\u2581\":4,\"a\":5},"
               "\"merges\":[\"\\u2581 a\"]},"
               "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"},"
               "\"decoder\":{\"type\":\"Sequence\",\"decoders\":["
               "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
               "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
               "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}");
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(spindle_tokenizer_encode(tok, " a\xC3\xA9 a", 6, true, &ids, &n, &err), SPINDLE_OK);
    int32_t want[] = {3, 1, 2, 3};
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    spindle_free(ids);

    spindle_detokenizer *d = NULL;
    assert_int_equal(spindle_detokenizer_new(tok, false, &d, &err), SPINDLE_OK);
    const char *piece;
    /* A byte run is final only when a non-byte token ends it: one more
     * byte could still make the whole run invalid (one U+FFFD per byte). */
    const char *expect[] = {"a", "", "", "\xC3\xA9 a"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(spindle_detokenizer_push(d, want[i], &piece, &err), SPINDLE_OK);
        assert_string_equal(piece, expect[i]);
    }
    assert_int_equal(spindle_detokenizer_flush(d, &piece, &err), SPINDLE_OK);
    assert_string_equal(piece, "");
    /* An unfinished byte run is held back, then flushed as U+FFFD. */
    assert_int_equal(spindle_detokenizer_push(d, 1, &piece, &err), SPINDLE_OK);
    assert_string_equal(piece, "");
    assert_int_equal(spindle_detokenizer_flush(d, &piece, &err), SPINDLE_OK);
    assert_string_equal(piece, "\xEF\xBF\xBD");
    spindle_detokenizer_free(d);
    spindle_tokenizer_free(tok);
}

/* Pieces of `ids` streamed one at a time, concatenated. */
static char *stream_all(const spindle_tokenizer *tok, const int32_t *ids, int n, bool skip) {
    spindle_detokenizer *d = NULL;
    spindle_error err = {0};
    assert_int_equal(spindle_detokenizer_new(tok, skip, &d, &err), SPINDLE_OK);
    char *all = calloc(1, 256);
    for (int i = 0; i <= n; i++) {
        const char *piece;
        assert_int_equal(i < n ? spindle_detokenizer_push(d, ids[i], &piece, &err)
                               : spindle_detokenizer_flush(d, &piece, &err),
                         SPINDLE_OK);
        strcat(all, piece);
    }
    spindle_detokenizer_free(d);
    return all;
}

/* The decode drops ids missing from the vocabulary and (when skipping)
 * special tokens before ByteFallback sees the run, so a run goes on across
 * them: "A" must not be streamed before the next byte makes the run
 * invalid (fuzz corpus regress-detok-hole-in-byte-run). */
static void test_stream_byte_run_across_dropped_ids(void **state) {
    (void)state;
    write_file("tokenizer.json",
               "{\"added_tokens\":[{\"id\":4,\"content\":\"<s>\",\"special\":true,"
               "\"normalized\":false,\"lstrip\":false,\"rstrip\":false,\"single_word\":false}],"
               "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"unk_token\":\"<unk>\","
               "\"vocab\":{\"<unk>\":0,\"<0x41>\":1,\"<0xC3>\":2,\"<s>\":4,\"b\":5},\"merges\":[]},"
               "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},"
               "{\"type\":\"Fuse\"}]}}");
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_OK);
    const int32_t hole[] = {1, 3, 2, 5}, special[] = {1, 4, 2, 5};
    const struct { const int32_t *ids; bool skip; } cases[] = {
        {hole, false}, {hole, true}, {special, true}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *full = NULL;
        assert_int_equal(spindle_tokenizer_decode(tok, cases[c].ids, 4, cases[c].skip, &full,
                                                  NULL, &err), SPINDLE_OK);
        assert_string_equal(full, "\xEF\xBF\xBD\xEF\xBF\xBD" "b");
        char *streamed = stream_all(tok, cases[c].ids, 4, cases[c].skip);
        assert_string_equal(streamed, full);
        free(streamed);
        spindle_free(full);
    }
    spindle_tokenizer_free(tok);
}

/* A vocabulary entry that is not UTF-8 (a lead byte without its
 * continuation bytes, fuzz corpus regress-detok-diverges) once reached the
 * decoders; such a tokenizer.json is now refused whole, as Hugging Face
 * refuses it, naming the file and the offset of the first bad byte. */
static void test_metaspace_ill_formed_token(void **state) {
    (void)state;
    write_file("tokenizer.json",
               "{\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
               "\"prepend_scheme\":\"always\",\"split\":true},"
               "\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],"
               "[\"\\u2581\",-1.0],[\"\xfd" "e\",-2.0],[\"x\",-3.0]]}}");
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_ERR_FORMAT);
    assert_null(tok);
    assert_non_null(strstr(err.message, "tokenizer.json: not valid UTF-8"));
}

static void test_decode_all_skipped(void **state) {
    (void)state;
    write_file("tokenizer.json", WP_JSON);
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    assert_int_equal(spindle_tokenizer_load(dir, &tok, &err), SPINDLE_OK);
    const int32_t ids[] = {1, 0, 2};
    char *text = NULL;
    size_t len = 99;
    assert_int_equal(spindle_tokenizer_decode(tok, ids, 3, true, &text, &len, &err), SPINDLE_OK);
    assert_int_equal(len, 0);
    assert_non_null(text);
    assert_int_equal(text[0], '\0');
    spindle_free(text);
    spindle_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_config_and_pipeline),
        cmocka_unit_test(test_stream_byte_fallback),
        cmocka_unit_test(test_stream_byte_run_across_dropped_ids),
        cmocka_unit_test(test_decode_all_skipped),
        cmocka_unit_test(test_metaspace_ill_formed_token),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
