/* spindle run --prompts FILE --parallel N: every prompt of FILE becomes a
 * request of one step engine with N slots (the rest wait in its queue), so
 * each step is one batched forward over up to N sequences; the results are
 * kept per prompt and printed in input order once all have finished. A
 * greedy request gives the tokens it gives alone (the engine's batched
 * forward is row-independent), which tests/cli/test_run_prompts.py checks
 * against solo runs. */
#include "cli/run_prompts.h"
#include "cli/prompt.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One line of the file and, once it ran, its result. */
typedef struct prompt_job {
    int line;
    int32_t *prompt;     /* spindle_free */
    int n_prompt;
    spindle_gen_params gen;
    /* the result (on_finish) */
    bool finished;
    spindle_stop_reason reason;
    spindle_status status;
    char error[512];
    int32_t *tokens;
    int n_tokens;
    spindle_request_stats stats;
} prompt_job;

typedef struct prompt_set {
    prompt_job *jobs;
    int n, cap;
} prompt_set;

static spindle_status fail(spindle_error *err, spindle_status st,
                           const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

static void set_free(prompt_set *s) {
    for (int i = 0; i < s->n; i++) {
        spindle_free(s->jobs[i].prompt);
        free(s->jobs[i].tokens);
    }
    free(s->jobs);
}

/* Text (optionally chat-wrapped) or a messages array to prompt ids. */
static spindle_status encode_text(const spindle_tokenizer *tok,
                                  const sp_run_prompts_args *a,
                                  const char *text, const char *messages,
                                  prompt_job *j, spindle_error *err) {
    if (!tok)
        return fail(err, SPINDLE_ERR_ARGUMENT,
                    "%s line %d: a text prompt needs the model's tokenizer",
                    a->path, j->line);
    if (!messages && !a->chat) {
        size_t n = 0;
        spindle_status st = spindle_tokenizer_encode(tok, text, strlen(text),
                                                     true, &j->prompt, &n, err);
        j->n_prompt = (int)n;
        return st;
    }
    char *owned = messages ? NULL : sp_single_turn_messages(a->system, text);
    if (!messages && !owned) return fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = sp_chat_prompt_ids(tok, messages ? messages : owned,
                                           NULL, &j->prompt, &j->n_prompt, err);
    free(owned);
    return st;
}

static spindle_status token_array(const cJSON *arr, const char *path,
                                  prompt_job *j, spindle_error *err) {
    int n = cJSON_GetArraySize(arr);
    j->prompt = malloc(((size_t)n + 1) * sizeof *j->prompt);
    if (!j->prompt) return fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 ||
            it->valuedouble > INT32_MAX || it->valuedouble != (int32_t)it->valuedouble)
            return fail(err, SPINDLE_ERR_ARGUMENT,
                        "%s line %d: prompt_tokens must hold token ids",
                        path, j->line);
        j->prompt[j->n_prompt++] = (int32_t)it->valuedouble;
    }
    return SPINDLE_OK;
}

/* A number field of a line, range-checked; absent leaves *out alone. */
static bool number_field(const cJSON *obj, const char *key, double lo,
                         double hi, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi)
        return false;
    *out = v->valuedouble;
    return true;
}

/* The per-line sampling fields, over the command line's values. */
static spindle_status line_params(const cJSON *obj, const char *path,
                                  prompt_job *j, spindle_error *err) {
    spindle_sampler_params *s = &j->gen.sampler;
    double max_tokens = j->gen.max_tokens, temp = s->temperature,
           top_k = s->top_k, top_p = s->top_p, min_p = s->min_p,
           seed = (double)s->seed;
    static const char *const names[] = {"max_tokens", "temperature", "top_k",
                                        "top_p", "min_p", "seed"};
    double *values[] = {&max_tokens, &temp, &top_k, &top_p, &min_p, &seed};
    const double hi[] = {1 << 24, 1e4, 1 << 24, 1, 1, 9007199254740992.0};
    for (int k = 0; k < 6; k++)
        if (!number_field(obj, names[k], 0, hi[k], values[k]))
            return fail(err, SPINDLE_ERR_ARGUMENT,
                        "%s line %d: \"%s\" must be a number in [0, %g]",
                        path, j->line, names[k], hi[k]);
    j->gen.max_tokens = (int)max_tokens;
    s->temperature = (float)temp;
    s->top_k = (int)top_k;
    s->top_p = (float)top_p;
    s->min_p = (float)min_p;
    s->seed = (uint64_t)seed;
    return SPINDLE_OK;
}

