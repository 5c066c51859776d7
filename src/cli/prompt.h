/* Turning what the user typed into prompt token ids, and generated ids back
 * into streamed text: shared by `spindle run` and `spindle chat`. */
#ifndef SP_CLI_PROMPT_H
#define SP_CLI_PROMPT_H

#include <stdio.h>
#include "spindle.h"

/* Render `messages_json` with the chat template (generation prompt added)
 * and encode it without adding special tokens again, as mlx-lm and
 * transformers' apply_chat_template(tokenize=True) do. */
spindle_status sp_chat_prompt_ids(const spindle_tokenizer *tok,
                                  const char *messages_json,
                                  const char *extra_vars_json, int32_t **ids,
                                  int *n, spindle_error *err);

/* messages JSON for an optional system prompt and one user turn. */
char *sp_single_turn_messages(const char *system, const char *user);

/* Streams detokenized text to a FILE as tokens arrive. */
typedef struct sp_text_stream {
    spindle_detokenizer *detok;
    FILE *out;
    char *text;        /* everything printed, for the chat history */
    size_t len, cap;
    spindle_error err;
    bool failed;
} sp_text_stream;

spindle_status sp_text_stream_init(sp_text_stream *s,
                                   const spindle_tokenizer *tok, FILE *out,
                                   spindle_error *err);
/* A spindle_token_callback; user is the sp_text_stream. */
bool sp_text_stream_token(int32_t token, void *user);
void sp_text_stream_finish(sp_text_stream *s);
void sp_text_stream_free(sp_text_stream *s);

/* Stop ids a tokenizer adds to the model's own (its eos id). */
int sp_tokenizer_stop_ids(const spindle_tokenizer *tok, int32_t *ids, int cap);

#endif
