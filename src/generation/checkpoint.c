/* Durable checkpoints (checkpoint.h): capturing a running request's state
 * at the safe boundary, resuming a new request from one, the accessors and
 * the extension blobs. The file format is checkpoint_file.c. */
#include "generation/checkpoint.h"
#include "generation/engine.h"
#include "generation/speculative.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "models/model.h"

static void *dup_array(const void *src, int n, size_t each, bool *failed) {
    if (n <= 0 || !src) return NULL;
    void *p = malloc((size_t)n * each);
    if (!p) *failed = true;
    else memcpy(p, src, (size_t)n * each);
    return p;
}

spindle_status sp_checkpoint_set_params(spindle_checkpoint *ck,
                                        const spindle_gen_params *g,
                                        spindle_error *err) {
    bool failed = false;
    spindle_gen_params p = *g;
    free(ck->stop_ids);
    free(ck->bias_ids);
    free(ck->bias_values);
    free(ck->xtc_special);
    ck->stop_ids = dup_array(g->stop_ids, g->n_stop_ids, sizeof(int32_t), &failed);
    ck->bias_ids = dup_array(g->logit_bias_ids, g->n_logit_bias, sizeof(int32_t), &failed);
    ck->bias_values = dup_array(g->logit_bias_values, g->n_logit_bias, sizeof(float), &failed);
    ck->xtc_special = dup_array(g->sampler.xtc_special_tokens,
                                g->sampler.n_xtc_special_tokens, sizeof(int32_t),
                                &failed);
    p.stop_ids = ck->stop_ids;
    p.logit_bias_ids = ck->bias_ids;
    p.logit_bias_values = ck->bias_values;
    p.sampler.xtc_special_tokens = ck->xtc_special;
    /* What belongs to the run, not to the generation; the adapter is the
     * caller's at resume, like the grammar (its identity is recorded in
     * the ADAPTER_EXT extension), and so are speculation and jump-forward,
     * which change how fast the tokens come, never which. */
    p.adapter = NULL;
    p.adapter_scale = 0;
    memset(&p.spec, 0, sizeof p.spec);
    p.jump_forward = 0;
    p.checkpoint_every = 0;
    p.on_checkpoint = NULL;
    p.checkpoint_user = NULL;
    p.resume = NULL;
    ck->params = p;
    return failed ? sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory") : SPINDLE_OK;
}

spindle_gen_params sp_checkpoint_resume_params(const spindle_checkpoint *ck,
                                               const spindle_gen_params *caller) {
    spindle_gen_params p = ck->params;
    p.checkpoint_every = caller->checkpoint_every;
    p.on_checkpoint = caller->on_checkpoint;
    p.checkpoint_user = caller->checkpoint_user;
    /* A grammar is the caller's, borrowed (a checkpoint file cannot hold
     * it); request.c replays the generated tokens through its matcher. So
     * is the adapter, checked against the checkpoint's at submit. */
    p.grammar = caller->grammar;
    p.adapter = caller->adapter;
    p.adapter_scale = caller->adapter_scale;
    /* The file does not hold these: they are the resuming run's (the
     * drafter's state, in the "drafter" extension, continues only a
     * drafter of the same kind, policy and files: drafter_state.c). */
    p.spec = caller->spec;
    p.jump_forward = caller->jump_forward;
    p.resume = ck;
    return p;
}

/* The adapter a generation runs with, as a checkpoint records it: its
 * spindle_adapter_key; absent: none. */
#define ADAPTER_EXT SP_CHECKPOINT_ADAPTER_EXT

/* A resume must run under the adapter and scale its checkpoint was made
 * with: another one would continue a different generation. */
static spindle_status check_resume_adapter(const spindle_checkpoint *from,
                                           const spindle_gen_params *g,
                                           spindle_error *err) {
    unsigned char have[SPINDLE_ADAPTER_KEY_BYTES];
    size_t want_n = 0, have_n = spindle_adapter_key(g->adapter, g->adapter_scale, have);
    const unsigned char *want = spindle_checkpoint_extension(from, ADAPTER_EXT, &want_n);
    if (want_n == have_n && (!have_n || !memcmp(want, have, have_n))) return SPINDLE_OK;
    if (!want_n)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "the checkpoint was made without a "
                       "LoRA adapter; resume it without one");
    if (!have_n)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "the checkpoint was made with a LoRA "
                       "adapter; resume it with the same adapter and scale");
    return sp_fail(err, SPINDLE_ERR_ARGUMENT, "the checkpoint was made with another "
                   "LoRA adapter or scale; resume it with the same ones");
}

