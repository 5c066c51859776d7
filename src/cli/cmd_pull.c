/* spindle pull ORG/NAME[:QUANT], and `-m hf://ORG/NAME[:QUANT]` for every
 * command: the model fetched into the Hugging Face cache (or found there
 * with --offline) and its local path put in the argument's place. */
#include "cli/commands.h"
#include "hub/hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char pull_usage[] =
    "usage: spindle pull [options] ORG/NAME[:QUANT]\n\n"
    "Downloads a model from the Hugging Face Hub into the Hugging Face cache\n"
    "($HF_HOME/hub, the folder huggingface_hub uses) and prints its local path.\n"
    "GGUF repositories: the file with the quant tag (default Q4_K_M, then Q8_0,\n"
    "then the first), all its split parts and the matching mmproj; other\n"
    "repositories (safetensors, MLX): every file. Other commands take the same\n"
    "reference as -m hf://ORG/NAME[:QUANT].\n\n"
    "options:\n"
    "  --offline    use only the cache (also HF_HUB_OFFLINE=1)\n"
    "  -q, --quiet  no progress bar\n\n"
    "environment: HF_TOKEN (bearer token), HF_ENDPOINT (the Hub's address),\n"
    "HF_HOME / HF_HUB_CACHE (the cache)\n";

/* A progress bar on a terminal, redrawn at most ten times a second. */
typedef struct progress_bar {
    const char *file;
    double last_draw;
} progress_bar;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void draw_progress(const char *file, uint64_t done, uint64_t total,
                          void *user) {
    progress_bar *bar = user;
    double t = now_seconds();
    bool finished = total && done >= total;
    if (bar->file == file && !finished && t - bar->last_draw < 0.1) return;
    bar->file = file;
    bar->last_draw = t;
    const int width = 30;
    int filled = total ? (int)((double)done / (double)total * width) : 0;
    if (filled > width) filled = width;
    fprintf(stderr, "\r%-40.40s [%.*s%*s] %8.1f / %.1f MB", file, filled,
            "##############################", width - filled, "",
            (double)done / 1e6, (double)total / 1e6);
    if (finished) fputc('\n', stderr);
    fflush(stderr);
}

static int pull(const char *ref, bool offline, bool quiet, char **path) {
    progress_bar bar = {NULL, 0};
    sp_hub_options opts = {0};
    opts.offline = offline;
    if (!quiet && isatty(STDERR_FILENO)) {
        opts.progress = draw_progress;
        opts.progress_user = &bar;
    }
    spindle_error err = {0};
    spindle_status st = sp_hub_pull(ref, &opts, path, &err);
    if (bar.file) fputc('\n', stderr);
    if (st != SPINDLE_OK) {
        fprintf(stderr, "spindle: %s\n", err.message);
        return 1;
    }
    return 0;
}

int sp_cmd_pull(int argc, char **argv) {
    const char *ref = NULL;
    bool offline = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(pull_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--offline")) {
            offline = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (a[0] == '-' || ref) {
            fprintf(stderr, "spindle pull: unexpected argument '%s' (see --help)\n", a);
            return 2;
        } else {
            ref = a;
        }
    }
    if (!ref) {
        fputs(pull_usage, stderr);
        return 2;
    }
    char *path = NULL;
    int rc = pull(ref, offline, quiet, &path);
    if (rc == 0) printf("%s\n", path);
    free(path);
    return rc;
}

/* The value of a model option that names the Hub: "hf://REF", or
 * "NAME=hf://REF" where a command takes named models. */
static const char *hub_ref_in(const char *value, size_t *name_len) {
    const char *at = strstr(value, "hf://");
    if (!at) return NULL;
    if (at != value && (at[-1] != '=' || memchr(value, '/', (size_t)(at - value))))
        return NULL;
    *name_len = (size_t)(at - value);
    return at;
}

static bool names_hub_model(int argc, char **argv) {
    size_t name_len;
    for (int i = 1; i + 1 < argc; i++)
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) &&
            hub_ref_in(argv[i + 1], &name_len))
            return true;
    return false;
}

static bool has_option(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return true;
    return false;
}

/* The rewritten argument vector and the model paths put into it (each
 * slot of hub_values NULL or a path of hub_argv): the command uses them
 * until it returns, so they are freed at exit. */
static char **hub_argv, **hub_values;
static int hub_n_values;

static void free_hub_argv(void) {
    for (int i = 0; i < hub_n_values; i++) free(hub_values[i]);
    free(hub_values);
    free(hub_argv);
}

int sp_cli_resolve_hub_models(int *argc, char ***argv_io) {
    char **given = *argv_io;
    if (!names_hub_model(*argc, given)) return 0;
    /* a copy with room for "--alias NAME" */
    char **argv = hub_argv = calloc((size_t)*argc + 3, sizeof *argv);
    hub_values = calloc((size_t)*argc, sizeof *hub_values);
    if (!argv || !hub_values || atexit(free_hub_argv)) {
        free(argv);
        free(hub_values);
        hub_argv = hub_values = NULL;
        fprintf(stderr, "spindle: out of memory\n");
        return 1;
    }
    bool offline = false;
    int kept = 0;
    for (int i = 0; i < *argc; i++) {
        if (i > 0 && !strcmp(given[i], "--offline")) offline = true;
        else argv[kept++] = given[i];
    }
    const char *alias = NULL;
    int hub_models = 0;
    for (int i = 1; i + 1 < kept; i++) {
        if (strcmp(argv[i], "-m") && strcmp(argv[i], "--model")) continue;
        size_t name_len = 0;
        const char *ref = hub_ref_in(argv[i + 1], &name_len);
        if (!ref) continue;
        char *path = NULL;
        if (pull(ref, offline, false, &path)) return 1;
        char *value = malloc(name_len + strlen(path) + 1);
        if (!value) {
            free(path);
            fprintf(stderr, "spindle: out of memory\n");
            return 1;
        }
        memcpy(value, argv[i + 1], name_len);
        strcpy(value + name_len, path);
        free(path);
        hub_models++;
        if (name_len == 0) alias = ref + 5;
        argv[++i] = hub_values[hub_n_values++] = value;
    }
    /* The server names its model as given: ORG/NAME[:QUANT], as llama-server
     * names a -hf model, rather than the snapshot's path. */
    if (!strcmp(argv[0], "serve") && hub_models == 1 && alias &&
        !has_option(kept, argv, "--alias")) {
        argv[kept++] = "--alias";
        argv[kept++] = (char *)alias;
    }
    argv[kept] = NULL;
    *argc = kept;
    *argv_io = argv;
    return 0;
}
