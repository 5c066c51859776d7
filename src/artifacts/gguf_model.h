/* A GGUF file as a model: its tensors under Hugging Face names and its
 * metadata as a config.json-shaped object, so that the model families bind
 * and configure GGUF files with the same code as safetensors directories.
 *
 * Tensor names follow llama.cpp (gguf-py's TENSOR_NAMES): blk.N.attn_q ->
 * model.layers.N.self_attn.q_proj and so on; names without a counterpart
 * keep their GGUF spelling. Shapes are reversed to row-major order (GGUF's
 * ne[0] is the contiguous dimension). */
#ifndef SP_ARTIFACTS_GGUF_MODEL_H
#define SP_ARTIFACTS_GGUF_MODEL_H

#include "spindle.h"
#include "artifacts/config.h"
#include "artifacts/gguf.h"
#include "artifacts/safetensors.h"

typedef struct sp_gguf_weights sp_gguf_weights;

/* Whether `arg` names a GGUF model: a file (which must then be GGUF), or a
 * directory with no config.json and exactly one *.gguf. *file is the
 * malloc'd path of the GGUF file, or NULL when `arg` is something else (a
 * Hugging Face directory or repo id). */
spindle_status sp_gguf_model_locate(const char *arg, char **file,
                                    spindle_error *err);

/* Open the file and index its tensors under Hugging Face names. */
spindle_status sp_gguf_weights_open(const char *path, sp_gguf_weights **out,
                                    spindle_error *err);
void sp_gguf_weights_free(sp_gguf_weights *w);

const sp_tensor_info *sp_gguf_weights_find(const sp_gguf_weights *w,
                                           const char *hf_name);
size_t sp_gguf_weights_count(const sp_gguf_weights *w);
const sp_gguf *sp_gguf_weights_file(const sp_gguf_weights *w);

/* Fill cfg from the metadata (general.architecture llama, qwen2, qwen3,
 * gemma3), through sp_config_from_json. */
spindle_status sp_gguf_model_config(const sp_gguf_weights *w,
                                    sp_model_config *cfg, spindle_error *err);

#endif
