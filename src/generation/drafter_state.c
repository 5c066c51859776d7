/* A speculating request's drafter state in its durable checkpoint (the
 * "drafter" extension), so that a resumed request drafts from its first
 * round as the uninterrupted one would, instead of restarting cold.
 *
 * The record:
 *   "SPDR", u32 version (1)
 *   u16 length, namespace: which drafter and what its state means
 *       "ngram-history-v1:<ngram_max>:<ngram_min>"  the lookup policy
 *       "draft-model-v1:<fingerprint>"              the draft model's files
 *       "mtp-head-v1:<fingerprint>"                 the head's files (the
 *                                                   target's or its
 *                                                   companion's)
 *   u32 the history length it was taken at (prompt + generated tokens)
 *   f64 tried[SPINDLE_MAX_DRAFT_TOKENS], acc[...]; i32 off_rounds, backoff:
 *       the adaptive rule's acceptance counts and probe schedule
 *   the drafter's own part:
 *     n-gram: none. Its history is the checkpoint's tokens, and its index
 *       a pure function of them under the policy the namespace names (the
 *       first occurrence of each k-gram), rebuilt at the first lookup;
 *     draft model: none, by the catch-up rule: its sequence is the
 *       history, which the first round feeds it in one forward
 *       (SP_DRAFT_CATCH_UP, drafter_model.c) to the same state;
 *     MTP head: its KV (a snapshot of its sequence) and the target's hidden
 *       states it has not consumed yet (sp_mtp_draft_save): the target's
 *       restored sequence never recomputes them, so without the record the
 *       head would be fed zeros for the whole history.
 * A record whose namespace is not this run's (another drafter, policy or
 * model) or that does not fit is ignored with one logged line. */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "generation/speculative.h"

#define RECORD_MAGIC "SPDR"
#define RECORD_VERSION 1u

/* This run's namespace for s; false when it cannot be named (a model's
 * fingerprint that cannot be computed). */
static bool drafter_namespace(const sp_spec *s, char *buf, size_t n) {
    char fp[SPINDLE_FINGERPRINT_LEN + 1];
    spindle_error err;
    if (s->ngram)
        return snprintf(buf, n, "ngram-history-v1:%d:%d",
                        s->p.ngram_max ? s->p.ngram_max : 3,
                        s->p.ngram_min ? s->p.ngram_min : 1) < (int)n;
    if (s->dseq)
        return !spindle_model_fingerprint(sp_draft_seq_model(s->dseq), fp, &err) &&
               snprintf(buf, n, "draft-model-v1:%s", fp) < (int)n;
    if (s->mtp)
        return sp_mtp_draft_fingerprint(s->mtp, fp) &&
               snprintf(buf, n, "mtp-head-v1:%s", fp) < (int)n;
    return false;
}

bool sp_spec_state_save(sp_request *r, sp_strbuf *b) {
    const sp_spec *s = r->spec;
    char ns[SP_DRAFTER_NAMESPACE_MAX];
    if (!s || !drafter_namespace(s, ns, sizeof ns)) return false;
    const uint32_t version = RECORD_VERSION;
    const uint32_t n_hist = (uint32_t)(r->n_prompt + r->n_generated);
    const uint16_t ns_n = (uint16_t)strlen(ns);
    const int32_t sched[2] = {s->off_rounds, s->backoff};
    sp_strbuf_add(b, RECORD_MAGIC, 4);
    sp_strbuf_add(b, (const char *)&version, sizeof version);
    sp_strbuf_add(b, (const char *)&ns_n, sizeof ns_n);
    sp_strbuf_add(b, ns, ns_n);
    sp_strbuf_add(b, (const char *)&n_hist, sizeof n_hist);
    sp_strbuf_add(b, (const char *)s->tried, sizeof s->tried);
    sp_strbuf_add(b, (const char *)s->acc, sizeof s->acc);
    sp_strbuf_add(b, (const char *)sched, sizeof sched);
    if (s->mtp) sp_mtp_draft_save(s->mtp, spindle_seq_length(r->seq), b);
    return !b->oom && !b->overflow;
}

