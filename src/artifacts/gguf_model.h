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

/* The Hugging Face name of GGUF tensor `name` (blk.3.attn_q.weight ->
 * model.layers.3.self_attn.q_proj.weight) for general.architecture `arch`,
 * into out[cap]. False when the name has no counterpart or does not fit. */
bool sp_gguf_translate_name(const char *name, const char *arch, char *out,
                            size_t cap);

/* Open the file and index its tensors under Hugging Face names. */
spindle_status sp_gguf_weights_open(const char *path, sp_gguf_weights **out,
                                    spindle_error *err);
void sp_gguf_weights_free(sp_gguf_weights *w);

const sp_tensor_info *sp_gguf_weights_find(const sp_gguf_weights *w,
                                           const char *hf_name);
size_t sp_gguf_weights_count(const sp_gguf_weights *w);
const sp_gguf *sp_gguf_weights_file(const sp_gguf_weights *w);

/* ------------------------------------------------- metadata (gguf_config.c)
 * Shared with the converter, which writes config.json from the same keys. */

/* `{arch}.key` of g, or NULL when absent. */
const sp_gguf_value *sp_gguf_arch_value(const sp_gguf *g, const char *arch,
                                        const char *key);

/* A positive integer `{arch}.key` (at most 2^30) into *out. Absent: *out is
 * left as it is, and that is an error only when `required`. */
spindle_status sp_gguf_arch_count(const sp_gguf *g, const char *arch,
                                  const char *key, bool required,
                                  int64_t *out, spindle_error *err);

/* A finite number `{arch}.key` into *out; *found says whether the key is
 * there (absent is no error). */
spindle_status sp_gguf_arch_real(const sp_gguf *g, const char *arch,
                                 const char *key, double *out, bool *found,
                                 spindle_error *err);

/* The transformers model_type of a supported general.architecture (llama,
 * qwen2, qwen3, gemma3), or NULL; *hf_class (when not NULL) gets its
 * *ForCausalLM class name. */
const char *sp_gguf_model_type(const char *arch, const char **hf_class);

/* Fill cfg from the metadata (general.architecture llama, qwen2, qwen3,
 * gemma3), through sp_config_from_json. */
spindle_status sp_gguf_model_config(const sp_gguf_weights *w,
                                    sp_model_config *cfg, spindle_error *err);

#endif
