/* GGUF -> Hugging Face model directory (config.json, model.safetensors,
 * tokenizer.json, tokenizer_config.json), as `spindle convert` writes it.
 *
 * Q4_1 and Q8_0 tensors become MLX affine quantization with group size 32
 * without loss (the ggml block is exactly an affine group); every other
 * block type is dequantized with the bit-exact reference functions and
 * stored in the requested float type. F32, F16 and BF16 tensors are kept.
 * Llama Q/K rows are un-permuted back to the Hugging Face rotate-half order
 * and Gemma 3 norms get llama.cpp's +1 removed, so the result is a standard
 * checkpoint that mlx-lm and transformers load. */
#ifndef SP_CONVERT_CONVERT_H
#define SP_CONVERT_CONVERT_H

#include "spindle.h"
#include "artifacts/gguf_model.h"
#include "compute/tensor.h"

typedef struct sp_convert_options {
    sp_dtype dtype; /* SP_DTYPE_BF16 or SP_DTYPE_F32: dequantized tensors */
    /* sp_convert_merge_lora: the adapter (any form spindle_adapter_load
     * reads) and a factor of its own scale (0: 1); dtype_given: merged
     * float matrices take `dtype` too instead of keeping their own. */
    const char *merge_lora;
    float merge_scale;
    bool dtype_given;
} sp_convert_options;

/* Convert `gguf_path` into directory `out_dir` (created when missing).
 * Each file is written to a temporary name and renamed into place. */
spindle_status sp_convert_gguf(const char *gguf_path, const char *out_dir,
                               const sp_convert_options *opt,
                               spindle_error *err);

/* Model `model` (a safetensors directory, or a GGUF file converted as
 * above first) with adapter opt->merge_lora merged, W + scale * B A, into
 * directory `out_dir`: each adapted projection in its own float type (or
 * opt->dtype when given), a quantized one in opt->dtype and marked float
 * in config.json's quantization; every other tensor and file copied. */
spindle_status sp_convert_merge_lora(const char *model, const char *out_dir,
                                     const sp_convert_options *opt,
                                     spindle_error *err);

#endif
