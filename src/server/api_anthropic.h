/* The JSON of Anthropic's Messages API that POST /v1/messages answers
 * with: the message object, its server-sent events (message_start,
 * content_block_start / _delta / _stop, ping, message_delta,
 * message_stop) and the error object. Built from the same pieces as the
 * OpenAI answers (api_response.h). */
#ifndef SP_SERVER_API_ANTHROPIC_H
#define SP_SERVER_API_ANTHROPIC_H

#include "server/api_response.h"

/* Why a message ended: "end_turn", "max_tokens", "stop_sequence" (with the
 * string, else NULL) or "tool_use". */
typedef struct sp_anthropic_stop {
    const char *reason;
    const char *sequence;
} sp_anthropic_stop;

/* Anthropic's error type for an HTTP status (400 invalid_request_error,
 * 401 authentication_error, 404 not_found_error, 429 rate_limit_error,
 * 503 overloaded_error, other 5xx api_error, ...). */
const char *sp_anthropic_error_type(int http_status);
/* {"type": "error", "error": {"type", "message"}} (malloc'd; NULL when out
 * of memory). */
char *sp_anthropic_error_json(const sp_api_error *e);
/* An error inside a stream: `event: error`. */
void sp_anthropic_error_event(sp_strbuf *out, const sp_api_error *e);

/* The whole message: thinking (d->reasoning), text and tool_use blocks. */
char *sp_anthropic_message_json(const sp_api_head *h, const sp_api_delta *d,
                                const sp_api_usage *u, sp_anthropic_stop stop);

/* A stream's content blocks: the one open, and how many were opened. */
typedef struct sp_anthropic_stream {
    int n_blocks;
    int open;          /* 0: none, else an ANTHROPIC_BLOCK_* of the .c file */
    int tool_index;    /* the open tool_use block's call */
    bool pinged;
} sp_anthropic_stream;

/* message_start (usage with the prompt's tokens), then the text block's
 * content_block_start and ping when text_block (a reply without tools or
 * reasoning is one text block, opened at once as Anthropic's API does);
 * else the first block and the ping come with the first delta. */
void sp_anthropic_start_events(sp_strbuf *out, sp_anthropic_stream *st, const sp_api_head *h,
                               const sp_api_usage *u, bool text_block);
/* The events of one delta: reasoning as thinking_delta, text as
 * text_delta, tool calls as a tool_use block each (its input as
 * input_json_delta), each block opened and closed as the kind changes. */
void sp_anthropic_delta_events(sp_strbuf *out, sp_anthropic_stream *st, const sp_api_delta *d);
/* content_block_stop of the open block, message_delta (stop reason, the
 * final usage) and message_stop. */
void sp_anthropic_end_events(sp_strbuf *out, sp_anthropic_stream *st, sp_anthropic_stop stop,
                             const sp_api_usage *u);

#endif
