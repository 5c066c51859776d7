/* spindle batched-bench: aggregate throughput of B concurrent sequences
 * through the step engine, the table of llama.cpp's llama-batched-bench
 * (tools/batched-bench): for every PP x TG x B, B requests of PP random
 * prompt tokens each generate TG tokens after their first.
 *
 *   T_PP  start -> every request has its first token (the prompt phase:
 *         one forward pass when B*PP <= -b, as llama's n_batch)
 *   T_TG  then -> every request has its TG further tokens: TG steps of B
 *         decode rows, one batched forward pass each
 *   S_PP = B*PP / T_PP, S_TG = B*TG / T_TG, S = B*(PP+TG) / (T_PP+T_TG),
 *   N_KV = B*(PP+TG), the cache entries in use at the end.
 * Greedy sampling, EOS ignored; one untimed warm-up request first. Every
 * row computes its prompts in full (no prefix reuse across rows). */
#include "cli/args.h"
#include "cli/commands.h"
#include "spindle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct bb_args {
    const char *model;
    int32_t *npp, *ntg, *npl;
    int n_npp, n_ntg, n_npl;
    int threads, batch, context;
    spindle_kv_type kv_type;
    size_t kv_bytes;
    bool use_mmap, json;
    /* --lora PATH (repeatable): request j runs on adapter j % n_lora */
    const char *lora_paths[16];
    spindle_adapter *adapters[16];
    int n_lora;
} bb_args;

/* What the callbacks count during one measurement. */
typedef struct bb_progress {
    int first_tokens, finished;
    spindle_status status;
    char error[512];
} bb_progress;

static bool bb_on_token(spindle_request_id id, const spindle_token_info *info,
                        void *user) {
    (void)id;
    if (info->index == 0) ((bb_progress *)user)->first_tokens++;
    return true;
}

static void bb_on_finish(spindle_request_id id,
                         const spindle_request_result *res, void *user) {
    (void)id;
    bb_progress *p = user;
    p->finished++;
    if (res->status && !p->status) {
        p->status = res->status;
        snprintf(p->error, sizeof p->error, "%s", res->error);
    }
}

typedef struct bb_row {
    int pp, tg, b;
    double t_pp, t_tg;
} bb_row;

/* One PP x TG x B measurement through a fresh engine of B slots. */
static spindle_status measure(spindle_model *m, const bb_args *a,
                              const int32_t *toks, bb_row *row,
                              spindle_error *err) {
    spindle_engine_options eo = spindle_engine_defaults();
    eo.max_seqs = row->b;
    eo.max_batch_tokens = a->batch > row->b ? a->batch : row->b;
    /* Rows share their prompts (and the warm-up the first one's start):
     * without this, a row would map the blocks an earlier row published
     * to the model's prefix index and time a fraction of its prompt phase.
     * llama-batched-bench clears its cache between rows. */
    eo.no_prefix_cache = true;
    spindle_engine *engine = NULL;
    spindle_status st = spindle_engine_new(m, &eo, &engine, err);
    spindle_gen_params gp = spindle_gen_defaults();
    gp.max_tokens = row->tg + 1;   /* the first comes from the prompt phase */
    gp.ignore_eos = true;
    bb_progress prog = {0};
    for (int j = 0; j < row->b && !st; j++) {
        if (a->n_lora) gp.adapter = a->adapters[j % a->n_lora];
        spindle_request rq = {.prompt = toks + (size_t)j * row->pp,
                              .n_prompt = row->pp, .params = &gp,
                              .on_token = bb_on_token,
                              .on_finish = bb_on_finish, .user = &prog};
        st = spindle_engine_submit(engine, &rq, NULL, err);
    }
    double t0 = seconds(), t1 = 0;
    for (int active = 1; active && !st;) {
        st = spindle_engine_step(engine, &active, err);
        if (!t1 && prog.first_tokens == row->b) t1 = seconds();
    }
    double t2 = seconds();
    spindle_engine_free(engine);
    if (!st && prog.status) {
        snprintf(err->message, sizeof err->message, "%s", prog.error);
        st = err->status = prog.status;
    }
    row->t_pp = t1 - t0;
    row->t_tg = t2 - t1;
    return st;
}

