/* Internal view of a loaded tokenizer, for the chat-template module. The
 * public encode/decode API is in spindle.h. */
#ifndef SP_INPUT_TOKENIZER_H
#define SP_INPUT_TOKENIZER_H

#include "spindle.h"
#include "base/strbuf.h"

/* The chat template named `name` (NULL: the default one) from
 * tokenizer_config.json's "chat_template" (a string, or a list of
 * {"name", "template"}), or from chat_template.jinja beside it.
 * NULL when the tokenizer has none. Owned by the tokenizer. */
const char *sp_tokenizer_chat_template(const spindle_tokenizer *tok,
                                       const char *name);
/* Make `source` (malloc'd; the tokenizer takes it) the default chat
 * template, in place of chat_template.jinja and the config's default. */
void sp_tokenizer_set_chat_template_source(spindle_tokenizer *tok, char *source);

/* A string setting of tokenizer_config.json such as "bos_token",
 * "eos_token", "pad_token", "unk_token" (given either as a string or as an
 * {"content": ...} object). NULL when absent or null. */
const char *sp_tokenizer_config_string(const spindle_tokenizer *tok,
                                       const char *key);

/* Append the bytes token `id` stands for to `out` (the decoder's byte
 * alphabet undone): what a grammar matches the token against. False for an
 * added token (none has bytes a grammar matches), an id outside the vocabulary,
 * or when `out` ran out of memory. */
bool sp_tokenizer_token_bytes(const spindle_tokenizer *tok, int32_t id,
                              sp_strbuf *out);

#endif