static spindle_status parse_object(const char *text, const spindle_tokenizer *tok,
                                   const sp_run_prompts_args *a, prompt_job *j,
                                   spindle_error *err) {
    cJSON *obj = cJSON_Parse(text);
    if (!cJSON_IsObject(obj)) {
        cJSON_Delete(obj);
        return fail(err, SPINDLE_ERR_ARGUMENT, "%s line %d: not a JSON object",
                    a->path, j->line);
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(obj, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(obj, "messages");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(obj, "prompt_tokens");
    spindle_status st = line_params(obj, a->path, j, err);
    if (st) {
    } else if ((prompt != NULL) + (msgs != NULL) + (ids != NULL) != 1) {
        st = fail(err, SPINDLE_ERR_ARGUMENT,
                  "%s line %d: give exactly one of \"prompt\", \"messages\" "
                  "and \"prompt_tokens\"", a->path, j->line);
    } else if (prompt) {
        st = cJSON_IsString(prompt)
                 ? encode_text(tok, a, prompt->valuestring, NULL, j, err)
                 : fail(err, SPINDLE_ERR_ARGUMENT,
                        "%s line %d: \"prompt\" must be a string", a->path,
                        j->line);
    } else if (msgs) {
        char *m = cJSON_IsArray(msgs) ? cJSON_PrintUnformatted(msgs) : NULL;
        st = m ? encode_text(tok, a, NULL, m, j, err)
               : fail(err, SPINDLE_ERR_ARGUMENT,
                      "%s line %d: \"messages\" must be an array", a->path,
                      j->line);
        free(m);
    } else {
        st = cJSON_IsArray(ids) ? token_array(ids, a->path, j, err)
                                : fail(err, SPINDLE_ERR_ARGUMENT,
                                       "%s line %d: \"prompt_tokens\" must be "
                                       "an array", a->path, j->line);
    }
    cJSON_Delete(obj);
    return st;
}

static spindle_status add_line(prompt_set *set, char *text, int line,
                               const spindle_tokenizer *tok,
                               const spindle_gen_params *base,
                               const sp_run_prompts_args *a,
                               spindle_error *err) {
    if (set->n == set->cap) {
        int cap = set->cap ? 2 * set->cap : 16;
        prompt_job *jobs = realloc(set->jobs, (size_t)cap * sizeof *jobs);
        if (!jobs) return fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        set->jobs = jobs;
        set->cap = cap;
    }
    prompt_job *j = &set->jobs[set->n++];
    memset(j, 0, sizeof *j);
    j->line = line;
    j->gen = *base;
    spindle_status st = text[0] == '{'
                            ? parse_object(text, tok, a, j, err)
                            : encode_text(tok, a, text, NULL, j, err);
    if (!st && j->n_prompt == 0)
        st = fail(err, SPINDLE_ERR_ARGUMENT, "%s line %d: an empty prompt",
                  a->path, line);
    return st;
}

/* Every non-blank line; a trailing '\r' is dropped. */
static spindle_status read_prompts(const sp_run_prompts_args *a,
                                   const spindle_tokenizer *tok,
                                   const spindle_gen_params *base,
                                   prompt_set *set, spindle_error *err) {
    FILE *f = strcmp(a->path, "-") ? fopen(a->path, "rb") : stdin;
    if (!f) return fail(err, SPINDLE_ERR_IO, "%s: cannot open", a->path);
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    spindle_status st = SPINDLE_OK;
    for (int line = 1; !st && (len = getline(&buf, &cap, f)) >= 0; line++) {
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        if ((size_t)len != strlen(buf))
            st = fail(err, SPINDLE_ERR_ARGUMENT, "%s line %d: a NUL byte",
                      a->path, line);
        else if (buf[strspn(buf, " \t")] != '\0')
            st = add_line(set, buf, line, tok, base, a, err);
    }
    free(buf);
    if (f != stdin) fclose(f);
    if (!st && set->n == 0)
        st = fail(err, SPINDLE_ERR_ARGUMENT, "%s: no prompts", a->path);
    return st;
}

static void on_finish(spindle_request_id id, const spindle_request_result *res,
                      void *user) {
    (void)id;
    prompt_job *j = user;
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
static char *job_text(const spindle_tokenizer *tok, const prompt_job *j) {
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

static void print_job_json(const prompt_job *j, int index, const char *text) {
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
    char *json = cJSON_PrintUnformatted(root);
    if (json) puts(json);
    free(json);
    cJSON_Delete(root);
}

static void print_jobs(const prompt_set *set, const spindle_tokenizer *tok,
                       bool json) {
    for (int i = 0; i < set->n; i++) {
        const prompt_job *j = &set->jobs[i];
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
    prompt_set set = {0};
    spindle_status st = read_prompts(a, tok, base, &set, err);
    spindle_engine_options eo = spindle_engine_defaults();
    eo.max_seqs = a->parallel;
    eo.max_batch_tokens = base->prefill_chunk > a->parallel ? base->prefill_chunk
                                                           : a->parallel;
    spindle_engine *engine = NULL;
    if (!st) st = spindle_engine_new(model, &eo, &engine, err);
    for (int i = 0; i < set.n && !st; i++) {
        prompt_job *j = &set.jobs[i];
        spindle_request rq = {.prompt = j->prompt, .n_prompt = j->n_prompt,
                              .params = &j->gen, .on_finish = on_finish,
                              .user = j};
        st = spindle_engine_submit(engine, &rq, NULL, err);
        if (st) {   /* name the line; earlier submits end in the free */
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err->message);
            fail(err, st, "%s line %d: %s", a->path, j->line, why);
        }
    }
    for (int active = !st; active && !st;)
        st = spindle_engine_step(engine, &active, err);
    spindle_engine_free(engine);
    if (!st) print_jobs(&set, tok, a->json);
    for (int i = 0; i < set.n && !st; i++)
        if (set.jobs[i].status) st = set.jobs[i].status;
    if (st && !err->message[0]) fail(err, st, "a prompt failed");
    set_free(&set);
    return st;
}
