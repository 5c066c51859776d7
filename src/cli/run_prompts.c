/* spindle run --prompts FILE --parallel N: every prompt of FILE becomes a
 * request of one step engine with N slots (the rest wait in its queue), so
 * each step is one batched forward over up to N sequences; the results are
 * kept per prompt and printed in input order once all have finished. A
 * greedy request gives the tokens it gives alone (the engine's batched
 * forward is row-independent), which tests/cli/test_run_prompts.py checks
 * against solo runs. */
#include "cli/run_prompts.h"
#include "cli/prompt.h"
#include "cli/prompt_file.h"
#include "cli/spec_args.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_finish(spindle_request_id id, const spindle_request_result *res,
                      void *user) {
    (void)id;
    sp_prompt_job *j = user;
    j->finished = true;
    j->reason = res->stop_reason;
    j->status = res->status;
    j->stats = res->stats;
    snprintf(j->error, sizeof j->error, "%s", res->error ? res->error : "");
    j->tokens = malloc(((size_t)res->n_tokens + 1) * sizeof *j->tokens);
    if (!j->tokens) {
        j->status = SPINDLE_ERR_MEMORY;
        snprintf(j->error, sizeof j->error, "out of memory");
        return;
    }
    memcpy(j->tokens, res->tokens, (size_t)res->n_tokens * sizeof *j->tokens);
    j->n_tokens = res->n_tokens;
}

/* The detokenized text of a job's tokens, as `spindle run` streams it. */
static char *job_text(const spindle_tokenizer *tok, const sp_prompt_job *j) {
    sp_text_stream s;
    spindle_error err;
    if (sp_text_stream_init(&s, tok, NULL, &err)) return NULL;
    for (int i = 0; i < j->n_tokens; i++) sp_text_stream_token(j->tokens[i], &s);
    sp_text_stream_finish(&s);
    char *text = s.text ? s.text : calloc(1, 1);
    s.text = NULL;
    sp_text_stream_free(&s);
    return text;
}

static void print_job_json(const sp_prompt_job *j, int index, const char *text) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "index", index);
    cJSON_AddNumberToObject(root, "line", j->line);
    cJSON *p = cJSON_AddArrayToObject(root, "prompt_tokens");
    for (int i = 0; i < j->n_prompt; i++)
        cJSON_AddItemToArray(p, cJSON_CreateNumber(j->prompt[i]));
    cJSON *t = cJSON_AddArrayToObject(root, "tokens");
    for (int i = 0; i < j->n_tokens; i++)
        cJSON_AddItemToArray(t, cJSON_CreateNumber(j->tokens[i]));
    if (text) cJSON_AddStringToObject(root, "text", text);
    if (j->status) cJSON_AddStringToObject(root, "error", j->error);
    const spindle_request_stats *s = &j->stats;
    cJSON *st = cJSON_AddObjectToObject(root, "stats");
    cJSON_AddNumberToObject(st, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(st, "cached_tokens", s->cached_tokens);
    cJSON_AddNumberToObject(st, "generated_tokens", s->generated_tokens);
    cJSON_AddNumberToObject(st, "queue_seconds", s->queue_seconds);
    cJSON_AddNumberToObject(st, "ttft_seconds", s->ttft_seconds);
    cJSON_AddNumberToObject(st, "prefill_seconds", s->prefill_seconds);
    cJSON_AddNumberToObject(st, "decode_seconds", s->decode_seconds);
    cJSON_AddNumberToObject(st, "prefill_tps", s->prefill_tps);
    cJSON_AddNumberToObject(st, "decode_tps", s->decode_tps);
    cJSON_AddNumberToObject(st, "total_seconds", s->total_seconds);
    cJSON_AddStringToObject(st, "stop_reason",
                            spindle_stop_reason_name(j->reason));
    if (j->gen.spec.mode != SPINDLE_SPEC_NONE)
        sp_spec_stats_json(st, j->gen.spec.mode, &s->spec);
    char *json = cJSON_PrintUnformatted(root);
    if (json) puts(json);
    free(json);
    cJSON_Delete(root);
}

static void print_jobs(const sp_prompt_set *set, const spindle_tokenizer *tok,
                       bool json) {
    for (int i = 0; i < set->n; i++) {
        const sp_prompt_job *j = &set->jobs[i];
        char *text = tok ? job_text(tok, j) : NULL;
        if (json) {
            print_job_json(j, i, text);
        } else if (j->status) {
            fprintf(stderr, "spindle: prompt %d (line %d): %s\n", i, j->line,
                    j->error);
        } else if (text) {
            printf("%s\n", text);
        } else {
            for (int k = 0; k < j->n_tokens; k++) printf("%d ", j->tokens[k]);
            printf("\n");
        }
        free(text);
    }
    fflush(stdout);
}

spindle_status sp_run_prompts(spindle_model *model, const spindle_tokenizer *tok,
                              const spindle_gen_params *base,
                              const sp_run_prompts_args *a,
                              spindle_error *err) {
    sp_prompt_set set = {0};
    spindle_status st = sp_prompt_set_read(a, tok, base, &set, err);
    spindle_engine_options eo = spindle_engine_defaults();
    eo.max_seqs = a->parallel;
    eo.max_batch_tokens = base->prefill_chunk > a->parallel ? base->prefill_chunk
                                                           : a->parallel;
    spindle_engine *engine = NULL;
    if (!st) st = spindle_engine_new(model, &eo, &engine, err);
    for (int i = 0; i < set.n && !st; i++) {
        sp_prompt_job *j = &set.jobs[i];
        spindle_request rq = {.prompt = j->prompt, .n_prompt = j->n_prompt,
                              .params = &j->gen, .on_finish = on_finish,
                              .user = j};
        st = spindle_engine_submit(engine, &rq, NULL, err);
        if (st) {   /* name the line; earlier submits end in the free */
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err->message);
            sp_prompts_fail(err, st, "%s line %d: %s", a->path, j->line, why);
        }
    }
    for (int active = !st; active && !st;)
        st = spindle_engine_step(engine, &active, err);
    spindle_engine_free(engine);
    if (!st) print_jobs(&set, tok, a->json);
    for (int i = 0; i < set.n && !st; i++)
        if (set.jobs[i].status) st = set.jobs[i].status;
    if (st && !err->message[0]) sp_prompts_fail(err, st, "a prompt failed");
    sp_prompt_set_free(&set);
    return st;
}
