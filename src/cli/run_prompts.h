/* `spindle run --prompts FILE --parallel N`: many prompts through one step
 * engine, N running at a time, the results printed in input order. */
#ifndef SP_CLI_RUN_PROMPTS_H
#define SP_CLI_RUN_PROMPTS_H

#include <stdbool.h>
#include "spindle.h"

#define SP_RUN_PROMPTS_HELP \
    "  --prompts FILE          one prompt per line: plain text, or JSONL objects\n" \
    "                          {\"prompt\": TEXT} | {\"messages\": [...]} |\n" \
    "                          {\"prompt_tokens\": [IDS]}, each with optional\n" \
    "                          max_tokens, temperature, top_k, top_p, min_p, seed\n" \
    "  --parallel N            prompts running at once (default 4); outputs in\n" \
    "                          input order, equal to each prompt run alone\n"

typedef struct sp_run_prompts_args {
    const char *path;
    int parallel;
    bool json;            /* one JSON object per prompt, with stats */
    bool chat;            /* wrap text prompts in the chat template */
    const char *system;   /* ... with this system message */
    const char *chat_kwargs;  /* ... and these template variables (JSON) */
} sp_run_prompts_args;

/* Read, run and print every prompt of a->path. `tok` may be NULL (then
 * only prompt_tokens lines are accepted and no text is printed). `base`:
 * the command line's generation parameters, which each line's fields
 * override. A bad line fails before anything runs, naming its line
 * number; a request that fails at run time is reported in its place. */
spindle_status sp_run_prompts(spindle_model *model, const spindle_tokenizer *tok,
                              const spindle_gen_params *base,
                              const sp_run_prompts_args *a,
                              spindle_error *err);

#endif
