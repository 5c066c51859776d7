/* spindle perplexity: llama-perplexity's measure over a text file.
 *
 * The text is tokenized once (BOS in front when the tokenizer adds one) and
 * cut into windows of --ctx tokens. Each window runs from an empty state with
 * its first token replaced by BOS (when the tokenizer adds one), and only its
 * second half is scored: positions ctx/2 .. ctx-2 predict the next token, so
 * every scored token has at least ctx/2 tokens of context. The perplexity is
 * exp of the mean negative log-likelihood, its error the standard error of
 * that mean times the perplexity, as llama-perplexity prints them.
 *
 * --kl-divergence-base FILE writes each scored position's log-probabilities
 * in llama-perplexity's file format (cli/kld_base.h); with --kl-divergence
 * the file is read instead (its tokens are the text) and each position is
 * compared against it: KL divergence, top-1 agreement, Δp. */
#include "base/mapped_file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/kld_base.h"
#include "spindle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens per forward call: llama.cpp's default micro-batch. */
#define PASS_TOKENS 512

typedef struct ppl_opts {
    const char *model, *text_file, *base_file;
    int ctx, threads, chunks;
    bool ctx_given, kl_divergence, json;
} ppl_opts;

static const char *ppl_usage =
    "usage: spindle perplexity -m MODEL -f TEXT_FILE [--ctx N] [-t THREADS]\n"
    "                          [--chunks N] [--kl-divergence-base FILE] [--json]\n"
    "       spindle perplexity -m MODEL --kl-divergence --kl-divergence-base FILE\n"
    "  -f FILE       the text (UTF-8) whose perplexity is measured\n"
    "  -c, --ctx N   tokens per window (default 512); the second half is scored\n"
    "  --chunks N    windows to evaluate at most (default: all the text holds)\n"
    "  -t N          compute threads (default: all cores)\n"
    "  --kl-divergence-base FILE\n"
    "                without --kl-divergence: write each scored position's\n"
    "                log-probabilities there (llama-perplexity's file format)\n"
    "  --kl-divergence\n"
    "                compare against the base FILE (its tokens are the text):\n"
    "                KL divergence, top-1 agreement, Δp statistics (the\n"
    "                file's windows: -f is not read, --ctx must match)\n"
    "  --json        print one JSON object instead of the text report\n";

