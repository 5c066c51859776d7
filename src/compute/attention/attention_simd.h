/* Blocked attention (attention_blocked.inc) for AVX-512 (attention_avx512.c)
 * and AVX2 (attention_avx2.c), chosen by sp_attention at those SIMD levels
 * when the shapes are covered. */
#ifndef SP_COMPUTE_ATTENTION_SIMD_H
#define SP_COMPUTE_ATTENTION_SIMD_H

#include <stdbool.h>

#include "compute/ops.h"

#define SP_ATTN_MAX_HD 256

#if defined(__x86_64__)
/* Causal, no soft-cap, head_dim a multiple of 16 (AVX-512) or 8 (AVX2) up
 * to SP_ATTN_MAX_HD, at most 32 query heads per KV head. */
bool sp_attention_avx512_covers(const sp_attention_args *a);
void sp_attention_avx512(sp_pool *pool, const sp_attention_args *a);
bool sp_attention_avx2_covers(const sp_attention_args *a);
void sp_attention_avx2(sp_pool *pool, const sp_attention_args *a);
#endif

#endif
