/* Small option-parsing helpers shared by the subcommands: strict number
 * parsing with one-line errors, so a typo never becomes a silent default. */
#ifndef SP_CLI_ARGS_H
#define SP_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "spindle.h"

/* -h or --help: every subcommand then prints its usage on stdout and
 * exits 0. */
bool sp_arg_is_help(const char *arg);
/* One line on stderr for an option `spindle cmd` does not know (or whose
 * value is missing), pointing at --help; returns the exit status, 2. */
int sp_arg_unknown(const char *cmd, const char *arg);
/* The value of option argv[*i] (advancing *i), or NULL with a message. */
const char *sp_arg_value(int argc, char **argv, int *i);
bool sp_arg_int(const char *opt, const char *s, long lo, long hi, long *out);
bool sp_arg_float(const char *opt, const char *s, double lo, double hi,
                  double *out);
bool sp_arg_u64(const char *opt, const char *s, uint64_t *out);
/* --kv-type NAME (run, bench and chat share it): "f32", "bf16" or "f16". */
#define SP_ARG_KV_TYPE_HELP \
    "  --kv-type f32|bf16|f16  KV cache element type (default f32: exact)\n" \
    "  --kv-budget BYTES       KV block pool size, suffix K/M/G (default: every\n" \
    "                          sequence run at once at --ctx tokens, at most 90%\n" \
    "                          of available memory)\n"
/* A positive byte count, optionally with a K, M or G (binary) suffix. */
bool sp_arg_bytes(const char *opt, const char *s, size_t *out);
bool sp_arg_kv_type(const char *opt, const char *s, spindle_kv_type *out);
/* --mmap (run, bench and chat): map the weight files instead of reading them
 * into huge-page memory (spindle_load_options.use_mmap). */
#define SP_ARG_MMAP_HELP \
    "  --mmap                  map the weight files (zero-copy) instead of\n" \
    "                          reading them into huge-page memory\n"
/* --prompt-cache-dir DIR and --prompt-cache-disk-bytes BYTES (run and
 * serve): the on-disk prompt cache (spindle_load_options). */
#define SP_ARG_PROMPT_CACHE_HELP \
    "  --prompt-cache-dir DIR  keep full 32-token KV blocks of prompts in DIR\n" \
    "                          (hybrid and sliding-window models: with the state\n" \
    "                          at block boundaries); a later process reads a\n" \
    "                          matching prefix back instead of prefilling it\n" \
    "  --prompt-cache-disk-bytes BYTES\n" \
    "                          the directory's budget, least recently used\n" \
    "                          files deleted first, suffix K/M/G (default 4G)\n"
/* Parse argv[*i] when it is one of those options (advancing *i): 1 parsed,
 * 0 not one of them, -1 a usage error (printed). */
int sp_arg_prompt_cache(int argc, char **argv, int *i,
                        spindle_load_options *lo);
/* The sampler's options (run and chat share them): --temp, --top-k,
 * --top-p, --min-p, --xtc-probability, --xtc-threshold. Parses argv[*i]
 * when it is one of them (advancing *i): 1 parsed, 0 not one of them, -1 a
 * usage error (printed). --seed is the caller's (run records whether it
 * was given). */
int sp_arg_sampler(int argc, char **argv, int *i, spindle_sampler_params *sp);

/* --pooling mean|cls|last (embed and serve): the embedder's pooling in
 * place of the model's (llama.cpp's names; its "none", per-token rows, is
 * refused: an embedding here is one row per input). */
#define SP_ARG_POOLING_HELP \
    "  --pooling mean|cls|last  pool the token rows so (default: the model's;\n" \
    "                          a GGUF that records none needs this)\n"
bool sp_arg_pooling(const char *opt, const char *s, spindle_pooling *out);

/* "1,2,3" → malloc'd ids. */
bool sp_arg_id_list(const char *opt, const char *s, int32_t **ids, int *n);
/* "1,2,4" → malloc'd counts, each in [1, hi]. */
bool sp_arg_count_list(const char *opt, const char *s, long hi, int32_t **v,
                       int *n);

/* Standard input split into lines (a trailing '\r' dropped; with
 * skip_empty, empty lines left out): a malloc'd array of *n pointers into
 * *buf, which owns the text; the caller frees both. NULL when stdin cannot
 * be read or memory runs out (*buf is then freed and NULL). */
char **sp_read_stdin_lines(bool skip_empty, char **buf, int *n);

#endif
