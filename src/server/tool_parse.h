/* What the reply parsers of tool_calls.c and tool_formats.c share:
 * the output builder and the scanners. Internal to those files. */
#ifndef SP_SERVER_TOOL_PARSE_H
#define SP_SERVER_TOOL_PARSE_H

#include "server/tool_calls.h"

/* One parse in progress. */
typedef struct sp_reply_ctx {
    const sp_reply_options *opt;
    const char *s;
    size_t n;
    bool final;
    sp_reply_parts *out;
    bool calls_closed;     /* single_call: the first call is complete */
    bool after_markup;     /* a reasoning block or a call came before: the
                              content's leading space is dropped */
    bool in_calls;         /* calls_only: a call marker or call came; no
                              more content */
} sp_reply_ctx;

size_t sp_tp_skip_ws(const char *s, size_t i, size_t n);
bool sp_tp_starts(const char *s, size_t i, size_t n, const char *lit);
/* First position >= i where `lit` starts, or n. */
size_t sp_tp_find(const char *s, size_t i, size_t n, const char *lit);
/* Length of the longest suffix of s[i..n) that is a proper prefix of one of
 * `markers` (NULL-terminated): text that may yet become a marker. */
size_t sp_tp_marker_tail(const char *s, size_t i, size_t n, const char *const *markers);

/* One JSON value from i (no leading space): its end, and whether it is
 * complete (a number or literal at the very end of a partial text is not). */
size_t sp_tp_json_end(const char *s, size_t i, size_t n, bool final, bool *complete);

/* Content s[i..e): leading space dropped after markup, trailing
 * space dropped before a call (before_call) and held back while the text may
 * go on (partial, e == n). */
void sp_tp_content(sp_reply_ctx *c, size_t i, size_t e, bool before_call);
/* A new call (NULL when single_call has its one, or out of memory). */
sp_tool_call *sp_tp_new_call(sp_reply_ctx *c, const char *name, size_t name_len);

/* Past the closing tag `close` after space at *i; *stop when the text ends
 * inside it (partial: it is still arriving). */
void sp_tp_skip_close(sp_reply_ctx *c, size_t *i, const char *close, bool *stop);

/* A {"name": ..., "arguments" | "parameters": {...}} object from i. */
typedef enum { SP_OBJ_BAD = -1, SP_OBJ_PARTIAL = 0, SP_OBJ_DONE = 1 } sp_obj_status;
typedef struct sp_obj_call {
    char *name;               /* malloc'd once the name string is complete */
    size_t args_at, args_end; /* raw text of the arguments value */
    bool has_args;
    size_t end;               /* past the object (DONE) */
} sp_obj_call;
sp_obj_status sp_tp_call_object(const char *s, size_t i, size_t n, bool final,
                                sp_obj_call *out);
/* Add the call an object scan found (if it has a name); the arguments "{}"
 * when the object had none and is complete. */
void sp_tp_add_object_call(sp_reply_ctx *c, const sp_obj_call *o, sp_obj_status st);

/* The formats of tool_formats.c. Each parses the reply from i (after the
 * reasoning block) to the end. */
void sp_tp_parse_harmony(sp_reply_ctx *c);
void sp_tp_parse_gemma_call(sp_reply_ctx *c, size_t *i, bool *stop);

#endif