static void print_row(const bb_row *r, bool json) {
    double t = r->t_pp + r->t_tg;
    int n_kv = r->b * (r->pp + r->tg);
    double s_pp = r->b * r->pp / r->t_pp, s_tg = r->b * r->tg / r->t_tg;
    double s = r->b * (r->pp + r->tg) / t;
    if (json)
        printf("{\"pp\": %d, \"tg\": %d, \"b\": %d, \"n_kv\": %d, "
               "\"t_pp\": %.6f, \"s_pp\": %.6f, \"t_tg\": %.6f, "
               "\"s_tg\": %.6f, \"t\": %.6f, \"s\": %.6f}\n",
               r->pp, r->tg, r->b, n_kv, r->t_pp, s_pp, r->t_tg, s_tg, t, s);
    else
        printf("|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | "
               "%8.3f | %8.2f |\n", r->pp, r->tg, r->b, n_kv, r->t_pp, s_pp,
               r->t_tg, s_tg, t, s);
    fflush(stdout);
}

static const char *bb_usage =
    "usage: spindle batched-bench -m MODEL [-npp 128,256] [-ntg 128] [-npl 1,2,4,8]\n"
    "                             [-t THREADS] [-b TOKENS] [-c CONTEXT]\n"
    "                             [--kv-type f32|bf16|f16] [--kv-budget BYTES]\n"
    "                             [--mmap] [--json]\n"
    "  Aggregate prefill (S_PP) and decode (S_TG) throughput of B sequences\n"
    "  at once through the step engine; the table of llama-batched-bench.\n"
    "  -npp LIST  prompt tokens per sequence (default 128)\n"
    "  -ntg LIST  tokens generated per sequence after the first (default 128)\n"
    "  -npl LIST  parallel sequences B (default 1,2,4,8)\n"
    "  -t N       compute threads (default: all cores)\n"
    "  -b N       tokens per engine step, max_batch_tokens (default 2048)\n"
    "  -c N       context length per sequence (default: the model's)\n"
    SP_ARG_KV_TYPE_HELP
    SP_ARG_MMAP_HELP
    "  --lora PATH  a LoRA adapter; with several, request j runs on the\n"
    "             (j mod n)-th (repeatable, at most 16)\n"
    "  --json     one JSON object per row (pp, tg, b, n_kv, t_pp, s_pp, t_tg,\n"
    "             s_tg, t, s)\n";

/* 0: parsed; 1: help printed; 2: bad arguments (one line said why). */
static int parse(int argc, char **argv, bb_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        long n;
#define INT_VALUE(lo, hi) \
    if (!(v = sp_arg_value(argc, argv, &i)) || !sp_arg_int(o, v, lo, hi, &n)) return 2
#define LIST_VALUE(list, count, hi) \
    free(a->list); a->list = NULL; \
    if (!(v = sp_arg_value(argc, argv, &i)) || \
        !sp_arg_count_list(o, v, hi, &a->list, &a->count)) return 2
        if (!strcmp(o, "--json")) a->json = true;
        else if (!strcmp(o, "--mmap")) a->use_mmap = true;
        else if (!strcmp(o, "--lora")) {
            if (!(v = sp_arg_value(argc, argv, &i))) return 2;
            if (a->n_lora == 16) return sp_arg_unknown("batched-bench", o);
            a->lora_paths[a->n_lora++] = v;
        }
        else if (sp_arg_is_help(o)) { fputs(bb_usage, stdout); return 1; }
        else if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            if (!(a->model = sp_arg_value(argc, argv, &i))) return 2;
        }
        else if (!strcmp(o, "-npp")) { LIST_VALUE(npp, n_npp, 1 << 20); }
        else if (!strcmp(o, "-ntg")) { LIST_VALUE(ntg, n_ntg, 1 << 20); }
        else if (!strcmp(o, "-npl")) { LIST_VALUE(npl, n_npl, 4096); }
        else if (!strcmp(o, "-t")) { INT_VALUE(1, 1024); a->threads = (int)n; }
        else if (!strcmp(o, "-b")) { INT_VALUE(1, 1 << 20); a->batch = (int)n; }
        else if (!strcmp(o, "-c")) { INT_VALUE(1, 1 << 24); a->context = (int)n; }
        else if (!strcmp(o, "--kv-budget")) {
            if (!(v = sp_arg_value(argc, argv, &i)) || !sp_arg_bytes(o, v, &a->kv_bytes)) return 2;
        } else if (!strcmp(o, "--kv-type")) {
            if (!(v = sp_arg_value(argc, argv, &i)) || !sp_arg_kv_type(o, v, &a->kv_type)) return 2;
        }
        else return sp_arg_unknown("batched-bench", o);
