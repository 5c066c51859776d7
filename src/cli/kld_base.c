/* llama-perplexity's scoring rules and base-file format (see kld_base.h). */
#include "cli/kld_base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char magic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

/* llama-perplexity ignores log-probabilities below this in the KL sum (and
 * stores anything under max - 16 as the floor). */
#define LOG_PROB_FLOOR 16.0f

size_t sp_kld_record_len(int n_vocab) {
    return 2 * (((size_t)n_vocab + 1) / 2) + 4;
}

/* max logit, its first index, and log of the sum of exp(logit - max). */
static float log_sum_exp(const float *logits, int n, float *max_out,
                         int *imax_out) {
    float max = logits[0];
    int imax = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > max) { max = logits[i]; imax = i; }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += expf(logits[i] - max);
    *max_out = max;
    if (imax_out) *imax_out = imax;
    return (float)log(sum);
}

double sp_token_nll(const float *logits, int n_vocab, int tok) {
    float max;
    float lse = log_sum_exp(logits, n_vocab, &max, NULL);
    return (double)max + lse - logits[tok];
}

double sp_kld_encode(const float *logits, int n_vocab, int tok, uint16_t *rec) {
    float max, min = logits[0];
    for (int i = 1; i < n_vocab; i++) if (logits[i] < min) min = logits[i];
    float lse = log_sum_exp(logits, n_vocab, &max, NULL);
    if (min < max - LOG_PROB_FLOOR) min = max - LOG_PROB_FLOOR;
    float head[2] = {(max - min) / 65535.f, min - max - lse};
    memcpy(rec, head, sizeof head);
    uint16_t *q = rec + 4;
    memset(q, 0, (sp_kld_record_len(n_vocab) - 4) * sizeof *q);
    if (head[0] != 0) {
        float inv = 1 / head[0];
        for (int i = 0; i < n_vocab; i++) {
            if (!(logits[i] > min)) continue;
            /* Round to nearest, ties to even, as llama.cpp's nearest_int. */
            long v = lrintf(inv * (logits[i] - min));
            q[i] = (uint16_t)(v > 65535 ? 65535 : v);
        }
    }
    return (double)max + lse - logits[tok];
}

void sp_kld_compare(const float *logits, int n_vocab, const uint16_t *rec,
                    int tok, sp_kld_sums *s, float *kld_out, float *p_diff_out) {
    float max;
    int imax;
    float lse = log_sum_exp(logits, n_vocab, &max, &imax);
    float head[2];
    memcpy(head, rec, sizeof head);
    const uint16_t *q = rec + 4;
    float scale = head[0], min_log_prob = head[1];

    float nll = max + lse - logits[tok];
    float nll_base = -(scale * q[tok] + min_log_prob);
    s->nll += nll;
    s->nll2 += (double)nll * nll;
    s->nll_base += nll_base;
    s->nll_base2 += (double)nll_base * nll_base;
    s->nll_nll_base += (double)nll * nll_base;

    float log_z = max + lse;
    double kld = 0;
    int imax_base = 0;
    float best = 0;
    for (int i = 0; i < n_vocab; i++) {
        float lp_base = scale * q[i] + min_log_prob;
        if (i == 0 || lp_base > best) { best = lp_base; imax_base = i; }
        if (lp_base > -LOG_PROB_FLOOR)
            kld += expf(lp_base) * (lp_base - logits[i] + log_z);
    }
    s->kld += kld;
    s->kld2 += kld * kld;
    s->count++;
    if (imax == imax_base) s->same_top++;

    float p_diff = expf(-nll) - expf(-nll_base);
    double d2 = (double)p_diff * p_diff;
    s->p_diff += p_diff;
    s->p_diff2 += d2;
    s->p_diff4 += d2 * d2;
    if (fabsf(p_diff) > s->max_p_diff) s->max_p_diff = fabsf(p_diff);
    *kld_out = (float)kld;
    *p_diff_out = p_diff;
}

void sp_mean_uncertainty(double sum, double sum2, size_t count, double *mean,
                         double *err) {
    *mean = *err = 0;
    if (count < 1) return;
    *mean = sum / count;
    double var = sum2 / count - *mean * *mean;
    *err = var > 0 && count > 10 ? sqrt(var / (count - 1)) : 0;
}

double sp_mean_covariance(double sum_a, double sum_b, double sum_ab,
                          size_t count) {
    if (count < 10) return 0;
    double c = sum_ab / count - (sum_a / count) * (sum_b / count);
    return c / (count - 1);
}

float sp_percentile(const float *v, size_t n, float fraction) {
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    float p = fraction * (float)(n - 1);
    size_t i = (size_t)p;
    p -= (float)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

float sp_median(const float *v, size_t n) {
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2] + v[n / 2 - 1]);
}