/* A resume must bring the embeddings its checkpoint's prompt was computed
 * from: the checkpoint holds their ids (placeholders) but not the rows, and
 * its state continues those rows, not others behind the same ids. */
static spindle_status check_resume_spans(const spindle_checkpoint *from,
                                         const sp_request *q,
                                         spindle_error *err) {
    size_t want_n = 0;
    const void *want = spindle_checkpoint_extension(from, SP_CHECKPOINT_SPANS_EXT,
                                                    &want_n);
    if (want_n == q->span_record_n &&
        (!want_n || !memcmp(want, q->span_record, want_n)))
        return SPINDLE_OK;
    if (!want_n)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "the checkpoint's prompt has "
                       "no embeddings spans; resume it without them");
    return sp_fail(err, SPINDLE_ERR_ARGUMENT, "the checkpoint's prompt "
                   "embeddings differ from the request's (another digest, "
                   "position or flag); resume it with the same spans");
}

/* A resume's checks, all at submit, so that the caller hears of a
 * checkpoint that cannot continue before anything has started; then its
 * generated tokens and random stream into q. */
static spindle_status take_resume(sp_request *q, const spindle_gen_params *g,
                                  spindle_error *err) {
    const spindle_checkpoint *from = g->resume;
    spindle_status st = check_resume_adapter(from, g, err);
    if (!st) st = check_resume_spans(from, q, err);
    if (st) return st;
    int n = from->n_prompt + from->n_generated;
    if (n > q->cap)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "the checkpoint's %d tokens do not fit in the "
                       "context", n);
    if (!from->snap)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the checkpoint holds no sequence state");
    if (spindle_seq_length(q->seq) != 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "a checkpoint resumes into an "
                       "empty sequence (this one holds %d tokens)",
                       spindle_seq_length(q->seq));
    st = sp_seq_snapshot_check(q->seq, from->snap, err);
    if (st) return st;
    memcpy(q->tokens + q->n_prompt, from->tokens + from->n_prompt,
           (size_t)from->n_generated * sizeof *q->tokens);
    q->n_generated = from->n_generated;
    sp_sampler_set_rng(q->sampler, from->rng);
    q->resume = from;
    return SPINDLE_OK;
}

spindle_status sp_request_set_checkpoints(sp_request *q,
                                         const spindle_gen_params *g,
                                         spindle_error *err) {
    const spindle_checkpoint *from = g->resume;
    if (from) {
        spindle_status st = take_resume(q, g, err);
        if (st) return st;
    }
    q->checkpoint_every = g->checkpoint_every;
    q->checkpoint_at = q->n_generated;
    q->on_checkpoint = g->on_checkpoint;
    q->checkpoint_user = g->checkpoint_user;
    if (g->checkpoint_every <= 0 || !g->on_checkpoint) return SPINDLE_OK;
    q->ck = calloc(1, sizeof *q->ck);
    if (!q->ck) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    q->ck->seed_explicit = from && from->seed_explicit;
    spindle_status st = sp_checkpoint_set_params(q->ck, g, err);
    unsigned char rec[SPINDLE_ADAPTER_KEY_BYTES];
    size_t n = spindle_adapter_key(g->adapter, g->adapter_scale, rec);
    if (!st && n) st = spindle_checkpoint_set_extension(q->ck, ADAPTER_EXT, rec, n, err);
    if (!st && q->span_record_n)
        st = spindle_checkpoint_set_extension(q->ck, SP_CHECKPOINT_SPANS_EXT,
                                              q->span_record,
                                              q->span_record_n, err);
    return st;
}

/* The drafter's state beside the generation's (drafter_state.c), so that a
 * resume drafts warm; a drafter that cannot record it leaves no record,
 * and its resume starts cold. */
static void record_drafter(sp_request *r) {
    sp_strbuf b = {0};
    spindle_error err;
    if (sp_spec_state_save(r, &b))
        spindle_checkpoint_set_extension(r->ck, SP_CHECKPOINT_DRAFTER_EXT, b.p,
                                         b.len, &err);
    sp_strbuf_free(&b);
}

