/* --grammar FILE / --json-schema FILE of run and chat, compiled against the
 * model's tokenizer (grammar_file.h). */
#include "cli/grammar_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"

spindle_status sp_cli_grammar_load(const spindle_tokenizer *tok,
                                   const char *gbnf_file,
                                   const char *schema_file,
                                   spindle_grammar_vocab **vocab,
                                   spindle_grammar **grammar,
                                   spindle_error *err) {
    *vocab = NULL;
    *grammar = NULL;
    const char *path = gbnf_file ? gbnf_file : schema_file;
    if (!path) return SPINDLE_OK;
    char *text = NULL;
    size_t len = 0;
    spindle_status st = sp_read_text_file(path, &text, &len, err);
    if (!st) st = spindle_grammar_vocab_new(tok, vocab, err);
    if (!st)
        st = spindle_grammar_new(*vocab, gbnf_file ? SPINDLE_GRAMMAR_GBNF
                                                   : SPINDLE_GRAMMAR_JSON_SCHEMA,
                                 text, len, grammar, err);
    if (st && err) { /* name the file in front of the parser's message */
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "%.200s: %.300s", path, err->message);
        memcpy(err->message, msg, sizeof msg);
    }
    free(text);
    return st;
}