/* 0: parsed; 1: help printed; 2: bad arguments (one line said why). */
static int parse(int argc, char **argv, ppl_opts *o) {
    *o = (ppl_opts){.ctx = 512, .chunks = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
#define VALUE() if (!(v = sp_arg_value(argc, argv, &i))) return 2
#define INT_VALUE(lo, hi) VALUE(); if (!sp_arg_int(a, v, lo, hi, &n)) return 2
        if (sp_arg_is_help(a)) { fputs(ppl_usage, stdout); return 1; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VALUE(); o->model = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { VALUE(); o->text_file = v; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) { INT_VALUE(8, 1 << 20); o->ctx = (int)n; o->ctx_given = true; }
        else if (!strcmp(a, "-t")) { INT_VALUE(1, 1024); o->threads = (int)n; }
        else if (!strcmp(a, "--chunks")) { INT_VALUE(1, 1 << 24); o->chunks = (int)n; }
        else if (!strcmp(a, "--kl-divergence-base")) { VALUE(); o->base_file = v; }
        else if (!strcmp(a, "--kl-divergence")) o->kl_divergence = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else return sp_arg_unknown("perplexity", a);
#undef INT_VALUE
#undef VALUE
    }
    const char *missing = !o->model ? "-m MODEL is required"
        : o->kl_divergence && !o->base_file ? "--kl-divergence needs --kl-divergence-base FILE"
        : !o->kl_divergence && !o->text_file ? "-f TEXT_FILE is required"
        : NULL;
    if (missing) { fprintf(stderr, "spindle perplexity: %s\n", missing); return 2; }
    return 0;
}

/* What one run holds: the model, the text's tokens and the scratch. */
typedef struct ppl_run {
    spindle_model *model;
    spindle_seq *seq;
    int vocab, ctx, n_chunk;
    int32_t bos;                /* -1: windows keep their first token */
    int32_t *tokens, *window;
    float *logits;              /* the scored half's rows */
    uint16_t *records;          /* base records of one window */
    sp_kld_file base;
    bool writing_base;
    double nll, nll2;
    size_t count;
    float *kld_values, *p_diff_values;
    sp_kld_sums kld;
    double *chunk_ppl;
} ppl_run;

static int scored_per_window(int ctx) { return ctx - 1 - ctx / 2; }

/* Run window `c` from an empty state; the logits of positions ctx/2 ..
 * ctx-1 land in r->logits. */
static spindle_status eval_window(ppl_run *r, int c, spindle_error *err) {
    int first = r->ctx / 2;
    memcpy(r->window, r->tokens + (size_t)c * r->ctx, (size_t)r->ctx * sizeof *r->window);
    if (r->bos >= 0) r->window[0] = r->bos;
    spindle_status st = spindle_seq_truncate(r->seq, 0, err);
    for (int pos = 0; pos < r->ctx && !st;) {
        /* Passes never straddle ctx/2: a pass returns all rows or none. */
        int end = pos < first ? first : r->ctx;
        int n = end - pos < PASS_TOKENS ? end - pos : PASS_TOKENS;
        bool scored = pos >= first;
        spindle_batch_entry e = {
            .seq = r->seq, .tokens = r->window + pos, .n_tokens = n,
            .logits_mode = scored ? SPINDLE_LOGITS_ALL : SPINDLE_LOGITS_NONE,
            .logits = scored ? r->logits + (size_t)(pos - first) * r->vocab : NULL};
        st = spindle_forward(r->model, &e, 1, err);
        pos += n;
    }
    return st;
}

/* Score window `c`'s second half: perplexity sums, and the base records
 * written or compared. */
static bool score_window(ppl_run *r, int c, bool compare, char *msg, size_t len) {
    int first = r->ctx / 2, n = scored_per_window(r->ctx);
    const int32_t *next = r->tokens + (size_t)c * r->ctx + first + 1;
    size_t rec_len = sp_kld_record_len(r->vocab);
    if (compare && !sp_kld_file_read(&r->base, r->records, (size_t)n)) {
        snprintf(msg, len, "cannot read the base records of chunk %d", c + 1);
        return false;
    }
    for (int j = 0; j < n; j++) {
        const float *row = r->logits + (size_t)j * r->vocab;
        uint16_t *rec = r->records + (size_t)j * rec_len;
        size_t at = (size_t)c * n + j;
        double v;
        if (compare) {
            sp_kld_compare(row, r->vocab, rec, next[j], &r->kld,
                           &r->kld_values[at], &r->p_diff_values[at]);
            continue;
        }
        v = r->writing_base ? sp_kld_encode(row, r->vocab, next[j], rec)
                            : sp_token_nll(row, r->vocab, next[j]);
        r->nll += v;
        r->nll2 += v * v;
        r->count++;
    }
    if (r->writing_base && !sp_kld_file_write(&r->base, r->records, (size_t)n)) {
        snprintf(msg, len, "cannot write the base file");
        return false;
    }
    r->chunk_ppl[c] = compare ? exp(r->kld.nll / (double)r->kld.count)
                              : exp(r->nll / (double)r->count);
    return true;
}

/* PPL and its error from the sums, as llama-perplexity's final estimate. */
static void final_ppl(double nll, double nll2, size_t count, double *ppl,
                      double *ppl_err) {
    double mean = nll / count, var = nll2 / count - mean * mean;
    *ppl = exp(mean);
    *ppl_err = var > 0 && count > 1 ? sqrt(var / (count - 1)) * *ppl : 0;
}

/* The running table line llama-perplexity prints per chunk of a KLD run. */
static void print_kld_chunk(const sp_kld_sums *s, int c) {
    double lp, lpe, lb, lbe, kl, kle, mse, msee;
    sp_mean_uncertainty(s->nll, s->nll2, s->count, &lp, &lpe);
    sp_mean_uncertainty(s->nll_base, s->nll_base2, s->count, &lb, &lbe);
    double cov = sp_mean_covariance(s->nll, s->nll_base, s->nll_nll_base, s->count);
    sp_mean_uncertainty(s->kld, s->kld2, s->count, &kl, &kle);
    sp_mean_uncertainty(s->p_diff2, s->p_diff4, s->count, &mse, &msee);
    double rms = sqrt(mse), top = (double)s->same_top / s->count;
    double top_err = s->count > 1 ? sqrt(top * (1 - top) / (s->count - 1)) : 0;
    printf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    "
           "%6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n", c + 1, exp(lp), exp(lp) * lpe,
           lp - lb, sqrt(fmax(lpe * lpe + lbe * lbe - 2 * cov, 0)), kl, kle,
           100 * rms, rms > 0 ? 100 * 0.5 / rms * msee : 0, 100 * top, 100 * top_err);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static const float levels[] = {0.999f, 0.99f, 0.95f, 0.90f, 0.10f, 0.05f, 0.01f, 0.001f};

/* The closing statistics of a KLD run: text as llama-perplexity prints
 * them, or one JSON object. */
static void print_kld_summary(ppl_run *r, bool json) {
    const sp_kld_sums *s = &r->kld;
    size_t n = s->count;
    qsort(r->kld_values, n, sizeof *r->kld_values, cmp_float);
    qsort(r->p_diff_values, n, sizeof *r->p_diff_values, cmp_float);
    const float *kv = r->kld_values, *pv = r->p_diff_values;
    double lp, lpe, lb, lbe, kl, kle, pd, pde, mse, msee;
    sp_mean_uncertainty(s->nll, s->nll2, n, &lp, &lpe);
    sp_mean_uncertainty(s->nll_base, s->nll_base2, n, &lb, &lbe);
    double cov = sp_mean_covariance(s->nll, s->nll_base, s->nll_nll_base, n);
    sp_mean_uncertainty(s->kld, s->kld2, n, &kl, &kle);
    sp_mean_uncertainty(s->p_diff, s->p_diff2, n, &pd, &pde);
    sp_mean_uncertainty(s->p_diff2, s->p_diff4, n, &mse, &msee);
    double rms = sqrt(mse), rms_err = rms > 0 ? 0.5 / rms * msee : 0;
    double top = (double)s->same_top / n;
    double top_err = n > 1 ? sqrt(top * (1 - top) / (n - 1)) : 0;
    double ratio_err = sqrt(fmax(lpe * lpe + lbe * lbe - 2 * cov, 0));
    if (json) {
        /* The KLD in significant digits: near-uniform distributions (random
         * weights) diverge by 1e-7 and less, below a fixed 6 decimals. */
        printf("{\"chunks\": %d, \"ctx\": %d, \"tokens_scored\": %zu, "
               "\"ppl\": %.6f, \"ppl_err\": %.6f, \"ppl_base\": %.6f, "
               "\"ppl_base_err\": %.6f, \"ln_ppl_ratio\": %.6f, "
               "\"ln_ppl_ratio_err\": %.6f, \"kld_mean\": %.6g, \"kld_err\": %.6g, "
               "\"kld_median\": %.6g, \"kld_p99\": %.6g, \"kld_max\": %.6g, "
               "\"dp_mean\": %.6f, \"dp_err\": %.6f, \"dp_median\": %.6f, "
               "\"dp_min\": %.6f, \"dp_max\": %.6f, \"dp_rms\": %.6f, "
               "\"same_top\": %.6f, \"same_top_err\": %.6f}\n",
               r->n_chunk, r->ctx, n, exp(lp), exp(lp) * lpe, exp(lb), exp(lb) * lbe,
               lp - lb, ratio_err, kl, kle, sp_median(kv, n),
               sp_percentile(kv, n, 0.99f), kv[n - 1], pd, pde, sp_median(pv, n),
               pv[0], pv[n - 1], rms, top, top_err);
        return;
    }
    printf("\n====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", exp(lp), exp(lp) * lpe);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", exp(lb), exp(lb) * lbe);
    if (lpe > 0 && lbe > 0)
        printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * cov / (lpe * lbe));
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lp - lb, ratio_err);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lp - lb),
           exp(lp - lb) * ratio_err);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", kl, kle);
    printf("Maximum KLD: %10.6f\n", kv[n - 1]);
    for (int i = 0; i < 4; i++)
        printf("%4.1f%%   KLD: %10.6f\n", 100 * levels[i], sp_percentile(kv, n, levels[i]));
    printf("Median  KLD: %10.6f\n", sp_median(kv, n));
    for (int i = 4; i < 8; i++)
        printf("%4.1f%%   KLD: %10.6f\n", 100 * levels[i], sp_percentile(kv, n, levels[i]));
    printf("Minimum KLD: %10.6f\n", kv[0]);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * pd, 100 * pde);
    printf("Maximum Δp: %6.3f%%\n", 100 * pv[n - 1]);
    for (int i = 0; i < 4; i++)
        printf("%4.1f%%   Δp: %6.3f%%\n", 100 * levels[i], 100 * sp_percentile(pv, n, levels[i]));
    printf("Median  Δp: %6.3f%%\n", 100 * sp_median(pv, n));
    for (int i = 4; i < 8; i++)
        printf("%4.1f%%   Δp: %6.3f%%\n", 100 * levels[i], 100 * sp_percentile(pv, n, levels[i]));
    printf("Minimum Δp: %6.3f%%\n", 100 * pv[0]);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * rms, 100 * rms_err);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * top, 100 * top_err);
}

