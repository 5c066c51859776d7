/* A request's prompt given as spans (spindle_request.spans): the copy
 * submit makes, each prompt position's prefix-index key, the spans of one
 * prompt chunk, where a chunk may end, and the record of the embeddings
 * spans a checkpoint carries. */
#include "generation/engine.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "models/spans.h"
#include "runtime/seq_state.h"

spindle_status sp_prompt_spans_flatten(const spindle_engine *e,
                                       const spindle_request *r,
                                       int32_t **ids, int *n,
                                       spindle_error *err) {
    *ids = NULL;
    *n = 0;
    if (r->prompt || r->n_prompt)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "a request has a prompt or spans, not both");
    int64_t total = 0;
    for (int i = 0; i < r->n_spans; i++) {
        spindle_status st = sp_span_check(&r->spans[i], e->vocab, "prompt", i,
                                          err);
        if (st) return st;
        total += r->spans[i].n;
        if (total > INT_MAX / 2)
            return sp_fail(err, SPINDLE_ERR_LIMIT, "the prompt's spans are "
                           "too long");
    }
    *ids = malloc((size_t)total * sizeof **ids);
    if (!*ids) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int i = 0, at = 0; i < r->n_spans; at += r->spans[i++].n)
        memcpy(*ids + at, r->spans[i].tokens,
               (size_t)r->spans[i].n * sizeof **ids);
    *n = (int)total;
    return SPINDLE_OK;
}

/* One span of the record: where it starts, its length, flags and digest.
 * A checkpoint keeps these bytes; a resume must bring the same. */
typedef struct {
    int32_t start, n, digest_offset;
    uint32_t flags;
    unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES];
} span_record;

spindle_status sp_prompt_spans_record(const spindle_span *spans, int n,
                                      unsigned char **out, size_t *bytes,
                                      spindle_error *err) {
    *out = NULL;
    *bytes = 0;
    int embeds = 0;
    for (int i = 0; i < n; i++) embeds += spans[i].kind == SPINDLE_SPAN_EMBEDDINGS;
    if (!embeds) return SPINDLE_OK;
    span_record *rec = calloc((size_t)embeds, sizeof *rec);
    if (!rec) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int i = 0, k = 0, at = 0; i < n; at += spans[i++].n) {
        if (spans[i].kind != SPINDLE_SPAN_EMBEDDINGS) continue;
        rec[k] = (span_record){.start = at, .n = spans[i].n,
                               .digest_offset = spans[i].digest_offset,
                               .flags = spans[i].flags};
        memcpy(rec[k++].digest, spans[i].digest, SPINDLE_SPAN_DIGEST_BYTES);
    }
    *out = (unsigned char *)rec;
    *bytes = (size_t)embeds * sizeof *rec;
    return SPINDLE_OK;
}

spindle_status sp_prompt_spans_copy(const spindle_engine *e, sp_request *q,
                                    const spindle_request *r,
                                    spindle_error *err) {
    const size_t d = (size_t)spindle_model_hidden_size(e->model);
    q->spans = calloc((size_t)r->n_spans, sizeof *q->spans);
    q->chunk = calloc((size_t)r->n_spans, sizeof *q->chunk);
    q->keys = calloc((size_t)q->n_prompt, sizeof *q->keys);
    if (!q->spans || !q->chunk || !q->keys)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    q->n_spans = r->n_spans;
    for (int i = 0, at = 0; i < r->n_spans; at += r->spans[i++].n) {
        sp_prompt_span *s = &q->spans[i];
        s->start = at;
        s->span = r->spans[i];
        s->span.tokens = q->tokens + at;
        if (s->span.kind != SPINDLE_SPAN_EMBEDDINGS) continue;
        const size_t bytes = (size_t)s->span.n * d * sizeof(float);
        float *rows = malloc(bytes);
        if (!rows)
            return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory for an "
                           "embeddings span of %d rows", s->span.n);
        memcpy(rows, r->spans[i].embeddings, bytes);
        s->span.embeddings = rows;
        for (int t = 0; t < s->span.n; t++)
            q->keys[at + t] = sp_span_position_key(
                s->span.digest, (int64_t)s->span.digest_offset + t,
                s->span.flags);
    }
    return SPINDLE_OK;
}

void sp_prompt_spans_free(sp_request *q) {
    for (int i = 0; i < q->n_spans; i++)
        free((void *)q->spans[i].span.embeddings);
    free(q->spans);
    free(q->chunk);
    free(q->keys);
    free(q->span_record);
}

int sp_prompt_chunk_take(const sp_request *q, int take) {
    const int from = q->prefilled, end = from + take;
    for (int i = 0; i < q->n_spans; i++) {
        const sp_prompt_span *s = &q->spans[i];
        const int s_end = s->start + s->span.n;
        if (!(s->span.flags & SPINDLE_SPAN_BIDIRECTIONAL) ||
            end <= s->start || end >= s_end)
            continue;
        /* The chunk would end inside a span whose rows see each other:
         * stop before it, or when it starts the chunk, take it whole. */
        return s->start > from ? s->start - from : s_end - from;
    }
    return take;
}

int sp_prompt_chunk_spans(const spindle_engine *e, sp_request *q, int from,
                          int n) {
    int k = 0;
    const int end = from + n;
    for (int i = 0; i < q->n_spans; i++) {
        const sp_prompt_span *s = &q->spans[i];
        const int a = s->start > from ? s->start : from;
        const int b = s->start + s->span.n < end ? s->start + s->span.n : end;
        if (a >= b) continue;
        spindle_span c = s->span;
        const int skip = a - s->start;
        c.n = b - a;
        c.tokens += skip;
        if (c.kind == SPINDLE_SPAN_EMBEDDINGS) {
            c.embeddings +=
                (size_t)skip * (size_t)spindle_model_hidden_size(e->model);
            c.digest_offset += skip;
        }
        q->chunk[k++] = c;
    }
    return k;
}
