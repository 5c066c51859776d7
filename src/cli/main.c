/* spindle — command-line front end over libspindle. */
#include "cli/commands.h"
#include "spindle.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", sp_cmd_run, "generate tokens from a prompt"},
    {"info", sp_cmd_info, "print a model's configuration and weights"},
    {"chat", sp_cmd_chat, "chat interactively with streaming output"},
    {"tokenize", sp_cmd_tokenize, "text to token ids"},
    {"detokenize", sp_cmd_detokenize, "token ids to text"},
    {"embed", sp_cmd_embed, "sentence embeddings, one JSON line per input"},
    {"rerank", sp_cmd_rerank, "relevance scores of documents for a query"},
    {"template", sp_cmd_template, "render a chat template"},
    {"bench", sp_cmd_bench, "measure prefill and decode throughput"},
    {"batched-bench", sp_cmd_batched_bench,
     "aggregate throughput of parallel sequences (llama-batched-bench)"},
    {"perplexity", sp_cmd_perplexity,
     "perplexity and KL divergence over a text file (llama-perplexity)"},
    {"convert", sp_cmd_convert, "convert a GGUF file to a Hugging Face directory"},
    {"serve", sp_cmd_serve, "serve an OpenAI-compatible HTTP API"},
    {"pull", sp_cmd_pull, "download a model from the Hugging Face Hub into its cache"},
};

static void usage(FILE *out) {
    fprintf(out, "spindle %s — LLM inference on the CPU\n\n"
                 "usage: spindle <command> [options]\n\ncommands:\n",
            SPINDLE_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'spindle <command> --help' describes a command's options.\n\n"
                 "environment:\n"
                 "  SPINDLE_PRECISION=fast|high|exact  numerics of the matrix products\n"
                 "      (default, per weight format, the fastest mode whose KL divergence\n"
                 "      from exact math is no larger than llama.cpp's own: fast, which\n"
                 "      rounds activations as llama.cpp does, for GGUF and bf16 weights;\n"
                 "      high, within ~2^-21 of exact, for MLX affine weights. exact:\n"
                 "      f32 throughout. Setting the variable applies that mode to all)\n"
                 "  SPINDLE_SIMD=scalar|avx2|avxvnni|avx512 (AArch64: neon|dotprod|i8mm)\n"
                 "      caps the kernels' instruction set level\n");
}

void sp_cli_log(spindle_log_level level, const char *message, void *user) {
    if (level == SPINDLE_LOG_DEBUG) return;
    fprintf(stderr, "%s: %s%s\n", (const char *)user,
            level == SPINDLE_LOG_WARN ? "warning: " : "", message);
}

int main(int argc, char **argv) {
    spindle_set_log(sp_cli_log, "spindle");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    /* `spindle help CMD` is `spindle CMD --help`. */
    char help_flag[] = "--help";
    char *help_args[] = {argv[0], argc > 2 ? argv[2] : NULL, help_flag, NULL};
    if (!strcmp(argv[1], "help") && argc > 2) {
        argc = 3;
        argv = help_args;
    } else if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
               !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("spindle %s\n", SPINDLE_VERSION);
        return 0;
    }
    const char *env_error = spindle_environment_error();
    if (env_error) {
        fprintf(stderr, "spindle: %s\n", env_error);
        return 2;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        int sub_argc = argc - 1;
        char **sub_argv = argv + 1;
        if (commands[i].run != sp_cmd_pull &&
            sp_cli_resolve_hub_models(&sub_argc, &sub_argv))
            return 1;
        return commands[i].run(sub_argc, sub_argv);
    }
    fprintf(stderr, "spindle: unknown command '%s' (see 'spindle --help')\n",
            argv[1]);
    return 2;
}