/* Whether the tokenizer puts BOS in front (then each window starts with
 * it); a tokenizer that appends tokens cannot be windowed this way. */
static bool window_bos(const spindle_tokenizer *tok, int32_t *bos, char *msg,
                       size_t len) {
    int32_t *ids = NULL;
    size_t n = 0;
    spindle_error err = {0};
    if (spindle_tokenizer_encode(tok, "", 0, true, &ids, &n, &err)) {
        snprintf(msg, len, "%s", err.message);
        return false;
    }
    int32_t b = spindle_tokenizer_bos_id(tok);
    *bos = n >= 1 && b >= 0 && ids[0] == b ? b : -1;
    bool ok = n <= (*bos >= 0 ? 1u : 0u);
    spindle_free(ids);
    if (!ok) snprintf(msg, len, "the tokenizer appends special tokens to the "
                      "text; perplexity needs a tokenizer that adds none at the end");
    return ok;
}

/* The text's tokens (-f), or the base file's under --kl-divergence. */
static bool load_tokens(ppl_run *r, const ppl_opts *o, const spindle_tokenizer *tok,
                        char *msg, size_t len) {
    if (o->kl_divergence) {
        if (!sp_kld_file_open(o->base_file, r->vocab, &r->base, msg, len)) return false;
        if (o->ctx_given && o->ctx != r->base.n_ctx) {
            snprintf(msg, len, "%s was computed with --ctx %d, not %d",
                     o->base_file, r->base.n_ctx, o->ctx);
            return false;
        }
        r->ctx = r->base.n_ctx;
        r->n_chunk = o->chunks > 0 && o->chunks < r->base.n_chunk ? o->chunks : r->base.n_chunk;
        r->tokens = r->base.tokens;
        return true;
    }
    char *text = NULL;
    size_t text_len = 0, n = 0;
    spindle_error err = {0};
    if (sp_read_text_file(o->text_file, &text, &text_len, &err) ||
        spindle_tokenizer_encode(tok, text, text_len, true, &r->tokens, &n, &err)) {
        free(text);
        snprintf(msg, len, "%s", err.message);
        return false;
    }
    free(text);
    if (n < 2 * (size_t)o->ctx) {
        snprintf(msg, len, "%s: %zu tokens; a context of %d needs at least %d",
                 o->text_file, n, o->ctx, 2 * o->ctx);
        return false;
    }
    r->ctx = o->ctx;
    r->n_chunk = (int)(n / (size_t)o->ctx);
    if (o->chunks > 0 && o->chunks < r->n_chunk) r->n_chunk = o->chunks;
    return true;
}

