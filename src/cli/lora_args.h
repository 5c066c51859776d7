/* --lora PATH[:SCALE] (run and chat): adapters applied to every
 * generation, several stacked into one (spindle_adapter_stack). */
#ifndef SP_CLI_LORA_ARGS_H
#define SP_CLI_LORA_ARGS_H

#include <stdbool.h>

#include "spindle.h"

#define SP_ARG_LORA_HELP \
    "  --lora PATH[:SCALE]     apply a LoRA adapter (PEFT or mlx-lm directory,\n" \
    "                          or llama.cpp LoRA GGUF file),\n" \
    "                          its own scale times SCALE (repeatable)\n"
#define SP_MAX_CLI_LORAS 16

typedef struct sp_lora_args {
    char *paths[SP_MAX_CLI_LORAS];
    float scales[SP_MAX_CLI_LORAS];
    int n;
    spindle_adapter *adapter;    /* what gen->adapter points at once loaded */
} sp_lora_args;

/* Add one --lora value; false after a one-line message. */
bool sp_lora_arg(sp_lora_args *l, const char *opt, const char *value);
/* Load the adapters on `model` (nothing when none was given) and point
 * gen->adapter at them. */
spindle_status sp_lora_args_load(sp_lora_args *l, spindle_model *model,
                                 spindle_gen_params *gen, spindle_error *err);
void sp_lora_args_free(sp_lora_args *l);

#endif
