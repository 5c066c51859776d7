/* Top-k expert selection and the routing weights (routing.h). */
#include "compute/routing.h"
#include "compute/ops.h"

#include <math.h>

/* Whether (a, ia) comes after (b, ib) in mlx's argpartition order. */
static bool ranks_above(float a, int ia, float b, int ib) {
    if (isnan(a)) return !isnan(b) || ia > ib;
    if (isnan(b)) return false;
    return a > b || (a == b && ia > ib);
}

/* The k best of v[n] into idx[k], best first (insertion into a sorted list:
 * k and n are small, a router's expert count). */
static void top_k(const float *v, int n, int k, int *idx) {
    int have = 0;
    for (int i = 0; i < n; i++) {
        if (have == k && !ranks_above(v[i], i, v[idx[k - 1]], idx[k - 1]))
            continue;
        int j = have < k ? have++ : k - 1;
        for (; j > 0 && ranks_above(v[i], i, v[idx[j - 1]], idx[j - 1]); j--)
            idx[j] = idx[j - 1];
        idx[j] = i;
    }
}

void sp_route(float *logits, int n, int k, sp_route_mode mode, bool renorm,
              int *idx, float *weight) {
    if (mode == SP_ROUTE_SOFTMAX_TOPK) {
        sp_softmax(logits, n);
        top_k(logits, n, k, idx);
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum += weight[j] = logits[idx[j]];
        if (renorm)
            for (int j = 0; j < k; j++) weight[j] /= sum;
        return;
    }
    top_k(logits, n, k, idx);
    for (int j = 0; j < k; j++) weight[j] = logits[idx[j]];
    sp_softmax(weight, k);
}

/* The two largest of v[n] summed (mlx's topk(scores, 2).sum()); n >= 2. */
static float top2_sum(const float *v, int n) {
    int idx[2];
    top_k(v, n, 2, idx);
    return v[idx[0]] + v[idx[1]];
}

/* Zero the choice values of the n_group - topk_group groups with the
 * lowest sums (mlx's argpartition order: of equal sums the higher index
 * counts as lower). */
static void drop_groups(float *choice, int n, const sp_route_groups *g,
                        float *sums) {
    const int per = n / g->n_group;
    bool *dropped = (bool *)(sums + g->n_group);
    for (int j = 0; j < g->n_group; j++) {
        sums[j] = top2_sum(choice + j * per, per);
        dropped[j] = false;
    }
    for (int d = 0; d < g->n_group - g->topk_group; d++) {
        int low = -1;
        for (int j = 0; j < g->n_group; j++)
            if (!dropped[j] &&
                (low < 0 || ranks_above(sums[low], low, sums[j], j)))
                low = j;
        dropped[low] = true;
        for (int i = 0; i < per; i++) choice[low * per + i] = 0.0f;
    }
}

void sp_route_grouped(float *logits, int n, int k, const sp_route_groups *g,
                      bool renorm, float *work, int *idx, float *weight) {
    float *choice = work;
    for (int i = 0; i < n; i++) {
        logits[i] = 1.0f / (1.0f + expf(-logits[i]));
        choice[i] = logits[i] + g->bias[i];
    }
    if (g->n_group > 1 && n / g->n_group >= 2)
        drop_groups(choice, n, g, work + n);
    top_k(choice, n, k, idx);
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += weight[j] = logits[idx[j]];
    for (int j = 0; j < k; j++) {
        if (renorm && k > 1) weight[j] /= sum;
        weight[j] *= g->scale;
    }
}
