/* The JSON of OpenAI's Responses API that POST /v1/responses answers
 * with: the response object (reasoning, message and function_call output
 * items, usage) and its semantic stream events (response.created,
 * response.in_progress, response.output_item.added / .done,
 * response.content_part.added / .done, response.output_text.delta /
 * .done, response.reasoning_text.delta / .done,
 * response.function_call_arguments.delta / .done, response.completed or
 * response.incomplete), each with its sequence_number. Built from the
 * same pieces as the chat answers (api_response.h).
 *
 * One builder serves both: a whole answer is its one delta fed through
 * the stream's functions with no event buffer. */
#ifndef SP_SERVER_API_RESPONSES_H
#define SP_SERVER_API_RESPONSES_H

#include "server/api_response.h"

struct cJSON;

/* A response being built: the response object (its output grows as items
 * finish), the open output item, and the next sequence_number. */
typedef struct sp_responses_stream {
    struct cJSON *response;
    int open;              /* 0: none, else a RESPONSES_ITEM_* of the .c file */
    int tool_index;        /* the open function_call's call */
    char item_id[64];
    char call_id[64];
    char *call_name;
    sp_strbuf text;        /* the open item's text or arguments so far */
    long sequence;
    bool oom;
} sp_responses_stream;

/* The response object in progress (echo_json: the request's repeated
 * fields, api_request.h), and with `out` its response.created and
 * response.in_progress events. */
void sp_responses_start(sp_strbuf *out, sp_responses_stream *st, const sp_api_head *h,
                        const char *echo_json);
/* The output of one delta: reasoning, text and function calls, each item
 * opened and finished as the kind changes (its events into `out` when
 * not NULL). */
void sp_responses_delta(sp_strbuf *out, sp_responses_stream *st, const sp_api_delta *d);
/* The open item finished, status "completed" or, when `incomplete` (the
 * token limit or the context's end), "incomplete" with its reason; usage
 * set; response.completed / response.incomplete into `out`. */
void sp_responses_end(sp_strbuf *out, sp_responses_stream *st, bool incomplete,
                      const sp_api_usage *u);
/* An error inside a stream: the `error` event. */
void sp_responses_error_event(sp_strbuf *out, sp_responses_stream *st, const sp_api_error *e);
/* The response object as JSON (malloc'd; NULL when out of memory). */
char *sp_responses_json(const sp_responses_stream *st);
/* The conversation a later previous_response_id continues: `conversation`
 * (chat messages JSON) and the response's output as an assistant message
 * (its text and tool_calls). Malloc'd; NULL when out of memory. */
char *sp_responses_history(const sp_responses_stream *st, const char *conversation);
void sp_responses_stream_free(sp_responses_stream *st);

#endif
