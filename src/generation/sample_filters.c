/* The log-softmax and the masking transforms of mlx-lm's sampler chain
 * (apply_top_p, apply_min_p, apply_xtc, apply_top_k).
 *
 * mlx sorts or argpartitions the whole vocabulary; here a quickselect finds
 * only the values that decide the mask, so each transform costs O(vocab)
 * expected time and no allocation. Which tokens survive, including ties at
 * the boundary, follows mlx: a threshold compare for top-p and min-p,
 * argpartition's index tie-break for top-k and min_tokens_to_keep. The
 * log-softmax and the probabilities repeat mlx's float32 arithmetic (its
 * exp, its summation order) so that reported logprobs match it bit for bit.
 */
#include "generation/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "compute/mlx_exp.h"

spindle_status sp_sample_log_softmax(float *logits, int n, float *lse_out,
                                     spindle_error *err) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        float x = logits[i];
        if (isnan(x))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT, "logit %d is NaN", i);
        if (x == INFINITY)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT, "logit %d is +inf", i);
        if (x > mx) mx = x;
    }
    if (mx == -INFINITY)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "all %d logits are -inf", n);
    /* mlx (cpu/logsumexp.cpp) sums in float32, one element at a time; its
     * result, rounding included, is what generate_step reports. */
    float sum = sp_mlx_exp_sum(logits, n, mx, NULL);
    float lse = logf(sum) + mx;
    for (int i = 0; i < n; i++) logits[i] -= lse;
    if (lse_out) *lse_out = lse;
    return SPINDLE_OK;
}

int sp_sample_top_n(const float *x, int n, int k, spindle_token_logprob *top) {
    if (k > n) k = n;
    int have = 0;
    /* Insertion into a sorted list of at most k (<= 20) entries: one pass
     * over the vocabulary, almost every entry rejected by one compare. */
    for (int i = 0; i < n; i++) {
        if (have == k && !(x[i] > top[k - 1].logprob)) continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && x[i] > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (spindle_token_logprob){(int32_t)i, x[i]};
    }
    return have;
}

int32_t sp_sample_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void swap_f(float *a, float *b) {
    float t = *a;
    *a = *b;
    *b = t;
}

/* Median of three of v[lo..hi), a pivot that keeps sorted and reversed
 * runs linear. */
static float pivot_of(const float *v, int lo, int hi) {
    float a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];
    return (a < b) ? ((b < c) ? b : (a < c ? c : a))
                   : ((a < c) ? a : (b < c ? c : b));
}

/* Three-way partition of v[lo..hi) around `pivot`: afterwards [lo, *gt)
 * > pivot, [*gt, *lt) == pivot, [*lt, hi) < pivot. Equal runs (ties, -inf
 * left by earlier filters) thus cost one pass. Values must not be NaN. */
static void partition3(float *v, int lo, int hi, float pivot, int *gt,
                       int *lt) {
    int g = lo, i = lo, l = hi;
    while (i < l) {
        if (v[i] > pivot)
            swap_f(&v[g++], &v[i++]);
        else if (v[i] < pivot)
            swap_f(&v[i], &v[--l]);
        else
            i++;
    }
    *gt = g;
    *lt = l;
}

/* The k-th largest value (1 <= k <= n) of x, by quickselect on a copy. */
static float kth_largest(const float *x, int n, int k, float *v) {
    memcpy(v, x, (size_t)n * sizeof *v);
    int lo = 0, hi = n, kth = k - 1;
    for (;;) {
        float pivot = pivot_of(v, lo, hi);
        int gt, lt;
        partition3(v, lo, hi, pivot, &gt, &lt);
        if (kth < gt)
            hi = gt;
        else if (kth >= lt)
            lo = lt;
        else
            return pivot;
    }
}

