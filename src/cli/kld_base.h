/* llama-perplexity's scoring rules and its base log-probabilities file
 * (`--kl-divergence-base`), so Spindle and llama.cpp read each other's.
 *
 * The file, little-endian as llama.cpp writes it on the machines it runs on:
 *   "_logits_"                 8 bytes
 *   uint32 n_ctx, int32 n_vocab, int32 n_chunk
 *   int32 tokens[n_chunk * n_ctx]     the text's tokens, window after window
 *   per chunk, per scored position (n_ctx - 1 - n_ctx/2 of them), a record of
 *   sp_kld_record_len(n_vocab) uint16: float scale, float min_log_prob (as 4
 *   uint16), then n_vocab quantized log-probabilities q (padded to even):
 *   log p = scale * q + min_log_prob, with log-probs below max - 16 stored
 *   as the floor. */
#ifndef SP_CLI_KLD_BASE_H
#define SP_CLI_KLD_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* uint16 per record: header floats, n_vocab values, even padding. */
size_t sp_kld_record_len(int n_vocab);

/* -log p(tok) of one position's logits (log-softmax in double sums). */
double sp_token_nll(const float *logits, int n_vocab, int tok);

/* Quantize one position's log-probabilities into `rec` (record_len
 * uint16); returns -log p(tok). */
double sp_kld_encode(const float *logits, int n_vocab, int tok, uint16_t *rec);

/* The running sums llama-perplexity keeps over the scored tokens. */
typedef struct sp_kld_sums {
    double nll, nll2, nll_base, nll_base2, nll_nll_base;
    double kld, kld2, p_diff, p_diff2, p_diff4;
    float max_p_diff;
    size_t same_top, count;
} sp_kld_sums;

/* One position against its base record: adds to `s`; the token's KL
 * divergence and p - p_base go to *kld and *p_diff. */
void sp_kld_compare(const float *logits, int n_vocab, const uint16_t *rec,
                    int tok, sp_kld_sums *s, float *kld, float *p_diff);

/* Mean of sum/count and its standard error (0 for fewer than 11 values),
 * llama-perplexity's estimate. */
void sp_mean_uncertainty(double sum, double sum2, size_t count, double *mean,
                         double *err);
/* The covariance of two means (0 for fewer than 10 values). */
double sp_mean_covariance(double sum_a, double sum_b, double sum_ab,
                          size_t count);
/* Linear-interpolated percentile of sorted values (fraction in [0, 1]). */
float sp_percentile(const float *sorted, size_t n, float fraction);
/* Median of sorted values. */
float sp_median(const float *sorted, size_t n);

/* An open base file: header checked, tokens read, records next. */
typedef struct sp_kld_file {
    FILE *f;
    int n_ctx, n_vocab, n_chunk;
    int32_t *tokens;            /* n_chunk * n_ctx */
} sp_kld_file;

/* Open and validate `path` for a model of `n_vocab` logits: magic, sizes,
 * vocabulary, token ids, and a length that holds every record. false with
 * a one-line reason in msg. */
bool sp_kld_file_open(const char *path, int n_vocab, sp_kld_file *out,
                      char *msg, size_t msg_len);
/* Create `path` and write the header and tokens. */
bool sp_kld_file_create(const char *path, int n_ctx, int n_vocab, int n_chunk,
                        const int32_t *tokens, sp_kld_file *out, char *msg,
                        size_t msg_len);
/* Read or write one chunk's n records of record_len uint16. */
bool sp_kld_file_read(sp_kld_file *k, uint16_t *recs, size_t n);
bool sp_kld_file_write(sp_kld_file *k, const uint16_t *recs, size_t n);
/* Close (flushing a written file); false when a write failed. */
bool sp_kld_file_close(sp_kld_file *k);

#endif
