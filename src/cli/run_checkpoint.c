/* Durable `spindle run` (run_checkpoint.h). */
#include "cli/run_checkpoint.h"
#include "cli/args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sp_run_durable_option(sp_run_durable *d, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    long n;
    bool every = !strcmp(a, "--checkpoint-every");
    if (strcmp(a, "--checkpoint") && strcmp(a, "--resume") && !every) return 0;
    if (!(v = sp_arg_value(argc, argv, i))) return 2;
    if (every) {
        if (!sp_arg_int(a, v, 1, 1 << 24, &n)) return 2;
        d->every = (int)n;
    } else if (!strcmp(a, "--checkpoint")) {
        d->checkpoint_path = v;
    } else {
        d->resume_path = v;
    }
    return 1;
}

bool sp_run_durable_prompt_ok(const sp_run_durable *d, bool has_prompt) {
    if (!d->resume_path || !has_prompt) return true;
    fprintf(stderr, "spindle run: --resume continues the checkpoint's prompt; "
                    "give no -p or --prompt-tokens\n");
    return false;
}

static void save_checkpoint(spindle_checkpoint *ck, void *user) {
    sp_run_durable *d = user;
    spindle_error err = {0};
    spindle_checkpoint_set_seed_explicit(ck, d->seed_explicit ||
                                         spindle_checkpoint_seed_explicit(d->resumed));
    const char *mode = d->text_output ? "text" : "ids";
    if ((spindle_checkpoint_set_extension(ck, "cli.output", mode, strlen(mode), &err) ||
         spindle_checkpoint_save(ck, d->checkpoint_path, &err)) && !d->save_failed) {
        /* The generation goes on; the previous checkpoint stays intact. */
        fprintf(stderr, "spindle: warning: %s\n", err.message);
        d->save_failed = true;
    }
}

spindle_status sp_run_durable_setup(sp_run_durable *d, spindle_model *model,
                                    spindle_gen_params *gen, int32_t **prompt,
                                    int *n_prompt, spindle_error *err) {
    if (d->resume_path) {
        spindle_status st = spindle_checkpoint_load(model, d->resume_path,
                                                    &d->resumed, err);
        if (st) return st;
        int n = spindle_checkpoint_prompt_tokens(d->resumed);
        if (!(*prompt = malloc((size_t)n * sizeof **prompt)))
            return SPINDLE_ERR_MEMORY;
        memcpy(*prompt, spindle_checkpoint_tokens(d->resumed), (size_t)n * sizeof **prompt);
        *n_prompt = n;
        gen->resume = d->resumed;
        size_t len = 0;
        const char *mode = spindle_checkpoint_extension(d->resumed, "cli.output", &len);
        d->text_output = mode && len == 4 && !memcmp(mode, "text", 4);
    }
    if (d->checkpoint_path) {
        gen->checkpoint_every = d->every > 0 ? d->every : 64;
        gen->on_checkpoint = save_checkpoint;
        gen->checkpoint_user = d;
    }
    return SPINDLE_OK;
}

int sp_run_durable_skip(const sp_run_durable *d) {
    return spindle_checkpoint_generated(d->resumed);
}

void sp_run_durable_replay(const sp_run_durable *d, sp_text_stream *s,
                           size_t *text_from) {
    *text_from = 0;
    if (!d->resumed) return;
    FILE *out = s->out;
    s->out = NULL;
    const int32_t *t = spindle_checkpoint_tokens(d->resumed) +
                       spindle_checkpoint_prompt_tokens(d->resumed);
    for (int i = 0; i < spindle_checkpoint_generated(d->resumed); i++)
        sp_text_stream_token(t[i], s);
    s->out = out;
    *text_from = s->len;
}

void sp_run_durable_free(sp_run_durable *d) {
    spindle_checkpoint_free(d->resumed);
    d->resumed = NULL;
}