void sp_apply_top_p(float *logprobs, int n, float top_p, float *scratch) {
    /* mlx sorts ascending and drops a token when the mass strictly above it
     * reaches top_p * total, then keeps everything >= the least likely
     * survivor. With ties grouped, a value v survives iff mass(x > v) <
     * limit, a condition monotone in v: the cut is the smallest surviving
     * value, found by quickselect on the masses in O(n) instead of a sort.
     * Masses are summed in double; mlx's float32 running sums differ only
     * when the limit falls within rounding of a partial sum. */
    double total = 0.0;
    for (int i = 0; i < n; i++) total += sp_mlx_exp(logprobs[i]);
    double limit = (double)(top_p * (float)total);

    float *v = scratch;
    memcpy(v, logprobs, (size_t)n * sizeof *v);
    int lo = 0, hi = n;
    double above = 0.0;          /* mass of the values above v[lo..hi) */
    float cut = INFINITY;
    while (lo < hi) {
        float pivot = pivot_of(v, lo, hi);
        int gt, lt;
        partition3(v, lo, hi, pivot, &gt, &lt);
        double mass_gt = above;
        for (int i = lo; i < gt; i++) mass_gt += sp_mlx_exp(v[i]);
        if (mass_gt < limit) {
            /* pivot survives; smaller values might too */
            cut = pivot;
            above = mass_gt + (double)(lt - gt) * sp_mlx_exp(pivot);
            lo = lt;
        } else {
            hi = gt;
        }
    }
    /* The top token always survives, even if the limit underflowed. */
    if (cut == INFINITY) {
        cut = -INFINITY;
        for (int i = 0; i < n; i++)
            if (logprobs[i] > cut) cut = logprobs[i];
    }
    for (int i = 0; i < n; i++)
        if (logprobs[i] < cut) logprobs[i] = -INFINITY;
}

void sp_apply_min_p(float *logprobs, int n, float min_p,
                    int min_tokens_to_keep, float *scratch) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logprobs[i] > mx) mx = logprobs[i];
    /* mlx adds math.log(min_p), a Python double, as a float32 scalar. */
    float cut = mx + (float)log((double)min_p);
    if (min_tokens_to_keep <= 1) {
        for (int i = 0; i < n; i++)
            if (logprobs[i] < cut) logprobs[i] = -INFINITY;
        return;
    }
    int k = min_tokens_to_keep < n ? min_tokens_to_keep : n;
    float vk = kth_largest(logprobs, n, k, scratch);
    int n_tied = k;
    for (int i = 0; i < n; i++)
        if (logprobs[i] > vk) n_tied--;
    /* argpartition's order breaks ties by index, so the protected tail of
     * an ascending partition holds the highest ids among equal values. */
    for (int i = n - 1; i >= 0; i--) {
        float x = logprobs[i];
        bool protect = x > vk || (x == vk && n_tied-- > 0);
        if (!protect && x < cut) logprobs[i] = -INFINITY;
    }
}

void sp_apply_top_k(float *logprobs, int n, int k, float *scratch) {
    if (k <= 0 || k >= n) return;
    float vk = kth_largest(logprobs, n, k, scratch);
    int n_tied = k;
    for (int i = 0; i < n; i++)
        if (logprobs[i] > vk) n_tied--;
    /* argpartition of -logprobs: among equal values the lower ids come
     * first, so they fill the remaining places. */
    for (int i = 0; i < n; i++) {
        float x = logprobs[i];
        if (x > vk) continue;
        if (x == vk && n_tied > 0) {
            n_tied--;
            continue;
        }
        logprobs[i] = -INFINITY;
    }
}

void sp_apply_xtc(float *logprobs, int n, float threshold,
                  const int32_t *special, int n_special, float *scratch) {
    /* probs = softmax(logprobs); the tokens above the threshold except the
     * least likely of them are removed. */
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logprobs[i] > mx) mx = logprobs[i];
    /* As mlx's cpu/softmax.cpp: float32 running sum, one reciprocal. */
    float sum = sp_mlx_exp_sum(logprobs, n, mx, scratch);
    float inv = 1.0f / sum;
    float pmin = INFINITY;
    for (int i = 0; i < n; i++) {
        scratch[i] *= inv;
        if (scratch[i] > threshold && scratch[i] < pmin) pmin = scratch[i];
    }
    if (pmin == INFINITY) return;
    /* Special ids keep their value: mark them by a probability that cannot
     * pass the test below (scratch is ours to clobber). */
    for (int s = 0; s < n_special; s++)
        if (special[s] >= 0 && special[s] < n) scratch[special[s]] = 0.0f;
    for (int i = 0; i < n; i++)
        if (scratch[i] > pmin) logprobs[i] = -INFINITY;
}
