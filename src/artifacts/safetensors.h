/* Safetensors files: one file or a sharded set (model.safetensors.index.json)
 * mmapped and validated as a whole before any tensor is used.
 *
 * Validation: header length within the file and below a sane bound; the
 * header is a JSON object; every entry has a known dtype, a shape of
 * non-negative dims whose element count times dtype size equals its byte
 * range; offsets lie inside the data area; no two tensors overlap. */
#ifndef SP_ARTIFACTS_SAFETENSORS_H
#define SP_ARTIFACTS_SAFETENSORS_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include "spindle.h"
#include "compute/tensor.h"

#define SP_MAX_DIMS 8

typedef struct sp_tensor_info {
    const char *name;        /* owned by the set */
    sp_dtype dtype;
    int ndim;
    int64_t shape[SP_MAX_DIMS];
    const void *data;        /* inside the mapping */
    size_t nbytes;
    const char *file;        /* path of the shard (or GGUF file) holding it */
    /* GGUF tensors in a ggml block format (gguf_model.h): `dtype` is then
     * meaningless and `ggml_type` is the sp_ggml_type. False for
     * safetensors and for GGUF F32/F16/BF16 tensors, which use `dtype`. */
    bool ggml_quant;
    uint32_t ggml_type;
} sp_tensor_info;

typedef struct sp_tensor_set sp_tensor_set;

/* Open one safetensors file. */
spindle_status sp_safetensors_open_file(const char *path, sp_tensor_set **out,
                                        spindle_error *err);

/* Open a model directory's weights: model.safetensors.index.json (every
 * shard it names must exist and every tensor must be in the shard the index
 * says), else model.safetensors, else every *.safetensors in the directory.
 * Tensor names must be unique across shards. */
spindle_status sp_safetensors_open_dir(const char *dir, sp_tensor_set **out,
                                       spindle_error *err);

void sp_tensor_set_free(sp_tensor_set *set);

/* NULL when absent. */
const sp_tensor_info *sp_tensor_set_find(const sp_tensor_set *set,
                                         const char *name);
size_t sp_tensor_set_count(const sp_tensor_set *set);
const sp_tensor_info *sp_tensor_set_at(const sp_tensor_set *set, size_t i);
/* Header "__metadata__" value for key, or NULL. */
const char *sp_tensor_set_metadata(const sp_tensor_set *set, const char *key);

#endif
