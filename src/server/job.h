/* A generation job as job.c and job_output.c share it: the request, its
 * prompt, and one sp_choice per choice the request asked for (`n`), each an
 * engine request of its own with its own seed, text and finish reason.
 *
 * Two threads touch a job. The engine's thread runs the callbacks of every
 * choice: they detokenize, match stop strings and append text and logprobs
 * under the job's lock, and signal. The connection's thread waits on that
 * signal and formats what has arrived. */
#ifndef SP_SERVER_JOB_H
#define SP_SERVER_JOB_H

#include "server/api_anthropic.h"
#include "server/api_responses.h"
#include "server/api_response.h"
#include "server/durable.h"
#include "server/images.h"
#include "server/reply.h"
#include "server/slots.h"
#include "server/state.h"
#include "server/stop_strings.h"

#include <pthread.h>

typedef enum job_state { JOB_NEW = 0, JOB_ADMITTED, JOB_SUBMITTED, JOB_FINISHED } job_state;

typedef struct sp_choice {
    sp_job *job;
    int index;                    /* choices[].index */
    spindle_request_id id;        /* 0 until submitted; set under the server's lock */
    spindle_gen_params gen;       /* the request's, with this choice's seed */
    sp_job_reply reply;           /* tools / reasoning split off the text */

    /* Written by the engine's thread, read by the connection's: under mu. */
    spindle_detokenizer *detok;
    sp_stop_matcher stop;
    sp_strbuf text;               /* everything that may be sent */
    sp_api_logprob *logprobs;
    int n_logprobs, cap_logprobs;
    int n_tokens;                 /* tokens the engine reported so far */
    bool finished;                /* on_finish ran, or it never will */
    spindle_stop_reason stop_reason;
    spindle_status status;
    char error[256];
    int n_generated;
    int cached_tokens;            /* prompt tokens the prefix index served */

    /* The connection's thread only. */
    size_t text_sent;
    int logprobs_sent;
    bool role_sent, end_sent;
} sp_choice;

struct sp_job {
    sp_server *srv;
    struct MHD_Connection *conn;
    sp_job *next;                 /* the server's list of jobs in flight */
    sp_api_request req;
    int32_t *prompt;
    int n_prompt;
    sp_image_prompt images;       /* the prompt as spans when it has images */
    char id_text[48];
    sp_api_head head;
    sp_job_durable durable;       /* resume_id, --checkpoint-dir */
    size_t text_from;             /* a resume sends only the text after it */
    spindle_seq *seq;             /* the slot's sequence, NULL without one */
    int slot_reused;              /* prompt tokens the slot's state covered */
    sp_slot_adapter slot_adapter; /* the request's adapter, as slots key it */
    sp_choice *choices;
    int n_choices;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_state state;              /* FINISHED once every choice is */

    /* The connection's thread only. */
    bool rest_submitted;          /* choices after the first, once it started */
    bool stream_done, cancelled;
    sp_anthropic_stream anthropic;   /* the Messages API's open block */
    sp_responses_stream responses;   /* the Responses API's object and open item */
    sp_strbuf out;                /* formatted events not yet written */
    size_t out_pos;
};

typedef bool (*sp_job_ready_fn)(const sp_job *j);
typedef enum job_wait_result { JOB_READY, JOB_GONE, JOB_QUIET } job_wait_result;

/* job.c */
bool sp_job_finished(const sp_job *j);
/* Wait until ready(j), or until `quiet_ms` pass (> 0; 0: no limit); GONE
 * (every choice cancelled) when the client has gone meanwhile. */
job_wait_result sp_job_wait_for(sp_job *j, sp_job_ready_fn ready, long quiet_ms);
/* The engine's callbacks of a choice (user: the sp_choice); a diffusion
 * job (diffusion_job.c) reports its tokens and its end through them too. */
bool sp_job_on_token(spindle_request_id id, const spindle_token_info *info, void *user);
void sp_job_on_finish(spindle_request_id id, const spindle_request_result *r, void *user);
/* The choices after the first, submitted once the first has its first
 * token (so that they map its prompt from the prefix index); QUIET when it
 * has none after `quiet_ms` (0: no limit), GONE when the client has. */
job_wait_result sp_job_submit_rest(sp_job *j, long quiet_ms);

/* job_output.c: the whole response of a finished job, and the stream's
 * reader (MHD's content reader callback over a job). */
enum MHD_Result sp_job_reply_whole(sp_job *j);
ssize_t sp_job_stream_read(void *cls, uint64_t pos, char *buf, size_t max);

#endif
