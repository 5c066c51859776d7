/* `spindle convert`: a GGUF file to a Hugging Face / MLX model directory.
 *
 *   spindle convert -i FILE.gguf -o OUTDIR [--dtype bf16|f32]
 *
 * --dtype: the float type of tensors that cannot stay quantized (ggml types
 * other than Q4_1/Q8_0); F32/F16/BF16 tensors keep their type. */
#include <stdio.h>
#include <string.h>

#include "artifacts/convert.h"
#include "cli/commands.h"
#include "models/registry.h"
#include "spindle.h"

static int usage(FILE *f, int rc) {
    fprintf(f, "usage: spindle convert -i FILE.gguf -o OUTDIR [--dtype bf16|f32]\n");
    return rc;
}

int sp_cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    sp_convert_options opt = {.dtype = SP_DTYPE_BF16,
                              .families = sp_gguf_families()};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout, 0);
        if ((!strcmp(a, "-i") || !strcmp(a, "--input")) && has_val) in = argv[++i];
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has_val) out = argv[++i];
        else if (!strcmp(a, "--dtype") && has_val) {
            const char *d = argv[++i];
            if (!strcmp(d, "bf16")) opt.dtype = SP_DTYPE_BF16;
            else if (!strcmp(d, "f32")) opt.dtype = SP_DTYPE_F32;
            else {
                fprintf(stderr, "spindle convert: --dtype must be bf16 or f32, not '%s'\n", d);
                return 2;
            }
        } else {
            fprintf(stderr, "spindle convert: unknown or incomplete option '%s'\n", a);
            return usage(stderr, 2);
        }
    }
    if (!in || !out) return usage(stderr, 2);
    spindle_error err = {0};
    if (sp_convert_gguf(in, out, &opt, &err)) {
        fprintf(stderr, "spindle convert: %s\n",
                err.message[0] ? err.message : spindle_status_name(err.status));
        return 1;
    }
    return 0;
}
