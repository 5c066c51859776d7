/* `--grammar FILE` / `--json-schema FILE` of spindle run and chat: the
 * file compiled against the model's tokenizer (grammar_file.c). */
#ifndef SP_CLI_GRAMMAR_FILE_H
#define SP_CLI_GRAMMAR_FILE_H

#include "spindle.h"

/* Compile the GBNF file or the JSON Schema file (at most one non-NULL;
 * both NULL: nothing, *grammar stays NULL). The vocabulary and grammar
 * are the caller's to free (grammar first). */
spindle_status sp_cli_grammar_load(const spindle_tokenizer *tok,
                                   const char *gbnf_file,
                                   const char *schema_file,
                                   spindle_grammar_vocab **vocab,
                                   spindle_grammar **grammar,
                                   spindle_error *err);

#endif
