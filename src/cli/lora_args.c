/* --lora PATH[:SCALE] for spindle run and chat. */
#include "cli/lora_args.h"
#include "cli/args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sp_lora_arg(sp_lora_args *l, const char *opt, const char *value) {
    if (l->n >= SP_MAX_CLI_LORAS) {
        fprintf(stderr, "spindle: at most %d %s options\n", SP_MAX_CLI_LORAS, opt);
        return false;
    }
    /* A trailing ":number" is the scale; any other colon belongs to the
     * path. */
    const char *colon = strrchr(value, ':');
    double scale = 1;
    char *end = NULL;
    size_t len = strlen(value);
    if (colon && colon[1]) {
        double x = strtod(colon + 1, &end);
        if (end && !*end) {
            if (!sp_arg_float(opt, colon + 1, -1e4, 1e4, &scale)) return false;
            if (x == 0) {
                fprintf(stderr, "spindle: %s %s: a scale of 0 disables the "
                        "adapter; leave it out instead\n", opt, value);
                return false;
            }
            len = (size_t)(colon - value);
        }
    }
    if (!len) {
        fprintf(stderr, "spindle: %s expects PATH[:SCALE]\n", opt);
        return false;
    }
    char *path = strndup(value, len);
    if (!path) return false;
    l->paths[l->n] = path;
    l->scales[l->n++] = (float)scale;
    return true;
}

spindle_status sp_lora_args_load(sp_lora_args *l, spindle_model *model,
                                 spindle_gen_params *gen, spindle_error *err) {
    if (!l->n) return SPINDLE_OK;
    spindle_adapter *each[SP_MAX_CLI_LORAS] = {0};
    spindle_status st = SPINDLE_OK;
    for (int i = 0; i < l->n && !st; i++)
        st = spindle_adapter_load(model, l->paths[i], &each[i], err);
    if (!st && l->n == 1) {
        l->adapter = each[0];
        each[0] = NULL;
        gen->adapter_scale = l->scales[0];
    } else if (!st) {
        st = spindle_adapter_stack(model, (const spindle_adapter *const *)each,
                                   l->scales, l->n, &l->adapter, err);
        gen->adapter_scale = 1;
    }
    for (int i = 0; i < l->n; i++) spindle_adapter_unload(each[i]);
    gen->adapter = l->adapter;
    return st;
}

void sp_lora_args_free(sp_lora_args *l) {
    spindle_adapter_unload(l->adapter);
    l->adapter = NULL;
    for (int i = 0; i < l->n; i++) free(l->paths[i]);
    l->n = 0;
}
