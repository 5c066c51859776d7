/* A diffusion model's generation request (diffusion_job.h). */
#include "server/diffusion_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The first diffusion field the body gives, or NULL. */
static const char *diffusion_field(const sp_api_request *r) {
    return r->diffusion_steps ? "diffusion_steps"
           : r->block_length  ? "block_length"
           : r->remasking_given ? "remasking"
                                : NULL;
}

/* What token-by-token decoding offers and denoising cannot: the field
 * that asks for it, or NULL. */
static const char *unsupported_field(const sp_api_request *r) {
    if (r->logprobs) return "logprobs";
    if (r->grammar_kind >= 0) return r->grammar_param ? r->grammar_param : "response_format";
    if (r->tools_json) return "tools";
    if (r->n_choices > 1) return "n";
    if (r->id_slot >= 0) return "id_slot";
    if (r->resume_id) return "resume_id";
    return NULL;
}

bool sp_diffusion_job_check(const sp_server *s, const sp_api_request *r, sp_api_error *e) {
    const char *field = diffusion_field(r);
    if (!s->diffusion)
        return !field || sp_api_bad(e, field, "'%s' applies to a diffusion model only; this "
                                    "one decodes token by token", field);
    if ((field = unsupported_field(r)))
        return sp_api_bad(e, field, "'%s' is not available with a diffusion model (it "
                          "denoises the whole canvas at once)", field);
    const int canvas = r->max_tokens;
    if (r->block_length > canvas)
        return sp_api_bad(e, "block_length", "'block_length' (%d) exceeds 'max_tokens' (%d), "
                          "the canvas", r->block_length, canvas);
    const int block = r->block_length ? r->block_length : canvas;
    const int blocks = (canvas + block - 1) / block;
    const int steps = r->diffusion_steps ? r->diffusion_steps : canvas;
    if (steps % blocks)
        return sp_api_bad(e, "diffusion_steps", "'diffusion_steps' (%d) must be a multiple of "
                          "the %d blocks of 'block_length' %d in the canvas of %d", steps, blocks,
                          block, canvas);
    return true;
}

/* One request's denoising, owned by its thread. */
typedef struct diffusion_task {
    sp_job *job;
    spindle_diffusion_params params;
    int reported;                 /* canvas positions handed to the choice */
    bool stopped;                 /* an end token, a stop string, a cancel */
    spindle_stop_reason stop_reason;
    double submitted, first_block;
} diffusion_task;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool is_stop_id(const spindle_gen_params *g, int32_t token) {
    for (int i = 0; i < g->n_stop_ids; i++)
        if (g->stop_ids[i] == token) return true;
    return false;
}

static bool cancelled(sp_job *j) {
    pthread_mutex_lock(&j->mu);
    bool gone = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&j->srv->lock);
    gone |= j->srv->cancelling;
    pthread_mutex_unlock(&j->srv->lock);
    return gone;
}

/* A block is final: its tokens go to the choice in canvas order, up to an
 * end token (the reply ends there, as an autoregressive one would) or a
 * stop string. */
static bool on_block(const int32_t *canvas, int n_final, void *user) {
    diffusion_task *t = user;
    sp_choice *c = &t->job->choices[0];
    if (!t->first_block) t->first_block = now_seconds();
    while (!t->stopped && t->reported < n_final) {
        const int32_t token = canvas[t->reported++];
        if (is_stop_id(&t->job->req.gen, token)) {
            t->stopped = true;
            t->stop_reason = SPINDLE_STOP_EOS;
        } else if (!sp_job_on_token(0, &(spindle_token_info){.token = token}, c)) {
            t->stopped = true;
            t->stop_reason = SPINDLE_STOP_CALLBACK;
        }
    }
    if (!t->stopped && cancelled(t->job)) {
        t->stopped = true;
        t->stop_reason = SPINDLE_STOP_CANCELLED;
    }
    return !t->stopped;
}

static void *denoise(void *arg) {
    diffusion_task *t = arg;
    sp_job *j = t->job;
    sp_server *s = j->srv;
    spindle_error err = {0};
    spindle_seq *seq = NULL;
    int32_t *tokens = NULL;
    spindle_diffusion_stats ds = {0};
    pthread_mutex_lock(&s->diffusion_lock);   /* one generation per model */
    const double started = now_seconds();
    spindle_status st = SPINDLE_OK;
    if (cancelled(j)) {   /* gone, or shut down, while it waited its turn */
        t->stopped = true;
        t->stop_reason = SPINDLE_STOP_CANCELLED;
    } else {
        st = spindle_seq_new(s->model, &seq, &err);
    }
    if (!st && !t->stopped)
        st = spindle_diffusion_generate(s->model, seq, j->prompt, j->n_prompt, &t->params,
                                        &tokens, NULL, &ds, &err);
    spindle_seq_free(seq);
    pthread_mutex_unlock(&s->diffusion_lock);
    const double end = now_seconds();
    const double first = t->first_block ? t->first_block : end;
    spindle_request_result r = {
        .stop_reason = st ? SPINDLE_STOP_ERROR : t->stopped ? t->stop_reason : SPINDLE_STOP_LENGTH,
        .status = st, .error = st ? err.message : "", .tokens = tokens,
        .n_tokens = t->reported,
        .stats = {.prompt_tokens = j->n_prompt, .generated_tokens = t->reported,
                  .queue_seconds = started - t->submitted,
                  .ttft_seconds = first - t->submitted, .prefill_seconds = first - started,
                  .decode_seconds = end - first, .total_seconds = end - t->submitted}};
    spindle_free(ds.committed);
    /* The job may be freed as soon as this returns. */
    sp_job_on_finish(0, &r, &j->choices[0]);
    spindle_free(tokens);
    free(t);
    return NULL;
}

static spindle_diffusion_params params_of(const sp_api_request *r) {
    spindle_diffusion_params p = spindle_diffusion_defaults();
    p.canvas = r->gen.max_tokens;
    p.steps = r->diffusion_steps ? r->diffusion_steps : p.canvas;
    p.block_length = r->block_length;
    if (r->remasking_given) p.remasking = r->remasking;
    p.temperature = r->gen.sampler.temperature;
    p.top_k = r->gen.sampler.top_k;
    p.top_p = r->gen.sampler.top_p;
    p.seed = (uint32_t)r->gen.sampler.seed;
    return p;
}

static spindle_status fail(spindle_error *err, spindle_status st, const char *why) {
    snprintf(err->message, sizeof err->message, "%s", why);
    return st;
}

spindle_status sp_diffusion_job_start(sp_job *j, spindle_error *err) {
    diffusion_task *t = calloc(1, sizeof *t);
    if (!t) return fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    t->job = j;
    t->submitted = now_seconds();
    t->params = params_of(&j->req);
    t->params.on_block = on_block;
    t->params.on_block_user = t;
    spindle_status st = spindle_diffusion_check(j->srv->model, j->n_prompt, &t->params, err);
    pthread_t thread;
    pthread_attr_t attr;
    if (!st && pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thread, &attr, denoise, t) != 0)
            st = fail(err, SPINDLE_ERR_MEMORY, "cannot start a diffusion thread");
        pthread_attr_destroy(&attr);
    } else if (!st) {
        st = fail(err, SPINDLE_ERR_MEMORY, "cannot start a diffusion thread");
    }
    if (st) free(t);
    return st;
}
