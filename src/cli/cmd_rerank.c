/* `spindle rerank`: relevance scores of documents for a query.
 *
 *   spindle rerank -m MODEL -q QUERY [DOC ... | stdin, one document per line]
 *                  [--instruction I] [--max-tokens N] [--threads N]
 *
 * Prints {"index": i, "relevance_score": s} per document, in input order;
 * every document of a run is scored in one spindle_rerank call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "spindle.h"

static const char *rerank_usage =
    "usage: spindle rerank -m MODEL -q QUERY [DOC ... | stdin, one per line]\n"
    "  -m, --model DIR     a cross-encoder (BERT sequence classification) or\n"
    "                      a yes/no decoder reranker (Qwen3-Reranker)\n"
    "  -q, --query Q       the query\n"
    "  --instruction I     a decoder reranker's instruction\n"
    "  --max-tokens N      tokens of one query-document input (default: the\n"
    "                      model's context)\n"
    "  --threads N         worker threads (default: all cores)\n";

typedef struct rerank_opts {
    const char *model, *query, *instruction;
    long max_tokens, threads;
    const char **docs;   /* the positional documents (into argv) */
    int n_docs;
} rerank_opts;

/* 0: parsed; -1: help printed; else the exit status. */
static int parse_opts(int argc, char **argv, rerank_opts *o) {
    memset(o, 0, sizeof *o);
    o->docs = calloc((size_t)argc, sizeof *o->docs);
    if (!o->docs) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (sp_arg_is_help(a)) {
            fputs(rerank_usage, stdout);
            return -1;
        }
        bool ok = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            ok = (o->model = sp_arg_value(argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--query")) {
            ok = (o->query = sp_arg_value(argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "--instruction")) {
            ok = (o->instruction = sp_arg_value(argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "--max-tokens")) {
            ok = (v = sp_arg_value(argc, argv, &i)) &&
                 sp_arg_int(a, v, 1, 1 << 24, &o->max_tokens);
        } else if (!strcmp(a, "--threads")) {
            ok = (v = sp_arg_value(argc, argv, &i)) &&
                 sp_arg_int(a, v, 1, 4096, &o->threads);
        } else if (a[0] == '-' && a[1]) {
            return sp_arg_unknown("rerank", a);
        } else {
            o->docs[o->n_docs++] = a;
        }
        if (!ok) return 2;
    }
    if (!o->model || !o->query) {
        fprintf(stderr, "spindle rerank: missing %s\n",
                o->model ? "-q QUERY" : "-m MODEL");
        return 2;
    }
    return 0;
}

/* stdin's non-empty lines (without their line ends) as documents, pointing
 * into *buf. */
static bool read_docs(rerank_opts *o, char **buf) {
    free(o->docs);
    o->docs = (const char **)sp_read_stdin_lines(true, buf, &o->n_docs);
    return o->docs != NULL;
}

static int score_all(const rerank_opts *o, spindle_reranker *r) {
    float *scores = malloc((size_t)o->n_docs * sizeof *scores);
    spindle_error err = {0};
    if (!scores) {
        fputs("spindle rerank: out of memory\n", stderr);
        return 1;
    }
    int rc = 0;
    if (spindle_rerank(r, o->query, o->docs, o->n_docs, scores, NULL, &err)) {
        fprintf(stderr, "spindle rerank: %s\n", err.message);
        rc = 1;
    }
    for (int i = 0; !rc && i < o->n_docs; i++)
        printf("{\"index\": %d, \"relevance_score\": %.9g}\n", i,
               (double)scores[i]);
    free(scores);
    return rc;
}

int sp_cmd_rerank(int argc, char **argv) {
    rerank_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) {
        free(o.docs);
        return rc < 0 ? 0 : rc;
    }
    char *buf = NULL;
    if (!o.n_docs && !read_docs(&o, &buf)) {
        fputs("spindle rerank: cannot read stdin\n", stderr);
        rc = 1;
    }
    if (!rc && !o.n_docs) {
        fputs("spindle rerank: no documents (give them as arguments or as "
              "lines of stdin)\n", stderr);
        rc = 2;
    }
    spindle_error err = {0};
    spindle_load_options lo = {.n_threads = 1};
    spindle_model *m = NULL;
    spindle_tokenizer *tok = NULL;
    spindle_reranker *r = NULL;
    spindle_reranker_options ro = {.n_threads = (int)o.threads,
                                   .max_tokens = (int)o.max_tokens,
                                   .instruction = o.instruction};
    if (!rc && (spindle_model_load(o.model, &lo, &m, &err) ||
                spindle_tokenizer_load(spindle_model_dir(m), &tok, &err) ||
                spindle_reranker_new(m, tok, &ro, &r, &err))) {
        fprintf(stderr, "spindle rerank: %s\n", err.message);
        rc = 1;
    }
    if (!rc) rc = score_all(&o, r);
    spindle_reranker_free(r);
    spindle_tokenizer_free(tok);
    spindle_model_free(m);
    free(o.docs);
    free(buf);
    return rc;
}
