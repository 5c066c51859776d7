/* A generation request to a diffusion model (LLaDA, Dream): checked at
 * parse time, then denoised on a thread of its own outside the step engine
 * (spindle_diffusion_generate drives its forward passes itself), one
 * request at a time per model under the server's diffusion_lock. Its
 * tokens reach the job through the engine's callbacks (job.h), block by
 * block, so whole and streamed replies, stop strings and /metrics work as
 * for an autoregressive model. */
#ifndef SP_SERVER_DIFFUSION_JOB_H
#define SP_SERVER_DIFFUSION_JOB_H

#include "server/job.h"

/* The request against the model: the diffusion fields only for a
 * diffusion model, and for one no logprobs, grammar, tools, n > 1, slot or
 * resume, and a block length and step count that fit max_tokens (the
 * canvas). False: a 400 naming the field in *e. */
bool sp_diffusion_job_check(const sp_server *s, const sp_api_request *r, sp_api_error *e);

/* Start denoising j's first (only) choice on its own thread; its
 * callbacks run there from now on. Not SPINDLE_OK: nothing started, and
 * *err says why in one line (a prompt + canvas beyond the context). */
spindle_status sp_diffusion_job_start(sp_job *j, spindle_error *err);

#endif
