/* Durable requests of `spindle serve --checkpoint-dir DIR` (durable.c):
 * every request in flight is checkpointed (spindle.h "checkpoints") as
 * DIR/<its id>.ckpt every --checkpoint-every tokens; after a restart a
 * request whose body carries the extension field "resume_id": "<id>"
 * continues that generation (same id, same prompt, parameters and random
 * stream; usage counts the original prompt and every token) and sends only
 * the text that follows the checkpoint. The checkpoint carries the
 * request's stop strings (extension "stop", NUL-separated); the
 * detokenizer and the stop matcher are rebuilt by replaying the generated
 * tokens, which determine them. A request that ends normally removes its
 * file; one cancelled (shutdown, client gone) or failed keeps it. */
#ifndef SP_SERVER_DURABLE_H
#define SP_SERVER_DURABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "server/api_request.h"
#include "spindle.h"

typedef struct sp_server sp_server;

typedef struct sp_job_durable {
    spindle_checkpoint *resume;   /* the checkpoint resume_id names */
    char *resume_id;
    char *path;                   /* this job's file; NULL without the dir */
    char *stop;                   /* the stop strings, NUL-separated */
    size_t stop_len;
    bool seed_explicit;
} sp_job_durable;

/* Take the request's resume_id and load its checkpoint: 400 when the
 * server has no --checkpoint-dir or the id is malformed, 404 when there is
 * no such checkpoint, 409 for a corrupted one or another model's. Then the
 * request's stop strings become the checkpoint's. */
bool sp_durable_open(sp_server *s, sp_api_request *req, sp_job_durable *d,
                     sp_api_error *e);
/* The checkpoint's prompt, copied (for the job's usage and the engine). */
bool sp_durable_prompt(const sp_job_durable *d, int32_t **ids, int *n);
/* Point gen at the resumed checkpoint and at this job's checkpoint file
 * (DIR/<id>.ckpt). */
void sp_durable_arm(sp_server *s, sp_job_durable *d, const char *id,
                    const sp_api_request *req, spindle_gen_params *gen);
/* The request ended: remove its file unless it was cancelled or failed. */
void sp_durable_end(sp_job_durable *d, spindle_stop_reason reason);
void sp_durable_free(sp_job_durable *d);

#endif
