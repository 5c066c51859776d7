/* `spindle run --checkpoint FILE / --resume FILE`: durable generations
 * over the library's checkpoints (spindle.h "checkpoints"). */
#ifndef SP_CLI_RUN_CHECKPOINT_H
#define SP_CLI_RUN_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include "cli/prompt.h"
#include "spindle.h"

typedef struct sp_run_durable {
    const char *checkpoint_path;  /* --checkpoint: written every `every` */
    int every;                    /* --checkpoint-every (default 64) */
    const char *resume_path;      /* --resume */
    bool seed_explicit;           /* --seed was given */
    bool text_output;             /* text, not ids (kept in the file as
                                     the extension "cli.output") */
    spindle_checkpoint *resumed;  /* what --resume loaded */
    bool save_failed;             /* warned once */
} sp_run_durable;

#define SP_RUN_DURABLE_HELP \
    "  --checkpoint FILE       save the generation's state to FILE (atomically)\n" \
    "  --checkpoint-every N    ... every N generated tokens (default 64)\n" \
    "  --resume FILE           continue the generation saved in FILE (no prompt:\n" \
    "                          prompt, parameters and random stream are FILE's);\n" \
    "                          prints only what follows it\n"

/* --checkpoint FILE, --checkpoint-every N, --resume FILE at argv[*i]:
 * 1 taken (*i moved past its value), 0 not one of them, 2 a usage error
 * (printed). */
int sp_run_durable_option(sp_run_durable *d, int argc, char **argv, int *i);
/* A prompt was given (has_prompt) where it may be: not with --resume
 * (printed). */
bool sp_run_durable_prompt_ok(const sp_run_durable *d, bool has_prompt);
/* Load --resume's file and point gen at it and at the checkpoint writer;
 * on resume *prompt receives a copy of the checkpoint's prompt (free with
 * spindle_free). One-line errors: missing, corrupted, or another model's
 * file. */
spindle_status sp_run_durable_setup(sp_run_durable *d, spindle_model *model,
                                    spindle_gen_params *gen, int32_t **prompt,
                                    int *n_prompt, spindle_error *err);
/* Feed the tokens the interrupted run already printed through the text
 * stream without printing them (so the text that follows joins up), and
 * say where the new text starts. */
void sp_run_durable_replay(const sp_run_durable *d, sp_text_stream *s,
                           size_t *text_from);
/* Generated tokens the resumed run had already reported (0 without
 * --resume): the first `skip` of spindle_generate's tokens. */
int sp_run_durable_skip(const sp_run_durable *d);
void sp_run_durable_free(sp_run_durable *d);

#endif
