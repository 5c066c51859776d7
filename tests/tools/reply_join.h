/* A streamed reply's deltas (src/server/tool_stream.h) joined back into
 * one reply, as a client does, checking OpenAI's order on the way: each
 * call's id and name first, once, in index order, then its arguments.
 * Shared by tests/tools/tool_calls_parse.c and tests/fuzz/fuzz_reply_parse.c. */
#ifndef SPINDLE_TESTS_REPLY_JOIN_H
#define SPINDLE_TESTS_REPLY_JOIN_H

#include <stdlib.h>
#include <string.h>

#include "server/tool_stream.h"

#define REPLY_JOIN_MAX_CALLS 64

typedef struct reply_joined {
    sp_strbuf content, reasoning, args[REPLY_JOIN_MAX_CALLS];
    char *names[REPLY_JOIN_MAX_CALLS], *ids[REPLY_JOIN_MAX_CALLS];
    int n_calls;
    bool out_of_order;   /* a delta broke the order above */
} reply_joined;

static inline void reply_join(reply_joined *j, const sp_reply_delta *d) {
    sp_strbuf_add(&j->content, d->content, d->content_len);
    sp_strbuf_add(&j->reasoning, d->reasoning, d->reasoning_len);
    for (int k = 0; k < d->n_tools; k++) {
        const sp_tool_delta *t = &d->tools[k];
        if (t->index >= REPLY_JOIN_MAX_CALLS) continue;
        if (t->name) {
            if (t->index != j->n_calls || !t->id) {
                j->out_of_order = true;
                continue;
            }
            j->names[j->n_calls] = strdup(t->name);
            j->ids[j->n_calls++] = strdup(t->id);
        } else if (t->index >= j->n_calls || t->id) {
            j->out_of_order = true;   /* arguments before their call's name */
            continue;
        }
        sp_strbuf_add(&j->args[t->index], t->arguments, t->arguments_len);
    }
}

static inline void reply_join_free(reply_joined *j) {
    sp_strbuf_free(&j->content);
    sp_strbuf_free(&j->reasoning);
    for (int k = 0; k < REPLY_JOIN_MAX_CALLS; k++) {
        sp_strbuf_free(&j->args[k]);
        free(j->names[k]);
        free(j->ids[k]);
    }
}

#endif
