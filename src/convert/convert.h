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
} sp_convert_options;

/* Convert `gguf_path` into directory `out_dir` (created when missing).
 * Each file is written to a temporary name and renamed into place. */
spindle_status sp_convert_gguf(const char *gguf_path, const char *out_dir,
                               const sp_convert_options *opt,
                               spindle_error *err);

#endif
