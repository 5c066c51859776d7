/* The `spindle` subcommands. Each takes the arguments after its own name
 * (argv[0] is the subcommand) and returns the process exit status. */
#ifndef SP_CLI_COMMANDS_H
#define SP_CLI_COMMANDS_H

int sp_cmd_run(int argc, char **argv);
int sp_cmd_info(int argc, char **argv);
int sp_cmd_bench(int argc, char **argv);
int sp_cmd_batched_bench(int argc, char **argv);
int sp_cmd_chat(int argc, char **argv);
int sp_cmd_tokenize(int argc, char **argv);
int sp_cmd_detokenize(int argc, char **argv);
int sp_cmd_template(int argc, char **argv);
int sp_cmd_convert(int argc, char **argv);
int sp_cmd_serve(int argc, char **argv);
int sp_cmd_embed(int argc, char **argv);
int sp_cmd_rerank(int argc, char **argv);
int sp_cmd_perplexity(int argc, char **argv);
int sp_cmd_pull(int argc, char **argv);

/* Every `-m` / `--model` value "hf://ORG/NAME[:QUANT]" (or "NAME=hf://...")
 * of a command's arguments (argv[0] is the command) is pulled into the HF
 * cache and replaced by the local path; a `--offline` argument is taken out
 * and makes the pull use only the cache; `serve` without --alias names its
 * one Hub model ORG/NAME[:QUANT]. *argv may be replaced by a new array that
 * lives as long as the process. Returns 0, or the exit status after
 * printing the error. */
int sp_cli_resolve_hub_models(int *argc, char ***argv);

#include "spindle.h"

/* The log handler every command installs (spindle_set_log): one line on
 * stderr, led by `user` (the program as the user typed it: "spindle",
 * "spindle serve") and "warning: " for warnings; debug messages are not
 * shown. */
void sp_cli_log(spindle_log_level level, const char *message, void *user);

#endif
