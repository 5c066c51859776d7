/* A structured reply (tool_calls.h) sent piece by piece: after each new
 * piece of raw text, the whole text so far is parsed again and only what
 * is new since the last event goes out, in OpenAI's shape (a call's id and
 * name first, then fragments of its arguments). The partial parses are
 * prefixes of the final one, so the fragments concatenate to exactly the
 * non-streamed answer. */
#ifndef SP_SERVER_TOOL_STREAM_H
#define SP_SERVER_TOOL_STREAM_H

#include <stdint.h>

#include "server/tool_calls.h"

/* Room for a prefix of up to 7 characters ("call_", "toolu_") and 24 more. */
#define SP_TOOL_ID_SIZE 32

/* The id of call `index` of a request: Mistral's nine alphanumerics (its
 * templates refuse any other), else `prefix` (NULL: "call_", at most 7
 * characters) and 24 of them; a function of (seed, index), so a request's
 * stream and whole answer agree. */
void sp_tool_call_id(sp_tool_format f, const char *prefix, uint64_t seed, int index,
                     char out[SP_TOOL_ID_SIZE]);

/* One tool-call entry of a delta: a new call (id and name set, arguments
 * from the start) or more arguments of call `index` (id, name NULL). */
typedef struct sp_tool_delta {
    int index;
    const char *id, *name;
    const char *arguments;
    size_t arguments_len;
} sp_tool_delta;

typedef struct sp_reply_cursor {
    sp_reply_options opt;
    uint64_t id_seed;
    size_t content_sent, reasoning_sent;
    int calls_sent;               /* calls whose id and name went out */
    size_t *args_sent;            /* per call, bytes of arguments sent */
    int cap_args;
    char (*ids)[SP_TOOL_ID_SIZE];
} sp_reply_cursor;

/* What is new: pointers into `parts` (and the stream's ids), valid until the
 * next call or sp_reply_delta_free. */
typedef struct sp_reply_delta {
    sp_reply_parts parts;
    const char *content, *reasoning;
    size_t content_len, reasoning_len;
    sp_tool_delta *tools;
    int n_tools;
} sp_reply_delta;

void sp_reply_cursor_init(sp_reply_cursor *st, const sp_reply_options *opt, uint64_t id_seed);
/* Parse text[0..len) (final: the whole reply) and fill `d` with what was not
 * sent yet, marking it sent. False when out of memory. */
bool sp_reply_cursor_next(sp_reply_cursor *st, const char *text, size_t len, bool final,
                          sp_reply_delta *d);
void sp_reply_delta_free(sp_reply_delta *d);
void sp_reply_cursor_free(sp_reply_cursor *st);

#endif
