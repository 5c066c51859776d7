/* `spindle convert`: a GGUF file to a Hugging Face / MLX model directory,
 * or a model with a LoRA adapter merged into its weights.
 *
 *   spindle convert -i FILE.gguf -o OUTDIR [--dtype bf16|f32]
 *   spindle convert -i MODEL --merge-lora ADAPTER[:SCALE] -o OUTDIR [--dtype ...]
 *
 * --dtype: the float type of tensors that cannot stay quantized (ggml types
 * other than Q4_1/Q8_0, merged quantized projections); F32/F16/BF16
 * tensors keep their type, merged ones too unless --dtype is given. */
#include <stdio.h>
#include <string.h>

#include "convert/convert.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/lora_args.h"
#include "spindle.h"

static int usage(FILE *f, int rc) {
    fprintf(f, "usage: spindle convert -i FILE.gguf -o OUTDIR [--dtype bf16|f32]\n"
               "       spindle convert -i MODEL --merge-lora ADAPTER[:SCALE] -o OUTDIR\n"
               "                       [--dtype bf16|f32]\n");
    if (f == stdout)
        fputs("  -i, --input PATH    the GGUF file (or, with --merge-lora, any model)\n"
              "  -o, --output DIR    the Hugging Face / MLX directory to write\n"
              "  --merge-lora ADAPTER[:SCALE]\n"
              "                      write W + scale * B A for each projection the\n"
              "                      adapter (PEFT, mlx-lm or LoRA GGUF) targets\n"
              "  --dtype bf16|f32    float type of tensors that cannot stay quantized\n"
              "                      (default bf16; Q4_1/Q8_0 become MLX affine losslessly);\n"
              "                      with --merge-lora, also of merged float matrices\n"
              "                      (default: their own type)\n",
              f);
    return rc;
}

int sp_cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    sp_convert_options opt = {.dtype = SP_DTYPE_BF16};
    sp_lora_args lora = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (sp_arg_is_help(a)) return usage(stdout, 0);
        if ((!strcmp(a, "-i") || !strcmp(a, "--input")) && has_val) in = argv[++i];
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has_val) out = argv[++i];
        else if (!strcmp(a, "--merge-lora") && has_val) {
            if (lora.n) fputs("spindle convert: one --merge-lora at most\n", stderr);
            if (lora.n || !sp_lora_arg(&lora, a, argv[++i])) {
                sp_lora_args_free(&lora);
                return 2;
            }
        } else if (!strcmp(a, "--dtype") && has_val) {
            opt.dtype_given = true;
            const char *d = argv[++i];
            if (!strcmp(d, "bf16")) opt.dtype = SP_DTYPE_BF16;
            else if (!strcmp(d, "f32")) opt.dtype = SP_DTYPE_F32;
            else {
                fprintf(stderr, "spindle convert: --dtype must be bf16 or f32, not '%s'\n", d);
                sp_lora_args_free(&lora);
                return 2;
            }
        } else {
            sp_lora_args_free(&lora);
            return sp_arg_unknown("convert", a);
        }
    }
    if (!in || !out) {
        sp_lora_args_free(&lora);
        return usage(stderr, 2);
    }
    spindle_error err = {0};
    opt.merge_lora = lora.n ? lora.paths[0] : NULL;
    opt.merge_scale = lora.n ? lora.scales[0] : 0;
    spindle_status st = opt.merge_lora ? sp_convert_merge_lora(in, out, &opt, &err)
                                       : sp_convert_gguf(in, out, &opt, &err);
    sp_lora_args_free(&lora);
    if (st) {
        fprintf(stderr, "spindle convert: %s\n",
                err.message[0] ? err.message : spindle_status_name(err.status));
        return 1;
    }
    return 0;
}
