/* The server's reply parser and stream assembler (src/server/tool_calls.h,
 * tool_stream.h) on arbitrary replies.
 *
 * Input: one byte of options (format = byte % 5; bit 3 tools, bit 4
 * reasoning, bit 5 starts in reasoning, bit 6 a single call, bit 7 a
 * reply forced to be calls), then the
 * reply split into pieces at every 0x02 byte. Invariants: no crash, and the
 * stream's deltas over the growing prefixes, joined, equal the whole parse
 * of the reply (content, reasoning, each call's name and arguments), with
 * every call's id and name sent first, once, in order. */
#include "fuzz_common.h"

#include "../tools/reply_join.h"

static bool same(const sp_strbuf *a, const sp_strbuf *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t o = data[0];
    sp_reply_options opt = {.format = (sp_tool_format)(o % 5), .tools = o & 8,
                            .reasoning = o & 16, .starts_in_reasoning = o & 32,
                            .single_call = o & 64, .calls_only = o & 128};
    size_t n = size - 1;
    char *text = malloc(n + 1);
    size_t *ends = malloc((n + 1) * sizeof *ends);
    if (!text || !ends) abort();
    size_t len = 0;
    int pieces = 0;
    for (size_t i = 0; i < n; i++) {
        if (data[1 + i] == 2) ends[pieces++] = len;
        else text[len++] = (char)data[1 + i];
    }
    sp_reply_cursor st;
    sp_reply_cursor_init(&st, &opt, 1);
    reply_joined j = {0};
    for (int k = 0; k <= pieces; k++) {
        sp_reply_delta d;
        bool last = k == pieces;
        if (!sp_reply_cursor_next(&st, text, last ? len : ends[k], last, &d)) abort();
        reply_join(&j, &d);
        sp_reply_delta_free(&d);
    }
    sp_reply_parts whole = {0};
    if (!sp_reply_parse(&opt, text, len, true, &whole)) abort();
    FUZZ_CHECK(!j.out_of_order, "a call's deltas out of OpenAI's order");
    FUZZ_CHECK(same(&j.content, &whole.content), "streamed content differs");
    FUZZ_CHECK(same(&j.reasoning, &whole.reasoning), "streamed reasoning differs");
    int calls = whole.n_calls < REPLY_JOIN_MAX_CALLS ? whole.n_calls : REPLY_JOIN_MAX_CALLS;
    FUZZ_CHECK(j.n_calls == calls, "%d calls streamed, %d whole", j.n_calls, calls);
    for (int k = 0; k < calls; k++)
        FUZZ_CHECK(!strcmp(j.names[k], whole.calls[k].name) &&
                       same(&j.args[k], &whole.calls[k].arguments),
                   "call %d differs", k);
    sp_reply_parts_free(&whole);
    sp_reply_cursor_free(&st);
    reply_join_free(&j);
    free(text);
    free(ends);
    return 0;
}
