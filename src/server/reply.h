/* A chat job's reply through the structured parser (tool_calls.h): when a
 * reply is parsed (tools offered, or a reasoning model), how it is
 * detokenized, and its pieces in the API's shape. job.c calls these. */
#ifndef SP_SERVER_REPLY_H
#define SP_SERVER_REPLY_H

#include "server/api_response.h"
#include "server/state.h"
#include "server/tool_stream.h"

/* Once the model is loaded: s->tool_format from the chat template's
 * rendering of the probe conversation, s->think_token from the vocabulary. */
void sp_reply_detect_format(sp_server *s);

/* Render chat request r's messages (generation prompt added) into *text
 * (spindle_free), with the server's --chat-template-kwargs under the
 * request's chat_template_kwargs (the request's win). False with a 400 in
 * *e, naming --chat-template when the model has no template. */
bool sp_reply_render_chat(const sp_server *s, const sp_api_request *r, char **text,
                          sp_api_error *e);

typedef struct sp_job_reply {
    bool structured;    /* the reply goes through the parser */
    bool keep_special;  /* the format's markers are special tokens: keep them
                           in the text, hide the stop tokens */
    bool any_call;      /* a tool call was sent: finish_reason "tool_calls" */
    sp_reply_cursor stream;
    int32_t *script;    /* a test build's scripted reply (see below) */
    int n_script, script_at;
} sp_job_reply;

/* The test hook: a reply that replaces the model's tokens, for the
 * prompt's rendered text. The library's definition is weak and returns
 * NULL; only the test binary (tests/server/scripted_reply.c) defines it. */
const char *sp_server_scripted_reply(const char *prompt);

/* The prompt ends inside an open <think> (DeepSeek-R1's and Qwen3.5's
 * generation prompts write it). */
bool sp_reply_opens_think(const char *prompt);

/* Decide for request r, whose rendered prompt is `prompt` (NULL for a
 * completion); seed makes the call ids. */
void sp_job_reply_plan(const sp_server *s, const sp_api_request *r, const char *prompt,
                       uint64_t seed, sp_job_reply *jr);
/* The token to detokenize in place of the generated `id` (the script's
 * next one in a test build); *last when the script is done. */
int32_t sp_job_reply_token(sp_job_reply *jr, int32_t id, bool *last);
/* Whether token `id` stays out of the text (a stop token kept as special). */
bool sp_job_reply_hides(const sp_server *s, const sp_job_reply *jr, int32_t id);
/* Whether `id` ends a generation (the server's stop ids, the model's eos
 * and end-of-turn ids): it is never part of the reply's text. */
bool sp_server_is_end_token(const sp_server *s, int32_t id);
/* The new pieces after the text grew to text[0..len) (final: complete), into
 * `rd` (sp_reply_delta_free it) and the content, reasoning and tool-call
 * fields of `d`. False when out of memory. */
bool sp_job_reply_next(sp_job_reply *jr, const char *text, size_t len, bool final,
                       sp_reply_delta *rd, sp_api_delta *d);
void sp_job_reply_free(sp_job_reply *jr);

#endif
