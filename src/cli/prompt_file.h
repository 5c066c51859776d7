/* The prompt file of `spindle run --prompts FILE`: one prompt per line,
 * plain text or a JSONL object (run_prompts.h has the forms). Pure: the
 * lines become prompt ids and generation parameters, nothing runs, so
 * tests/fuzz/fuzz_prompt_file.c fuzzes it without a model. */
#ifndef SP_CLI_PROMPT_FILE_H
#define SP_CLI_PROMPT_FILE_H

#include "cli/run_prompts.h"
#include "spindle.h"

/* One line of the file and, once it ran, its result. */
typedef struct sp_prompt_job {
    int line;
    int32_t *prompt;     /* spindle_free */
    int n_prompt;
    spindle_gen_params gen;
    /* the result (on_finish) */
    bool finished;
    spindle_stop_reason reason;
    spindle_status status;
    char error[512];
    int32_t *tokens;
    int n_tokens;
    spindle_request_stats stats;
} sp_prompt_job;

typedef struct sp_prompt_set {
    sp_prompt_job *jobs;
    int n, cap;
} sp_prompt_set;

/* Every non-blank line of a->path ("-": stdin) into `set` (empty on entry;
 * free it with sp_prompt_set_free also after a failure). A trailing '\r'
 * is dropped. `tok` may be NULL: then only prompt_tokens lines are
 * accepted. `base`: the command line's parameters, which a line's fields
 * override. A bad line fails with a one-line error naming its number. */
spindle_status sp_prompt_set_read(const sp_run_prompts_args *a,
                                  const spindle_tokenizer *tok,
                                  const spindle_gen_params *base,
                                  sp_prompt_set *set, spindle_error *err);
void sp_prompt_set_free(sp_prompt_set *set);

/* Format a one-line error into err (may be NULL); returns st. */
spindle_status sp_prompts_fail(spindle_error *err, spindle_status st,
                               const char *fmt, ...);

#endif
