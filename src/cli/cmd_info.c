/* spindle info: the parsed configuration, weight types and sizes. */
#include "cli/args.h"
#include "cli/commands.h"
#include "spindle.h"

#include <stdio.h>
#include <string.h>

int sp_cmd_info(int argc, char **argv) {
    const char *model_path = NULL;
    bool fingerprint = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(model_path = sp_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--json")) {
            /* The description is JSON already; accepted for symmetry. */
        } else if (!strcmp(argv[i], "--fingerprint")) {
            fingerprint = true;
        } else if (sp_arg_is_help(argv[i])) {
            puts("usage: spindle info -m MODEL [--json] [--fingerprint]\n"
                 "  -m, --model PATH  model directory, .gguf file or Hugging Face repo id\n"
                 "                    (hf://ORG/NAME[:QUANT] downloads it first)\n"
                 "  --fingerprint     print only the model's fingerprint (the identity\n"
                 "                    checkpoints and saved slots carry)\n"
                 "Prints the parsed configuration, weight types and sizes as JSON.");
            return 0;
        } else {
            return sp_arg_unknown("info", argv[i]);
        }
    }
    if (!model_path) {
        fprintf(stderr, "spindle info: -m MODEL is required\n");
        return 2;
    }
    spindle_error err = {0};
    spindle_model *model = NULL;
    spindle_load_options lo = {.n_threads = 1};
    char *json = NULL;
    spindle_status st = spindle_model_load(model_path, &lo, &model, &err);
    char fp[SPINDLE_FINGERPRINT_LEN + 1] = "";
    if (!st && fingerprint) st = spindle_model_fingerprint(model, fp, &err);
    else if (!st) st = spindle_model_describe(model, &json, &err);
    if (st) fprintf(stderr, "spindle: %s\n", err.message);
    else puts(fingerprint ? fp : json);
    spindle_free(json);
    spindle_model_free(model);
    return st ? 1 : 0;
}
