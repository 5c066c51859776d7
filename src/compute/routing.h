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
    SP_ROUTE_TOPK_SOFTMAX,
    /* sigmoid scores, chosen by score + bias within the best groups and
     * weighted by the score alone (DeepSeek-V3: sp_route_grouped) */
    SP_ROUTE_SIGMOID_GROUPED
} sp_route_mode;

/* DeepSeek-V3's "noaux_tc" selection, as mlx-lm's group_expert_select
 * computes it: scores s = sigmoid(logit); the choice reads s + bias[e]
 * (e_score_correction_bias); with n_group > 1 the experts form n_group
 * consecutive groups, each ranked by the sum of its two best choice
 * values, and the n_group - topk_group lowest have their choice values set
 * to 0; then the k best choice values. The weights are the chosen s,
 * divided by their sum when renorm and k > 1, times `scale`
 * (routed_scaling_factor). */
typedef struct sp_route_groups {
    const float *bias;   /* [n] */
    int n_group, topk_group;
    float scale;
} sp_route_groups;

/* idx[k] and weight[k]: the chosen experts in decreasing order of score and
 * their weights. 1 <= k <= n. `logits` is scratch: it is overwritten. */
void sp_route(float *logits, int n, int k, sp_route_mode mode, bool renorm,
              int *idx, float *weight);
/* SP_ROUTE_SIGMOID_GROUPED (above); n a multiple of g->n_group, and the
 * groups left hold at least k experts. `logits` is scratch, and so is
 * work[2 n]. */
void sp_route_grouped(float *logits, int n, int k, const sp_route_groups *g,
                      bool renorm, float *work, int *idx, float *weight);

#endif
