/* spindle bench: llama-bench-style prefill (pp) and decode (tg) throughput.
 *
 * pp: one forward pass over P prompt tokens in a fresh sequence (chunked at
 * 512 as generation does). tg: N single-token forward passes after a short
 * prompt. With -d DEPTH (llama-bench's n_depth) both start after an untimed
 * prefill of DEPTH tokens, so they measure attention over a long context.
 * Tokens are arbitrary ids (speed does not depend on them). Each figure is
 * the mean ± sample stdev over the repetitions, after one untimed warm-up. */
#include "cli/args.h"
#include "cli/commands.h"
#include "spindle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct bench_args {
    const char *model;
    int pp, tg, threads, reps, depth;
    spindle_kv_type kv_type;
    bool use_mmap;
    bool json;
} bench_args;

/* Forward `n` tokens in chunks of 512 (as generation prefills). */
static spindle_status prefill(spindle_model *m, spindle_seq *seq,
                              const int32_t *toks, int n, float *logits,
                              spindle_error *err) {
    spindle_status st = SPINDLE_OK;
    for (int done = 0; done < n && !st; done += 512) {
        int take = n - done < 512 ? n - done : 512;
        spindle_batch_entry e = {.seq = seq, .tokens = toks + done,
                                 .n_tokens = take,
                                 .logits_mode = SPINDLE_LOGITS_LAST,
                                 .logits = logits};
        st = spindle_forward(m, &e, 1, err);
    }
    return st;
}

/* Tokens per second of one pp or tg run after an untimed context of
 * `depth` tokens; < 0 on error (message in err). */
static double run_once(spindle_model *m, int depth, int n_prompt,
                       int n_decode, int32_t *toks, float *logits,
                       spindle_error *err) {
    spindle_seq *seq = NULL;
    if (spindle_seq_new(m, &seq, err)) return -1;
    double rate = -1;
    spindle_status st = prefill(m, seq, toks, depth, logits, err);
    double t0 = seconds();
    if (!st) st = prefill(m, seq, toks + depth, n_prompt, logits, err);
    double t1 = seconds();
    for (int i = 0; i < n_decode && !st; i++) {
        spindle_batch_entry e = {.seq = seq, .tokens = toks + (i % 64),
                                 .n_tokens = 1,
                                 .logits_mode = SPINDLE_LOGITS_LAST,
                                 .logits = logits};
        st = spindle_forward(m, &e, 1, err);
    }
    double t2 = seconds();
    if (!st) rate = n_decode ? n_decode / (t2 - t1) : n_prompt / (t1 - t0);
    spindle_seq_free(seq);
    return rate;
}

static void stats(const double *x, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

static const char *bench_usage =
    "usage: spindle bench -m MODEL [-p 512] [-n 128] [-d DEPTH] [-t THREADS] [-r REPS]\n"
    "                     [--kv-type f32|bf16|f16] [--mmap] [--json]\n"
    "  -p N      prompt tokens of the prefill test (default 512; 0: skip)\n"
    "  -n N      tokens of the decode test (default 128; 0: skip)\n"
    "  -d DEPTH  tokens of context (untimed prefill) before each pp and tg test\n"
    "  -t N      compute threads (default: all cores)\n"
    "  -r N      repetitions (default 3, after one untimed warm-up)\n"
    SP_ARG_KV_TYPE_HELP
    SP_ARG_MMAP_HELP
    "  --json    print one JSON object\n";

/* 0: parsed; 1: help printed; 2: bad arguments (one line said why). */
static int parse(int argc, char **argv, bench_args *a) {
    *a = (bench_args){.pp = 512, .tg = 128, .reps = 3};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        long n;
#define INT_VALUE(lo, hi) \
    if (!(v = sp_arg_value(argc, argv, &i)) || !sp_arg_int(o, v, lo, hi, &n)) return 2
        if (!strcmp(o, "--json")) a->json = true;
        else if (!strcmp(o, "--mmap")) a->use_mmap = true;
        else if (sp_arg_is_help(o)) { fputs(bench_usage, stdout); return 1; }
        else if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            if (!(a->model = sp_arg_value(argc, argv, &i))) return 2;
        }
        else if (!strcmp(o, "-p")) { INT_VALUE(0, 1 << 20); a->pp = (int)n; }
        else if (!strcmp(o, "-n")) { INT_VALUE(0, 1 << 20); a->tg = (int)n; }
        else if (!strcmp(o, "-t")) { INT_VALUE(1, 1024); a->threads = (int)n; }
        else if (!strcmp(o, "-d")) { INT_VALUE(0, 1 << 24); a->depth = (int)n; }
        else if (!strcmp(o, "-r")) { INT_VALUE(1, 1000); a->reps = (int)n; }
        else if (!strcmp(o, "--kv-type")) {
            if (!(v = sp_arg_value(argc, argv, &i)) || !sp_arg_kv_type(o, v, &a->kv_type)) return 2;
        }
        else return sp_arg_unknown("bench", o);
#undef INT_VALUE
    }
    if (!a->model) { fprintf(stderr, "spindle bench: -m MODEL is required\n"); return 2; }
    return 0;
}

