/* Mixture-of-experts routing: which k of n experts a token goes to, and
 * with what weights, from the router's n logits.
 *
 * Selection follows mlx's argpartition (mlx/backend/cpu/sort.cpp): the k
 * largest under the order (value, index), so of equal values the higher
 * index wins, and NaN counts as larger than any number. */
#ifndef SP_COMPUTE_ROUTING_H
#define SP_COMPUTE_ROUTING_H

#include <stdbool.h>

typedef enum sp_route_mode {
    /* softmax over all n logits, then the top k of those probabilities,
     * optionally renormalized to sum to 1 (Qwen3-MoE, Qwen3-Next:
     * norm_topk_prob) */
    SP_ROUTE_SOFTMAX_TOPK,
    /* the top k of the raw logits, then a softmax over those k (gpt-oss) */
    SP_ROUTE_TOPK_SOFTMAX
} sp_route_mode;

/* idx[k] and weight[k]: the chosen experts in decreasing order of score and
 * their weights. 1 <= k <= n. `logits` is scratch: it is overwritten. */
void sp_route(float *logits, int n, int k, sp_route_mode mode, bool renorm,
              int *idx, float *weight);

#endif