static bool prepare(ppl_run *r, const ppl_opts *o, char *msg, size_t len) {
    size_t scored = (size_t)scored_per_window(r->ctx);
    r->window = malloc((size_t)r->ctx * sizeof *r->window);
    r->logits = malloc((size_t)(r->ctx - r->ctx / 2) * r->vocab * sizeof *r->logits);
    r->chunk_ppl = calloc((size_t)r->n_chunk, sizeof *r->chunk_ppl);
    if (o->base_file)
        r->records = malloc(scored * sp_kld_record_len(r->vocab) * sizeof *r->records);
    if (o->kl_divergence) {
        r->kld_values = malloc(scored * r->n_chunk * sizeof *r->kld_values);
        r->p_diff_values = malloc(scored * r->n_chunk * sizeof *r->p_diff_values);
    }
    if (!r->window || !r->logits || !r->chunk_ppl || (o->base_file && !r->records) ||
        (o->kl_divergence && (!r->kld_values || !r->p_diff_values))) {
        snprintf(msg, len, "out of memory");
        return false;
    }
    if (o->base_file && !o->kl_divergence) {
        r->writing_base = true;
        return sp_kld_file_create(o->base_file, r->ctx, r->vocab, r->n_chunk,
                                  r->tokens, &r->base, msg, len);
    }
    return true;
}