#undef INT_VALUE
#undef LIST_VALUE
    }
    if (!a->model) {
        fprintf(stderr, "spindle batched-bench: -m MODEL is required\n");
        return 2;
    }
    return 0;
}

static int32_t *default_list(const int32_t *v, int n, int *count) {
    int32_t *out = malloc((size_t)n * sizeof *out);
    if (out) memcpy(out, v, (size_t)n * sizeof *out);
    *count = out ? n : 0;
    return out;
}

static spindle_status load_adapters(spindle_model *m, bb_args *a,
                                    spindle_error *err) {
    spindle_status st = SPINDLE_OK;
    for (int i = 0; i < a->n_lora && !st; i++)
        st = spindle_adapter_load(m, a->lora_paths[i], &a->adapters[i], err);
    return st;
}

static int run_table(spindle_model *m, const bb_args *a, spindle_error *err) {
    int max_pp = 1, max_b = 1, vocab = spindle_model_vocab_size(m);
    for (int i = 0; i < a->n_npp; i++) if (a->npp[i] > max_pp) max_pp = a->npp[i];
    for (int i = 0; i < a->n_npl; i++) if (a->npl[i] > max_b) max_b = a->npl[i];
    size_t ntok = (size_t)max_pp * max_b > 16 ? (size_t)max_pp * max_b : 16;
    int32_t *toks = malloc(ntok * sizeof *toks);
    if (!toks) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ULL;   /* fixed random prompts */
    for (size_t i = 0; i < ntok; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
    }
    bb_row warm = {.pp = 16, .tg = 1, .b = 1};
    int rc = measure(m, a, toks, &warm, err) ? 1 : 0;
    if (!rc && !a->json)
        printf("\nbatched-bench: n_ctx = %d, n_batch = %d, n_threads = %d, kv = %s\n\n"
               "|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n"
               "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n",
               spindle_model_context_length(m), a->batch, a->threads,
               spindle_kv_type_name(a->kv_type), "PP", "TG", "B", "N_KV",
               "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
    for (int i = 0; !rc && i < a->n_npp; i++)
        for (int j = 0; !rc && j < a->n_ntg; j++)
            for (int k = 0; !rc && k < a->n_npl; k++) {
                bb_row r = {.pp = a->npp[i], .tg = a->ntg[j], .b = a->npl[k]};
                if (r.pp + r.tg > spindle_model_context_length(m)) {
                    fprintf(stderr, "spindle batched-bench: PP %d + TG %d is over "
                                    "the context; skipped\n", r.pp, r.tg);
                    continue;
                }
                if (measure(m, a, toks, &r, err)) rc = 1;
                else print_row(&r, a->json);
            }
    free(toks);
    return rc;
}

int sp_cmd_batched_bench(int argc, char **argv) {
    static const int32_t def_pp[] = {128}, def_tg[] = {128}, def_pl[] = {1, 2, 4, 8};
    bb_args a = {.batch = 2048};
    int parsed = parse(argc, argv, &a), rc = parsed == 2 ? 2 : 0;
    if (!parsed) {
        if (!a.npp) a.npp = default_list(def_pp, 1, &a.n_npp);
        if (!a.ntg) a.ntg = default_list(def_tg, 1, &a.n_ntg);
        if (!a.npl) a.npl = default_list(def_pl, 4, &a.n_npl);
        spindle_error err = {0};
        spindle_model *m = NULL;
        int max_b = 1;   /* a row's B sequences each at most a full context */
        for (int i = 0; i < a.n_npl; i++) if (a.npl && a.npl[i] > max_b) max_b = a.npl[i];
        spindle_load_options lo = {.n_threads = a.threads, .kv_type = a.kv_type,
                                   .kv_bytes = a.kv_bytes, .kv_sequences = max_b,
                                   .use_mmap = a.use_mmap,
                                   .max_context = a.context};
        if (!a.npp || !a.ntg || !a.npl) {
            snprintf(err.message, sizeof err.message, "out of memory");
            rc = 1;
        } else if (spindle_model_load(a.model, &lo, &m, &err) ||
                   load_adapters(m, &a, &err) || run_table(m, &a, &err)) {
            rc = 1;
        }
        if (rc) fprintf(stderr, "spindle: %s\n", err.message);
        else if (!a.json) printf("\n");
        for (int i = 0; i < a.n_lora; i++) spindle_adapter_unload(a.adapters[i]);
        spindle_model_free(m);
    }
    free(a.npp);
    free(a.ntg);
    free(a.npl);
    return rc;
}
