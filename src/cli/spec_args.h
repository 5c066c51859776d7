/* The speculative-decoding options that `spindle run` and `spindle chat`
 * share (--spec, --draft-model, --num-draft-tokens, --ngram-max,
 * --ngram-min), the draft model's loading and checks, and the statistics
 * object of `run --json`. */
#ifndef SP_CLI_SPEC_ARGS_H
#define SP_CLI_SPEC_ARGS_H

#include <cjson/cJSON.h>

#include "spindle.h"

#define SP_ARG_SPEC_HELP \
    "  --spec ngram|draft|mtp  lossless speculative decoding: prompt lookup,\n" \
    "                          a draft model, or the model's own MTP head\n" \
    "                          (mtp.* weights; default: off)\n" \
    "  --draft-model PATH      the draft model (same tokenizer) for --spec draft;\n" \
    "                          with --spec mtp, an MTP companion directory\n" \
    "  --mtp DIR               --spec mtp with the companion head in DIR\n" \
    "                          (model_type qwen3_5_mtp; K: its block_size)\n" \
    "  --num-draft-tokens K    draft tokens per round at most (default 10)\n" \
    "  --ngram-max N, --ngram-min N  k-gram lengths prompt lookup tries (3, 1)\n" \
    "  --spec-fixed-k          always draft K tokens (no adaptive control)\n"

typedef struct sp_spec_args {
    spindle_spec_params spec;
    const char *draft_path;
} sp_spec_args;

/* argv[*i] as one of the options above: 1 consumed (with its value, *i
 * advanced), 0 not one of them, -1 a bad value (one line said why). */
int sp_arg_spec(int argc, char **argv, int *i, sp_spec_args *o);
/* After the target is loaded: --spec draft loads the draft model into
 * *draft (the caller frees it after the target's last generation) and
 * points o->spec.draft_model at it; --spec mtp with a directory (--mtp
 * DIR, --draft-model DIR) loads the companion head into o->spec.mtp_head
 * (the caller frees it with spindle_mtp_head_free). A vocabulary size that differs is a
 * warning on stderr; a tokenizer that encodes a probe text differently (or
 * exists for only one of the two models) is an error. */
spindle_status sp_spec_args_load(sp_spec_args *o, spindle_model *target,
                                 const spindle_load_options *lo,
                                 spindle_model **draft, spindle_error *err);
/* The "spec" statistics object of run --json: drafted, accepted,
 * acceptance_rate, acceptance_by_position, tokens_per_target_forward. */
void sp_spec_stats_json(cJSON *parent, spindle_spec_mode mode,
                        const spindle_spec_stats *s);

#endif
