/* Durable requests (durable.h): resume_id, the per-request checkpoint
 * file, and the stop strings it carries. */
#include "server/durable.h"
#include "server/state.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ID 47

/* Ids the server makes ("chatcmpl-..." / "cmpl-..."): nothing that could
 * leave the directory. */
static bool valid_id(const char *id) {
    size_t n = strlen(id);
    if (n < 1 || n > MAX_ID) return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return false;
    }
    return true;
}

static char *checkpoint_path(const sp_server *s, const char *id) {
    size_t n = strlen(s->opts.checkpoint_dir) + strlen(id) + 8;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s.ckpt", s->opts.checkpoint_dir, id);
    return p;
}

/* The checkpoint's stop strings replace the body's. */
static bool take_stop_strings(sp_job_durable *d, sp_api_request *req,
                              sp_api_error *e) {
    size_t n = 0;
    const char *blob = spindle_checkpoint_extension(d->resume, "stop", &n);
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    req->n_stop = 0;
    for (size_t at = 0; blob && at < n && req->n_stop < SP_API_MAX_STOP;) {
        const char *end = memchr(blob + at, '\0', n - at);
        size_t k = end ? (size_t)(end - (blob + at)) : n - at;
        if (k == 0) {   /* refused in a request body; so in a hand-edited file */
            at++;
            continue;
        }
        if (!(req->stop[req->n_stop] = strndup(blob + at, k)))
            return sp_api_fail(e, 503, "server_error", NULL, NULL, "out of memory");
        req->n_stop++;
        at += k + 1;
    }
    return true;
}

bool sp_durable_open(sp_server *s, sp_api_request *req, sp_job_durable *d,
                     sp_api_error *e) {
    memset(d, 0, sizeof *d);
    d->resume_id = req->resume_id;   /* taken over */
    req->resume_id = NULL;
    if (!d->resume_id) return true;
    if (!s->opts.checkpoint_dir)
        return sp_api_bad(e, "resume_id",
                          "resume_id needs a server started with --checkpoint-dir");
    if (!valid_id(d->resume_id))
        return sp_api_bad(e, "resume_id", "resume_id is not a request id");
    char *path = checkpoint_path(s, d->resume_id);
    if (!path) return sp_api_fail(e, 503, "server_error", NULL, NULL, "out of memory");
    spindle_error err = {0};
    spindle_status st = access(path, F_OK) == 0
                            ? spindle_checkpoint_load(s->model, path, &d->resume, &err)
                            : SPINDLE_ERR_IO;
    free(path);
    if (st == SPINDLE_ERR_IO)
        return sp_api_fail(e, 404, "invalid_request_error", "resume_id", "checkpoint_not_found",
                           "no checkpoint for request %s", d->resume_id);
    if (st == SPINDLE_ERR_MEMORY)
        return sp_api_fail(e, 503, "server_error", NULL, NULL, "out of memory");
    if (st)   /* the message names the file; the client knows the id */
        return sp_api_fail(e, 409, "invalid_request_error", "resume_id", "checkpoint_unusable",
                           "the checkpoint of request %s is unusable: %s", d->resume_id,
                           strstr(err.message, ": ") ? strstr(err.message, ": ") + 2
                                                     : err.message);
    d->seed_explicit = spindle_checkpoint_seed_explicit(d->resume);
    return take_stop_strings(d, req, e);
}

bool sp_durable_prompt(const sp_job_durable *d, int32_t **ids, int *n) {
    *n = spindle_checkpoint_prompt_tokens(d->resume);
    *ids = malloc((size_t)*n * sizeof **ids);
    if (*ids)
        memcpy(*ids, spindle_checkpoint_tokens(d->resume), (size_t)*n * sizeof **ids);
    return *ids != NULL;
}

/* On the engine's thread, between steps. A failed save keeps the previous
 * checkpoint; the request goes on. */
static void save_checkpoint(spindle_checkpoint *ck, void *user) {
    sp_job_durable *d = user;
    spindle_error err = {0};
    spindle_checkpoint_set_seed_explicit(ck, d->seed_explicit);
    if (spindle_checkpoint_set_extension(ck, "stop", d->stop, d->stop_len, &err) ||
        spindle_checkpoint_save(ck, d->path, &err))
        sp_log(SPINDLE_LOG_WARN, "%s", err.message);
}

void sp_durable_arm(sp_server *s, sp_job_durable *d, const char *id,
                    const sp_api_request *req, spindle_gen_params *gen) {
    gen->resume = d->resume;
    if (!s->opts.checkpoint_dir) return;
    if (!d->resume) d->seed_explicit = req->seed_given;
    size_t n = 0;
    for (int i = 0; i < req->n_stop; i++) n += strlen(req->stop[i]) + 1;
    d->stop = malloc(n ? n : 1);
    d->path = checkpoint_path(s, id);
    if (!d->stop || !d->path) return;   /* out of memory: no checkpoints */
    for (int i = 0; i < req->n_stop; i++) {
        size_t k = strlen(req->stop[i]) + 1;
        memcpy(d->stop + d->stop_len, req->stop[i], k);
        d->stop_len += k;
    }
    gen->checkpoint_every = s->opts.checkpoint_every;
    gen->on_checkpoint = save_checkpoint;
    gen->checkpoint_user = d;
}

void sp_durable_end(sp_job_durable *d, spindle_stop_reason reason) {
    if (d->path && reason != SPINDLE_STOP_CANCELLED && reason != SPINDLE_STOP_ERROR)
        unlink(d->path);
}

void sp_durable_free(sp_job_durable *d) {
    spindle_checkpoint_free(d->resume);
    free(d->resume_id);
    free(d->path);
    free(d->stop);
    memset(d, 0, sizeof *d);
}