int sp_cmd_bench(int argc, char **argv) {
    bench_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;

    spindle_error err = {0};
    spindle_model *m = NULL;
    spindle_load_options lo = {.n_threads = a.threads, .kv_type = a.kv_type,
                               .use_mmap = a.use_mmap, .kv_sequences = 1};
    double t0 = seconds();
    if (spindle_model_load(a.model, &lo, &m, &err)) {
        fprintf(stderr, "spindle: %s\n", err.message);
        return 1;
    }
    double load_s = seconds() - t0;
    int vocab = spindle_model_vocab_size(m);
    /* Context then prompt; decode steps cycle over the first 64. */
    int ntok = a.depth + (a.pp > 64 ? a.pp : 64);
    int32_t *toks = malloc((size_t)ntok * sizeof *toks);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    double *pp = calloc((size_t)a.reps, sizeof *pp), *tg = calloc((size_t)a.reps, sizeof *tg);
    rc = (!toks || !logits || !pp || !tg) ? 1 : 0;
    for (int i = 0; !rc && i < ntok; i++) toks[i] = (int32_t)((i * 7919 + 13) % vocab);
    /* Warm-up: fault the mapped weights in and let the pool spin up. */
    if (!rc && run_once(m, 0, 16, 2, toks, logits, &err) < 0) rc = 1;
    for (int r = 0; !rc && r < a.reps; r++) {
        if (a.pp && (pp[r] = run_once(m, a.depth, a.pp, 0, toks, logits, &err)) < 0) rc = 1;
        /* tg without depth follows a one-token prompt, as llama-bench's. */
        if (a.tg && (tg[r] = run_once(m, a.depth, a.depth ? 0 : 1, a.tg, toks,
                                      logits, &err)) < 0) rc = 1;
    }
    if (rc) {
        fprintf(stderr, "spindle: %s\n", err.message[0] ? err.message : "out of memory");
    } else {
        double ppm, pps, tgm, tgs;
        stats(pp, a.reps, &ppm, &pps);
        stats(tg, a.reps, &tgm, &tgs);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double rss = ru.ru_maxrss / 1024.0;
        const char *kv = spindle_kv_type_name(a.kv_type);
        char at[32] = "";
        if (a.depth) snprintf(at, sizeof at, " @ d%d", a.depth);
        if (a.json) {
            printf("{\"model\": \"%s\", \"threads\": %d, \"pp\": %d, \"tg\": %d, "
                   "\"depth\": %d, \"kv_type\": \"%s\", "
                   "\"reps\": %d, \"pp_tps\": %.3f, \"pp_tps_sd\": %.3f, "
                   "\"tg_tps\": %.3f, \"tg_tps_sd\": %.3f, \"load_seconds\": %.3f, "
                   "\"peak_rss_mib\": %.1f}\n",
                   spindle_model_dir(m), a.threads, a.pp, a.tg, a.depth, kv,
                   a.reps, ppm, pps,
                   tgm, tgs, load_s, rss);
        } else {
            printf("| model | threads | kv | test | t/s |\n|---|---|---|---|---|\n");
            if (a.pp) printf("| %s | %d | %s | pp%d%s | %.2f ± %.2f |\n", spindle_model_dir(m), a.threads, kv, a.pp, at, ppm, pps);
            if (a.tg) printf("| %s | %d | %s | tg%d%s | %.2f ± %.2f |\n", spindle_model_dir(m), a.threads, kv, a.tg, at, tgm, tgs);
            printf("load %.3f s, peak RSS %.1f MiB\n", load_s, rss);
        }
    }
    free(toks); free(logits); free(pp); free(tg);
    spindle_model_free(m);
    return rc;
}
