/* `spindle embed`: sentence embeddings, one JSON object per input.
 *
 *   spindle embed -m MODEL [--text T | stdin, one input per line]
 *                 [--prompt P | --prompt-name NAME] [--dimensions N]
 *                 [--max-tokens N] [--threads N] [--ids]
 *                 [--pooling mean|cls|last]
 *
 * --ids: each input line is token ids ("1,2,3"), special tokens included;
 * no tokenizer is loaded.
 *
 * Prints {"embedding": [...]} per input in input order; every input of a
 * run is embedded in one spindle_embed call (many per forward pass). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "spindle.h"

static const char *embed_usage =
    "usage: spindle embed -m MODEL [--text T | stdin, one input per line]\n"
    "  -m, --model DIR     sentence-transformers model directory or repo id\n"
    "  --text T            one input (default: each line of stdin)\n"
    "  --prompt P          text prepended to every input\n"
    "  --prompt-name NAME  a prompt of config_sentence_transformers.json\n"
    "  --dimensions N      keep the first N values (Matryoshka)\n"
    "  --max-tokens N      truncate inputs to N tokens (default: the model's)\n"
    "  --threads N         worker threads (default: all cores)\n"
    "  --ids               input lines are token ids (1,2,3), not text\n"
    SP_ARG_POOLING_HELP;

typedef struct embed_opts {
    const char *model, *text, *prompt, *prompt_name;
    long dimensions, max_tokens, threads;
    spindle_pooling pooling;
    bool ids;
} embed_opts;

/* 0: parsed; -1: help printed; else the exit status. */
static int parse_opts(int argc, char **argv, embed_opts *o) {
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (sp_arg_is_help(a)) {
            fputs(embed_usage, stdout);
            return -1;
        }
        bool ok = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(o->model = sp_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--text")) {
            if (!(o->text = sp_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ids")) {
            o->ids = true;
        } else if (!strcmp(a, "--prompt")) {
            if (!(o->prompt = sp_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--prompt-name")) {
            if (!(o->prompt_name = sp_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--dimensions")) {
            ok = (v = sp_arg_value(argc, argv, &i)) &&
                 sp_arg_int(a, v, 1, 1 << 20, &o->dimensions);
        } else if (!strcmp(a, "--max-tokens")) {
            ok = (v = sp_arg_value(argc, argv, &i)) &&
                 sp_arg_int(a, v, 1, 1 << 24, &o->max_tokens);
        } else if (!strcmp(a, "--pooling")) {
            ok = (v = sp_arg_value(argc, argv, &i)) && sp_arg_pooling(a, v, &o->pooling);
        } else if (!strcmp(a, "--threads")) {
            ok = (v = sp_arg_value(argc, argv, &i)) &&
                 sp_arg_int(a, v, 1, 4096, &o->threads);
        } else {
            return sp_arg_unknown("embed", a);
        }
        if (!ok) return 2;
    }
    if (!o->model) {
        fputs("spindle embed: missing -m MODEL\n", stderr);
        return 2;
    }
    return 0;
}

/* stdin's lines (without their line ends) as inputs; *buf owns them. */
static spindle_embed_input *read_lines(char **buf, int *n) {
    char **lines = sp_read_stdin_lines(false, buf, n);
    spindle_embed_input *in = lines ? calloc((size_t)(*n > 0 ? *n : 1), sizeof *in) : NULL;
    for (int i = 0; in && i < *n; i++) in[i].text = lines[i];
    free(lines);
    return in;
}

/* --ids: each text becomes its ids (owned by in[i].tokens). */
static bool parse_id_lines(spindle_embed_input *in, int n) {
    for (int i = 0; i < n; i++) {
        int32_t *ids = NULL;
        int count = 0;
        if (!sp_arg_id_list("--ids", in[i].text, &ids, &count)) return false;
        in[i].tokens = ids;
        in[i].n_tokens = count;
    }
    return true;
}

static void print_rows(const float *v, int n, int width) {
    for (int i = 0; i < n; i++) {
        fputs("{\"embedding\": [", stdout);
        for (int j = 0; j < width; j++)
            printf("%s%.9g", j ? ", " : "", (double)v[(size_t)i * width + j]);
        fputs("]}\n", stdout);
    }
}

static int embed_all(const embed_opts *o, spindle_embedder *e,
                     const spindle_tokenizer *tok,
                     const spindle_embed_input *in, int n) {
    const int width = o->dimensions ? (int)o->dimensions
                                    : spindle_embedder_dim(e);
    float *out = malloc((size_t)(n ? n : 1) * (size_t)width * sizeof *out);
    if (!out) {
        fputs("spindle embed: out of memory\n", stderr);
        return 1;
    }
    spindle_embed_request r = {.inputs = in, .n_inputs = n, .tokenizer = tok,
                               .prompt = o->prompt,
                               .prompt_name = o->prompt_name,
                               .dimensions = (int)o->dimensions};
    spindle_error err = {0};
    int rc = 0;
    if (n && spindle_embed(e, &r, out, NULL, &err)) {
        fprintf(stderr, "spindle embed: %s\n", err.message);
        rc = 1;
    } else {
        print_rows(out, n, width);
    }
    free(out);
    return rc;
}

int sp_cmd_embed(int argc, char **argv) {
    embed_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    spindle_error err = {0};
    spindle_load_options lo = {.n_threads = 1};
    spindle_model *m = NULL;
    spindle_tokenizer *tok = NULL;
    spindle_embedder *e = NULL;
    spindle_embedder_options eo = {.n_threads = (int)o.threads,
                                   .max_tokens = (int)o.max_tokens,
                                   .pooling = o.pooling};
    if (spindle_model_load(o.model, &lo, &m, &err) ||
        (!o.ids && spindle_tokenizer_load(spindle_model_dir(m), &tok, &err)) ||
        spindle_embedder_new(m, &eo, &e, &err)) {
        fprintf(stderr, "spindle embed: %s\n", err.message);
        rc = 1;
    }
    char *buf = NULL;
    spindle_embed_input one = {.text = o.text}, *in = &one;
    int n = 1;
    if (!rc && !o.text && !(in = read_lines(&buf, &n))) {
        fputs("spindle embed: cannot read stdin\n", stderr);
        rc = 1;
    }
    if (!rc && o.ids && !parse_id_lines(in, n)) rc = 2;
    if (!rc) rc = embed_all(&o, e, tok, in, n);
    for (int i = 0; o.ids && i < n; i++) free((void *)in[i].tokens);
    if (in != &one) free(in);
    free(buf);
    spindle_embedder_free(e);
    spindle_tokenizer_free(tok);
    spindle_model_free(m);
    return rc;
}
