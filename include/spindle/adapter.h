/* spindle/adapter.h: loRA adapters mounted on a model. Part of the public
 * API: include "spindle.h", whose opening comment states the conventions
 * every call here follows. */
#ifndef SPINDLE_ADAPTER_H
#define SPINDLE_ADAPTER_H

#include "spindle/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- adapters
 *
 * A LoRA adapter adds scale * B·(A·x) to the output of some of a model's
 * projections (q/k/v/o/gate/up/down_proj; on MoE models also the router
 * and each routed expert's gate/up/down_proj, with a pair per expert),
 * whatever the base weights' storage type; the base weights are never changed, so any number of
 * adapters can be mounted on one model and each batch entry or request
 * picks one (or none). */
typedef struct spindle_adapter spindle_adapter;

/* `path`: a PEFT adapter directory (adapter_config.json +
 * adapter_model.safetensors), an mlx-lm one (adapter_config.json with
 * lora_parameters + adapters.safetensors), or llama.cpp's LoRA GGUF file
 * (general.type "adapter", of the model's architecture; scale
 * adapter.lora.alpha / rank, 1 without alpha; *_norm.weight tensors
 * skipped as llama.cpp does). Every tensor must be a lora_A /
 * lora_B (lora_a / lora_b) pair of a supported projection of a layer the
 * model has, of the config's rank and the projection's shape; otherwise
 * one line naming the tensor (SPINDLE_ERR_FORMAT or _UNSUPPORTED), and
 * SPINDLE_ERR_IO for a missing file. The adapter holds f32 copies of its
 * matrices. Thread-safe, also while the model runs a forward pass or an
 * engine (it reads only the model's immutable shapes). */
spindle_status spindle_adapter_load(spindle_model *model, const char *path,
                                    spindle_adapter **out, spindle_error *err);
/* Drop the caller's reference. Engine requests that named the adapter keep
 * it alive until they end; it is freed with the last reference. Thread-safe
 * (any thread, also while requests use it); NULL is fine. Every reference
 * must be gone before the model is freed. */
void spindle_adapter_unload(spindle_adapter *adapter);
/* One adapter whose terms are the sum of n adapters' (each times its own
 * scale and scales[i], 0 or a NULL `scales` reading as 1): what applying
 * them all at once gives (`spindle run --lora A --lora B`). The inputs are
 * copied; unload them and the result independently. Thread-safe as
 * spindle_adapter_load. */
spindle_status spindle_adapter_stack(spindle_model *model,
                                     const spindle_adapter *const *adapters,
                                     const float *scales, int n,
                                     spindle_adapter **out, spindle_error *err);
/* The adapter's own scale (lora_alpha / r, / sqrt(r) with rsLoRA,
 * mlx-lm's scale, or a GGUF's alpha / r) and rank; 0 for NULL.
 * Thread-safe. */
float spindle_adapter_scale(const spindle_adapter *adapter);
int spindle_adapter_rank(const spindle_adapter *adapter);
/* What state computed under `adapter` (NULL: the base model) at a
 * request's `scale` (0 reads as 1, as in spindle_gen_params) depends on:
 * a hash (XXH3-128) of the adapter's own scale and every matrix's shape
 * and values, equal for the same files loaded twice, then the request's
 * scale. Writes and returns SPINDLE_ADAPTER_KEY_BYTES bytes, 0 for no
 * adapter. State is reused (a checkpoint resumed, a slot's prefix) only
 * under an equal key. Thread-safe. */
#define SPINDLE_ADAPTER_KEY_BYTES 20
size_t spindle_adapter_key(const spindle_adapter *adapter, float scale,
                           unsigned char out[SPINDLE_ADAPTER_KEY_BYTES]);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_ADAPTER_H */
