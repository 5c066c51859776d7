/* Matrix products against ggml block-quantized weights (SP_W_GGML), the
 * weights of GGUF files. sp_matmul and sp_weight_row route SP_W_GGML here. */
#ifndef SP_COMPUTE_MATMUL_GGML_H
#define SP_COMPUTE_MATMUL_GGML_H

#include <stdbool.h>

#include "compute/tensor.h"
#include "compute/threadpool.h"

/* Whether w is a GGML weight the kernels can run: a type with a
 * dequantizer, cols a multiple of its block size, aligned data. */
bool sp_ggml_weight_usable(const sp_weight *w);
/* Why w is not usable (a short phrase), or NULL when it is. */
const char *sp_ggml_weight_check(const sp_weight *w);

/* sp_matmul for SP_W_GGML (same contract; NaNs for an unusable weight). */
void sp_matmul_ggml(sp_pool *pool, const sp_weight *w, const float *x,
                    int n_tokens, float *y);

/* sp_weight_row for SP_W_GGML. */
void sp_weight_row_ggml(const sp_weight *w, int64_t r, float *out);

#endif