void sp_checkpoint_maybe_emit(spindle_engine *e, sp_request *r) {
    /* A speculative round adds several tokens: the checkpoint follows the
     * round that reaches or crosses the next multiple. */
    if (!r->ck || !r->on_checkpoint || r->checkpoint_every <= 0 ||
        r->n_generated / r->checkpoint_every ==
            r->checkpoint_at / r->checkpoint_every)
        return;
    spindle_checkpoint *ck = r->ck;
    spindle_error err;
    if (spindle_model_fingerprint(e->model, ck->fingerprint, &err) ||
        spindle_seq_snapshot_take(r->seq, &ck->snap, &err))
        return;
    ck->n_prompt = r->n_prompt;
    ck->n_generated = r->n_generated;
    ck->tokens = r->tokens;            /* lent for the callback */
    sp_sampler_get_rng(r->sampler, ck->rng);
    record_drafter(r);
    r->on_checkpoint(ck, r->checkpoint_user);
    r->checkpoint_at = r->n_generated;
    ck->tokens = NULL;
    spindle_seq_snapshot_free(ck->snap);
    ck->snap = NULL;
}

spindle_status sp_checkpoint_restore(sp_request *r, spindle_error *err) {
    const spindle_checkpoint *ck = r->resume;
    if (spindle_seq_length(r->seq) != 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "a checkpoint resumes into an empty sequence (this "
                       "one holds %d tokens)", spindle_seq_length(r->seq));
    spindle_status st = spindle_seq_snapshot_restore(r->seq, ck->snap, err);
    if (st) return st;
    size_t drafter_n = 0;
    const void *drafter = spindle_checkpoint_extension(ck, SP_CHECKPOINT_DRAFTER_EXT,
                                                       &drafter_n);
    sp_spec_state_restore(r, drafter, drafter_n);
    r->prefilled = r->n_prompt;
    r->t_first_token = sp_engine_now();
    return SPINDLE_OK;
}

/* ------------------------------------------------------------ public API */

void spindle_checkpoint_free(spindle_checkpoint *ck) {
    if (!ck) return;
    free(ck->tokens);
    free(ck->stop_ids);
    free(ck->bias_ids);
    free(ck->bias_values);
    free(ck->xtc_special);
    spindle_seq_snapshot_free(ck->snap);
    free(ck->snap_data);
    for (int i = 0; i < ck->n_ext; i++) free(ck->ext[i].data);
    free(ck->ext);
    free(ck);
}

int spindle_checkpoint_generated(const spindle_checkpoint *ck) {
    return ck ? ck->n_generated : 0;
}

int spindle_checkpoint_prompt_tokens(const spindle_checkpoint *ck) {
    return ck ? ck->n_prompt : 0;
}

const int32_t *spindle_checkpoint_tokens(const spindle_checkpoint *ck) {
    return ck ? ck->tokens : NULL;
}

void spindle_checkpoint_set_seed_explicit(spindle_checkpoint *ck,
                                          bool explicit_seed) {
    if (ck) ck->seed_explicit = explicit_seed;
}

bool spindle_checkpoint_seed_explicit(const spindle_checkpoint *ck) {
    return ck && ck->seed_explicit;
}

static bool valid_name(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > SP_CHECKPOINT_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return false;
    }
    return true;
}

static sp_checkpoint_extension *find_ext(const spindle_checkpoint *ck,
                                         const char *name) {
    for (int i = 0; i < ck->n_ext; i++)
        if (!strcmp(ck->ext[i].name, name)) return &ck->ext[i];
    return NULL;
}

spindle_status spindle_checkpoint_set_extension(spindle_checkpoint *ck,
                                                const char *name,
                                                const void *data, size_t n,
                                                spindle_error *err) {
    if (!ck || (!data && n > 0))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    if (!valid_name(name))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "checkpoint extension names are 1-%d characters of "
                       "[a-z0-9_.-]", SP_CHECKPOINT_NAME_MAX);
    unsigned char *copy = malloc(n ? n : 1);
    if (!copy) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (n) memcpy(copy, data, n);
    sp_checkpoint_extension *x = find_ext(ck, name);
    if (!x) {
        sp_checkpoint_extension *grown =
            realloc(ck->ext, ((size_t)ck->n_ext + 1) * sizeof *grown);
        if (!grown) {
            free(copy);
            return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        }
        ck->ext = grown;
        x = &ck->ext[ck->n_ext++];
        memset(x, 0, sizeof *x);
        memcpy(x->name, name, strlen(name) + 1);
    }
    free(x->data);
    x->data = copy;
    x->n = n;
    return SPINDLE_OK;
}

const void *spindle_checkpoint_extension(const spindle_checkpoint *ck,
                                         const char *name, size_t *n) {
    if (n) *n = 0;
    const sp_checkpoint_extension *x = ck && name ? find_ext(ck, name) : NULL;
    if (!x) return NULL;
    if (n) *n = x->n;
    return x->data;
}
