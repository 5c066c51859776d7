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
