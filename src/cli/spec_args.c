/* The speculative-decoding options that run and chat share, parsed and
 * checked (spec_args.h). */
#include "cli/spec_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

int sp_arg_spec(int argc, char **argv, int *i, sp_spec_args *o) {
    const char *a = argv[*i], *v;
    long n;
    int *count = !strcmp(a, "--num-draft-tokens") ? &o->spec.num_draft_tokens
                 : !strcmp(a, "--ngram-max")      ? &o->spec.ngram_max
                 : !strcmp(a, "--ngram-min")      ? &o->spec.ngram_min
                                                  : NULL;
    if (!strcmp(a, "--spec-fixed-k")) {
        o->spec.fixed_k = true;
    } else if (!strcmp(a, "--spec")) {
        if (!(v = sp_arg_value(argc, argv, i))) return -1;
        if (!strcmp(v, "ngram")) o->spec.mode = SPINDLE_SPEC_NGRAM;
        else if (!strcmp(v, "draft")) o->spec.mode = SPINDLE_SPEC_DRAFT;
        else if (!strcmp(v, "mtp")) o->spec.mode = SPINDLE_SPEC_MTP;
        else if (!strcmp(v, "none")) o->spec.mode = SPINDLE_SPEC_NONE;
        else {
            fprintf(stderr, "spindle: --spec expects ngram, draft, mtp or none, got '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(a, "--draft-model")) {
        if (!(v = sp_arg_value(argc, argv, i))) return -1;
        o->draft_path = v;
    } else if (!strcmp(a, "--mtp")) {
        if (!(v = sp_arg_value(argc, argv, i))) return -1;
        o->spec.mode = SPINDLE_SPEC_MTP;
        o->draft_path = v;
    } else if (count) {
        long hi = count == &o->spec.num_draft_tokens ? SPINDLE_MAX_DRAFT_TOKENS : 8;
        if (!(v = sp_arg_value(argc, argv, i)) || !sp_arg_int(a, v, 1, hi, &n))
            return -1;
        *count = (int)n;
    } else {
        return 0;
    }
    return 1;
}

spindle_status sp_spec_args_load(sp_spec_args *o, spindle_model *target,
                                 const spindle_load_options *lo,
                                 spindle_model **draft, spindle_error *err) {
    *draft = NULL;
    if (o->spec.mode == SPINDLE_SPEC_MTP && o->draft_path)
        return spindle_mtp_head_load(target, o->draft_path, &o->spec.mtp_head, err);
    if (o->spec.mode == SPINDLE_SPEC_MTP && !spindle_model_has_mtp(target)) {
        snprintf(err->message, sizeof err->message,
                 "--spec mtp: %s has no multi-token-prediction head "
                 "(mtp.* weights; a companion directory: --mtp DIR)",
                 spindle_model_dir(target));
        return SPINDLE_ERR_UNSUPPORTED;
    }
    if (o->spec.mode != SPINDLE_SPEC_DRAFT) return SPINDLE_OK;
    if (!o->draft_path) {
        snprintf(err->message, sizeof err->message, "--spec draft needs --draft-model PATH");
        return SPINDLE_ERR_ARGUMENT;
    }
    spindle_status st = spindle_model_load(o->draft_path, lo, draft, err);
    if (!st) st = spindle_spec_check_draft(target, *draft, err);
    if (st) {
        spindle_model_free(*draft);
        *draft = NULL;
        return st;
    }
    int tv = spindle_model_vocab_size(target), dv = spindle_model_vocab_size(*draft);
    if (tv != dv)
        fprintf(stderr, "spindle: warning: the draft model's vocabulary (%d) "
                        "differs from the target's (%d)\n", dv, tv);
    o->spec.draft_model = *draft;
    return SPINDLE_OK;
}

void sp_spec_stats_json(cJSON *parent, spindle_spec_mode mode,
                        const spindle_spec_stats *s) {
    cJSON *o = cJSON_AddObjectToObject(parent, "spec");
    cJSON_AddStringToObject(o, "mode", spindle_spec_mode_name(mode));
    cJSON_AddNumberToObject(o, "drafted", (double)s->drafted);
    cJSON_AddNumberToObject(o, "accepted", (double)s->accepted);
    cJSON_AddNumberToObject(o, "acceptance_rate",
                            s->drafted ? (double)s->accepted / s->drafted : 0);
    cJSON *by = cJSON_AddArrayToObject(o, "acceptance_by_position");
    for (int j = 0; j < SPINDLE_MAX_DRAFT_TOKENS && s->drafted_at[j]; j++)
        cJSON_AddItemToArray(by, cJSON_CreateNumber(
            (double)s->accepted_at[j] / s->drafted_at[j]));
    cJSON_AddNumberToObject(o, "forced", (double)s->forced);
    cJSON_AddNumberToObject(o, "grammar_cut", (double)s->grammar_cut);
    cJSON_AddNumberToObject(o, "target_forwards", (double)s->target_forwards);
    cJSON_AddNumberToObject(o, "tokens_per_target_forward",
                            s->target_forwards ? (double)s->decode_tokens / s->target_forwards : 0);
}
