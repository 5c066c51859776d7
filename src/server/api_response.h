/* The JSON the generation routes answer with, shaped exactly as OpenAI's:
 * chat.completion / text_completion objects, their streaming chunks as
 * server-sent events, usage, logprobs and the error object. */
#ifndef SP_SERVER_API_RESPONSE_H
#define SP_SERVER_API_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"
#include "server/api_request.h"
#include "server/tool_stream.h"
#include "spindle.h"

/* One generated token's log-probability and its alternatives. */
typedef struct sp_api_logprob {
    int32_t token;
    float logprob;
    int n_top;
    spindle_token_logprob top[SPINDLE_MAX_TOP_LOGPROBS];
} sp_api_logprob;

/* What every object of one response carries. */
typedef struct sp_api_head {
    sp_api_kind kind;
    const char *id;       /* "chatcmpl-..." / "cmpl-..." */
    long long created;    /* Unix seconds */
    const char *model;
} sp_api_head;

typedef struct sp_api_usage {
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;
} sp_api_usage;

/* The piece of output one object carries: text (may be empty), the
 * logprobs of the tokens it covers (want_logprobs: the field is an object,
 * else null), and the finish reason (NULL: not finished). */
typedef struct sp_api_delta {
    int index;            /* the choice's */
    const char *text;
    size_t len;
    const sp_api_logprob *logprobs;
    int n_logprobs;
    bool want_logprobs;
    const char *finish_reason;
    /* chat: reasoning_content (none when empty) and tool calls. In a chunk
     * each entry is one of delta.tool_calls (a call's id, type and name with
     * "arguments": "", or a fragment of its arguments); in a whole message the
     * entries of one index are joined into one call. */
    const char *reasoning;
    size_t reasoning_len;
    const sp_tool_delta *tool_calls;
    int n_tool_calls;
} sp_api_delta;

/* {"error": {...}} (malloc'd; NULL when out of memory). */
char *sp_api_error_json(const sp_api_error *e);

/* The whole non-streaming response, one choice per delta d[0..n) (malloc'd). */
char *sp_api_response_json(const sp_api_head *h, const sp_api_delta *d, int n,
                           const sp_api_usage *u, const spindle_tokenizer *tok);

/* One `data: {...}\n\n` event appended to `out`. role: the chat stream's
 * first chunk (delta.role "assistant"). usage_field: the chunk carries
 * "usage": null (stream_options.include_usage). */
void sp_api_chunk_event(sp_strbuf *out, const sp_api_head *h, const sp_api_delta *d,
                        bool role, bool usage_field, const spindle_tokenizer *tok);
/* The include_usage chunk: empty choices and the usage. */
void sp_api_usage_event(sp_strbuf *out, const sp_api_head *h, const sp_api_usage *u);
/* An error inside a stream: `data: {"error": ...}\n\n`. */
void sp_api_error_event(sp_strbuf *out, const sp_api_error *e);

/* "spindle-<version>": the system_fingerprint. */
#define SP_API_FINGERPRINT "spindle-" SPINDLE_VERSION

#endif