static void free_run(ppl_run *r, bool kl_divergence) {
    if (!kl_divergence) spindle_free(r->tokens);
    sp_kld_file_close(&r->base);
    free(r->window); free(r->logits); free(r->records); free(r->chunk_ppl);
    free(r->kld_values); free(r->p_diff_values);
    spindle_seq_free(r->seq);
}

/* Every window: evaluate, score, report progress. */
static int run_windows(ppl_run *r, const ppl_opts *o, char *msg, size_t len) {
    spindle_error err = {0};
    if (!o->json && o->kl_divergence)
        printf("chunk             PPL               ln(PPL(Q)/PPL(base))          "
               "KL Divergence              Δp RMS            Same top p\n");
    for (int c = 0; c < r->n_chunk; c++) {
        if (eval_window(r, c, &err)) {
            snprintf(msg, len, "%s", err.message);
            return 1;
        }
        if (!score_window(r, c, o->kl_divergence, msg, len)) return 1;
        if (o->json) continue;
        if (o->kl_divergence) print_kld_chunk(&r->kld, c);
        else printf("[%d]%.4f,", c + 1, r->chunk_ppl[c]);
        fflush(stdout);
    }
    if (r->writing_base && !sp_kld_file_close(&r->base)) {
        snprintf(msg, len, "%s: cannot write", o->base_file);
        return 1;
    }
    if (o->kl_divergence) {
        print_kld_summary(r, o->json);
        return 0;
    }
    double ppl, ppl_err;
    final_ppl(r->nll, r->nll2, r->count, &ppl, &ppl_err);
    if (o->json) {
        printf("{\"chunks\": %d, \"ctx\": %d, \"tokens_scored\": %zu, "
               "\"ppl\": %.6f, \"ppl_err\": %.6f, \"chunk_ppl\": [",
               r->n_chunk, r->ctx, r->count, ppl, ppl_err);
        for (int c = 0; c < r->n_chunk; c++)
            printf("%s%.6f", c ? ", " : "", r->chunk_ppl[c]);
        printf("]}\n");
    } else {
        printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, ppl_err);
    }
    return 0;
}

int sp_cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;

    spindle_error err = {0};
    spindle_load_options lo = {.n_threads = o.threads};
    spindle_tokenizer *tok = NULL;
    ppl_run r = {0};
    char msg[512] = "";
    if (spindle_model_load(o.model, &lo, &r.model, &err) ||
        spindle_tokenizer_load(spindle_model_dir(r.model), &tok, &err) ||
        spindle_seq_new(r.model, &r.seq, &err)) {
        snprintf(msg, sizeof msg, "%s", err.message);
        rc = 1;
    }
    if (!rc) r.vocab = spindle_model_vocab_size(r.model);
    if (!rc && (!window_bos(tok, &r.bos, msg, sizeof msg) ||
                !load_tokens(&r, &o, tok, msg, sizeof msg) ||
                !prepare(&r, &o, msg, sizeof msg)))
        rc = 1;
    if (!rc) {
        if (!o.json)
            fprintf(stderr, "perplexity: %d chunks of %d tokens, %d scored each%s\n",
                    r.n_chunk, r.ctx, scored_per_window(r.ctx),
                    r.bos >= 0 ? ", each window starting with BOS" : "");
        rc = run_windows(&r, &o, msg, sizeof msg);
    }
    if (rc) fprintf(stderr, "spindle perplexity: %s\n", msg);
    free_run(&r, o.kl_divergence);
    spindle_tokenizer_free(tok);
    spindle_model_free(r.model);
    return rc;
}