/* A cursor over the record's bytes. */
typedef struct reader {
    const unsigned char *p;
    size_t left;
} reader;

static bool take(reader *rd, void *out, size_t n) {
    if (rd->left < n) return false;
    memcpy(out, rd->p, n);
    rd->p += n;
    rd->left -= n;
    return true;
}

const char *sp_drafter_record_parse(const void *data, size_t n,
                                    sp_drafter_record *out) {
    reader rd = {data, data ? n : 0};
    char magic[4];
    uint32_t version;
    uint16_t ns_n;
    if (!take(&rd, magic, 4) || memcmp(magic, RECORD_MAGIC, 4) ||
        !take(&rd, &version, sizeof version) || version != RECORD_VERSION ||
        !take(&rd, &ns_n, sizeof ns_n) || ns_n >= sizeof out->ns ||
        !take(&rd, out->ns, ns_n))
        return "not a drafter record this version reads";
    out->ns[ns_n] = '\0';
    for (int i = 0; i < ns_n; i++)   /* it is logged: one printable line */
        if (out->ns[i] < 0x20 || out->ns[i] > 0x7e) return "a malformed namespace";
    int32_t sched[2];
    if (!take(&rd, &out->n_hist, sizeof out->n_hist) ||
        !take(&rd, out->tried, sizeof out->tried) ||
        !take(&rd, out->acc, sizeof out->acc) || !take(&rd, sched, sizeof sched))
        return "a truncated record";
    /* Counts from a file: kept only where they are counts. */
    for (int j = 0; j < SPINDLE_MAX_DRAFT_TOKENS; j++)
        if (!(out->tried[j] >= 0 && out->acc[j] >= 0 &&
              out->acc[j] <= out->tried[j] && out->tried[j] <= 1e6))
            return "its acceptance counts are out of range";
    if (sched[0] < 0 || sched[1] < SP_SPEC_BACKOFF_MIN || sched[1] > SP_SPEC_BACKOFF_MAX)
        return "its probe schedule is out of range";
    out->off_rounds = sched[0];
    out->backoff = sched[1];
    out->rest = rd.p;
    out->n_rest = rd.left;
    return NULL;
}

/* Why the record cannot continue s (NULL: restored). */
static const char *restore(sp_request *r, sp_spec *s, const void *data,
                           size_t n, char *why, size_t why_n) {
    sp_drafter_record rec;
    char want[SP_DRAFTER_NAMESPACE_MAX];
    const char *bad = sp_drafter_record_parse(data, n, &rec);
    if (bad) return bad;
    if (!drafter_namespace(s, want, sizeof want))
        return "this run's drafter cannot be named";
    if (strcmp(rec.ns, want)) {
        snprintf(why, why_n, "recorded for %s, this run drafts with %s",
                 rec.ns, want);
        return why;
    }
    if (rec.n_hist != (uint32_t)(r->n_prompt + r->n_generated))
        return "it was taken at another point of the generation";
    if (s->mtp ? !sp_mtp_draft_restore(s->mtp, spindle_seq_length(r->seq),
                                       rec.rest, rec.n_rest)
               : rec.n_rest != 0)
        return "the drafter's own state does not fit this drafter";
    memcpy(s->tried, rec.tried, sizeof rec.tried);
    memcpy(s->acc, rec.acc, sizeof rec.acc);
    s->off_rounds = rec.off_rounds;
    s->backoff = rec.backoff;
    return NULL;
}

void sp_spec_state_restore(sp_request *r, const void *data, size_t n) {
    sp_spec *s = r->spec;
    if (!s || s->p.mode == SPINDLE_SPEC_NONE || !data) return;
    char buf[2 * SP_DRAFTER_NAMESPACE_MAX + 48];
    const char *why = restore(r, s, data, n, buf, sizeof buf);
    if (why)
        sp_log(SPINDLE_LOG_WARN, "resume: the checkpoint's drafter state is "
               "ignored (%s); the drafter starts cold", why);
}
