/* Streaming a structured reply as differences of successive parses
 * (tool_stream.h). */
#include "server/tool_stream.h"

#include <stdlib.h>
#include <string.h>

static const char base62[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void sp_tool_call_id(sp_tool_format f, const char *prefix, uint64_t seed, int index,
                     char out[SP_TOOL_ID_SIZE]) {
    bool mistral = f == SP_TOOLS_MISTRAL;
    size_t at = 0, want = mistral ? 9 : 24;
    if (!mistral) {
        if (!prefix) prefix = "call_";
        at = strnlen(prefix, 7);
        memcpy(out, prefix, at);
    }
    uint64_t x = mix(seed ^ mix((uint64_t)index + 1));
    for (size_t k = 0; k < want; k++) {
        if (k % 10 == 9) x = mix(x);
        out[at++] = base62[x % 62];
        x /= 62;
    }
    out[at] = '\0';
}

void sp_reply_cursor_init(sp_reply_cursor *st, const sp_reply_options *opt, uint64_t id_seed) {
    memset(st, 0, sizeof *st);
    st->opt = *opt;
    st->id_seed = id_seed;
}

static bool grow(sp_reply_cursor *st, int n) {
    if (n <= st->cap_args) return true;
    int cap = n < 8 ? 8 : n * 2;
    size_t *sent = realloc(st->args_sent, (size_t)cap * sizeof *sent);
    if (!sent) return false;
    st->args_sent = sent;
    char(*ids)[SP_TOOL_ID_SIZE] = realloc(st->ids, (size_t)cap * sizeof *ids);
    if (!ids) return false;
    st->ids = ids;
    st->cap_args = cap;
    return true;
}

/* What is past `sent` in b (a parse never shrinks what it already gave). */
static size_t fresh(const sp_strbuf *b, size_t *sent, const char **at) {
    size_t len = b->len > *sent ? b->len - *sent : 0;
    *at = b->p ? b->p + *sent : "";
    if (len) *sent = b->len;
    return len;
}

bool sp_reply_cursor_next(sp_reply_cursor *st, const char *text, size_t len, bool final,
                          sp_reply_delta *d) {
    memset(d, 0, sizeof *d);
    if (!sp_reply_parse(&st->opt, text, len, final, &d->parts)) return false;
    sp_reply_parts *p = &d->parts;
    d->content_len = fresh(&p->content, &st->content_sent, &d->content);
    d->reasoning_len = fresh(&p->reasoning, &st->reasoning_sent, &d->reasoning);
    if (!grow(st, p->n_calls) || (p->n_calls && !(d->tools = calloc((size_t)p->n_calls * 2,
                                                                     sizeof *d->tools))))
        return false;
    for (int k = 0; k < p->n_calls; k++) {
        const char *args;
        if (k >= st->calls_sent) {
            sp_tool_call_id(st->opt.format, st->opt.call_id_prefix, st->id_seed, k, st->ids[k]);
            st->args_sent[k] = 0;
            d->tools[d->n_tools++] = (sp_tool_delta){.index = k, .id = st->ids[k],
                                                     .name = p->calls[k].name, .arguments = ""};
            st->calls_sent = k + 1;
        }
        size_t n = fresh(&p->calls[k].arguments, &st->args_sent[k], &args);
        if (n)
            d->tools[d->n_tools++] = (sp_tool_delta){.index = k, .arguments = args,
                                                     .arguments_len = n};
    }
    return true;
}

void sp_reply_delta_free(sp_reply_delta *d) {
    sp_reply_parts_free(&d->parts);
    free(d->tools);
    memset(d, 0, sizeof *d);
}

void sp_reply_cursor_free(sp_reply_cursor *st) {
    free(st->args_sent);
    free(st->ids);
    memset(st, 0, sizeof *st);
}
