/* OpenAI's `stop`: generation ends at the first occurrence of any stop
 * string in the generated text, which may span several tokens, and neither
 * the stop string nor anything after it is sent. Text that could still
 * become the start of a stop string is held back until the next piece
 * decides it. Pure text processing: no model, no threads. */
#ifndef SP_SERVER_STOP_STRINGS_H
#define SP_SERVER_STOP_STRINGS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"

typedef struct sp_stop_matcher {
    char *const *stops;   /* borrowed, non-empty strings */
    int n_stops;
    size_t longest;       /* length of the longest stop string */
    sp_strbuf held;       /* text not yet safe to send */
    bool matched;         /* a stop string was found; nothing more is sent */
    int which;            /* the index of the one found, -1 before */
} sp_stop_matcher;

void sp_stop_init(sp_stop_matcher *m, char *const *stops, int n_stops);
void sp_stop_free(sp_stop_matcher *m);

/* Feed the next piece of generated text; what is now safe to send is
 * appended to `out`. Returns true when a stop string completed (the text
 * before it has been appended; later calls append nothing). False from
 * the strbuf (allocation) shows in out->oom / m->held.oom. */
bool sp_stop_feed(sp_stop_matcher *m, const char *text, size_t len, sp_strbuf *out);

/* End of generation without a match: the held-back text goes to `out`. */
void sp_stop_flush(sp_stop_matcher *m, sp_strbuf *out);

#endif