/* Bytes of the whole file for its header's sizes. */
static uint64_t file_bytes(int n_ctx, int n_vocab, int n_chunk) {
    uint64_t scored = (uint64_t)(n_ctx - 1 - n_ctx / 2);
    return 20 + 4 * (uint64_t)n_chunk * (uint64_t)n_ctx +
           2 * (uint64_t)n_chunk * scored * sp_kld_record_len(n_vocab);
}

bool sp_kld_file_open(const char *path, int n_vocab, sp_kld_file *k,
                      char *msg, size_t msg_len) {
    *k = (sp_kld_file){0};
    struct stat sb;
    if (!(k->f = fopen(path, "rb")) || fstat(fileno(k->f), &sb)) {
        snprintf(msg, msg_len, "%s: cannot open", path);
        goto fail;
    }
    char got[8];
    uint32_t n_ctx;
    int32_t head[2];
    if (fread(got, 1, 8, k->f) != 8 || memcmp(got, magic, 8)) {
        snprintf(msg, msg_len, "%s: not a llama-perplexity base file (no "
                 "\"_logits_\" magic)", path);
        goto fail;
    }
    if (fread(&n_ctx, 4, 1, k->f) != 1 || fread(head, 4, 2, k->f) != 2) {
        snprintf(msg, msg_len, "%s: truncated header", path);
        goto fail;
    }
    if (n_ctx < 4 || n_ctx > (1u << 24) || head[0] < 1 || head[1] < 1 ||
        head[1] > (1 << 24)) {
        snprintf(msg, msg_len, "%s: bad header (n_ctx %u, n_vocab %d, "
                 "n_chunk %d)", path, n_ctx, head[0], head[1]);
        goto fail;
    }
    if (head[0] != n_vocab) {
        snprintf(msg, msg_len, "%s: vocabulary of %d tokens, the model has %d",
                 path, head[0], n_vocab);
        goto fail;
    }
    k->n_ctx = (int)n_ctx;
    k->n_vocab = head[0];
    k->n_chunk = head[1];
    uint64_t want = file_bytes(k->n_ctx, k->n_vocab, k->n_chunk);
    if ((uint64_t)sb.st_size != want) {
        snprintf(msg, msg_len, "%s: %s (%lld bytes, the header says %llu)",
                 path, (uint64_t)sb.st_size < want ? "truncated" : "trailing bytes",
                 (long long)sb.st_size, (unsigned long long)want);
        goto fail;
    }
    size_t n_tok = (size_t)k->n_chunk * (size_t)k->n_ctx;
    if (!(k->tokens = malloc(n_tok * sizeof *k->tokens)) ||
        fread(k->tokens, 4, n_tok, k->f) != n_tok) {
        snprintf(msg, msg_len, "%s: cannot read its tokens", path);
        goto fail;
    }
    for (size_t i = 0; i < n_tok; i++)
        if (k->tokens[i] < 0 || k->tokens[i] >= n_vocab) {
            snprintf(msg, msg_len, "%s: token %zu is %d, outside the vocabulary",
                     path, i, k->tokens[i]);
            goto fail;
        }
    return true;
fail:
    sp_kld_file_close(k);
    return false;
}

bool sp_kld_file_create(const char *path, int n_ctx, int n_vocab, int n_chunk,
                        const int32_t *tokens, sp_kld_file *k, char *msg,
                        size_t msg_len) {
    *k = (sp_kld_file){.n_ctx = n_ctx, .n_vocab = n_vocab, .n_chunk = n_chunk};
    uint32_t ctx = (uint32_t)n_ctx;
    int32_t head[2] = {n_vocab, n_chunk};
    size_t n_tok = (size_t)n_chunk * (size_t)n_ctx;
    if (!(k->f = fopen(path, "wb")) || fwrite(magic, 1, 8, k->f) != 8 ||
        fwrite(&ctx, 4, 1, k->f) != 1 || fwrite(head, 4, 2, k->f) != 2 ||
        fwrite(tokens, 4, n_tok, k->f) != n_tok) {
        snprintf(msg, msg_len, "%s: cannot write", path);
        sp_kld_file_close(k);
        return false;
    }
    return true;
}

bool sp_kld_file_read(sp_kld_file *k, uint16_t *recs, size_t n) {
    size_t len = n * sp_kld_record_len(k->n_vocab);
    return fread(recs, 2, len, k->f) == len;
}

bool sp_kld_file_write(sp_kld_file *k, const uint16_t *recs, size_t n) {
    size_t len = n * sp_kld_record_len(k->n_vocab);
    return fwrite(recs, 2, len, k->f) == len;
}

bool sp_kld_file_close(sp_kld_file *k) {
    bool ok = true;
    if (k->f) ok = fclose(k->f) == 0;
    free(k->tokens);
    *k = (sp_kld_file){0};
    return ok;
}
