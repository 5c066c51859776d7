/* Matrix products against weight matrices of every storage type. */
#ifndef SP_COMPUTE_MATMUL_H
#define SP_COMPUTE_MATMUL_H

#include "compute/tensor.h"
#include "compute/threadpool.h"

/* y[t][r] = sum_c W[r][c] * x[t][c] for t < n_tokens, r < W.rows.
 * x is [n_tokens][W.cols] f32, y is [n_tokens][W.rows] f32; f32
 * accumulation. n_tokens == 1 is the decode matvec. */
void sp_matmul(sp_pool *pool, const sp_weight *w, const float *x,
               int n_tokens, float *y);

/* Why no kernel can multiply (or decode rows of) w, as a short phrase, or
 * NULL when sp_matmul and sp_weight_row can use it. Loaders call it on
 * every weight they bind: sp_matmul itself cannot fail, and writes NaNs
 * for such a weight. */
const char *sp_matmul_check(const sp_weight *w);

/* Decode row r of W to f32 (an embedding lookup). */
void sp_weight_row(const sp_weight *w, int64_t r, float *out);

/* Plain scalar reference of sp_matmul: the tests' yardstick. */
void sp_matmul_reference(const sp_weight *w, const float *x, int n_tokens,
                         float *y);

#endif
