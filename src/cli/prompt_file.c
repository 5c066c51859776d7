/* The prompt file of `spindle run --prompts` (prompt_file.h).
 * Pure, fuzzed by tests/fuzz/fuzz_prompt_file.c. */
#include "cli/prompt_file.h"
#include "cli/prompt.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

spindle_status sp_prompts_fail(spindle_error *err, spindle_status st,
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

void sp_prompt_set_free(sp_prompt_set *s) {
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
                                  sp_prompt_job *j, spindle_error *err) {
    if (!tok)
        return sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT,
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
    if (!messages && !owned) return sp_prompts_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = sp_chat_prompt_ids(tok, messages ? messages : owned,
                                           a->chat_kwargs, &j->prompt, &j->n_prompt, err);
    free(owned);
    return st;
}

static spindle_status token_array(const cJSON *arr, const char *path,
                                  sp_prompt_job *j, spindle_error *err) {
    int n = cJSON_GetArraySize(arr);
    j->prompt = malloc(((size_t)n + 1) * sizeof *j->prompt);
    if (!j->prompt) return sp_prompts_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 ||
            it->valuedouble > INT32_MAX || it->valuedouble != (int32_t)it->valuedouble)
            return sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT,
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
                                  sp_prompt_job *j, spindle_error *err) {
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
            return sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT,
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
                                   const sp_run_prompts_args *a, sp_prompt_job *j,
                                   spindle_error *err) {
    cJSON *obj = cJSON_Parse(text);
    if (!cJSON_IsObject(obj)) {
        cJSON_Delete(obj);
        return sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT, "%s line %d: not a JSON object",
                    a->path, j->line);
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(obj, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(obj, "messages");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(obj, "prompt_tokens");
    spindle_status st = line_params(obj, a->path, j, err);
    if (st) {
    } else if ((prompt != NULL) + (msgs != NULL) + (ids != NULL) != 1) {
        st = sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT,
                  "%s line %d: give exactly one of \"prompt\", \"messages\" "
                  "and \"prompt_tokens\"", a->path, j->line);
    } else if (prompt) {
        st = cJSON_IsString(prompt)
                 ? encode_text(tok, a, prompt->valuestring, NULL, j, err)
                 : sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT,
                        "%s line %d: \"prompt\" must be a string", a->path,
                        j->line);
    } else if (msgs) {
        char *m = cJSON_IsArray(msgs) ? cJSON_PrintUnformatted(msgs) : NULL;
        st = m ? encode_text(tok, a, NULL, m, j, err)
               : sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT,
                      "%s line %d: \"messages\" must be an array", a->path,
                      j->line);
        free(m);
    } else {
        st = cJSON_IsArray(ids) ? token_array(ids, a->path, j, err)
                                : sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT,
                                       "%s line %d: \"prompt_tokens\" must be "
                                       "an array", a->path, j->line);
    }
    cJSON_Delete(obj);
    return st;
}

static spindle_status add_line(sp_prompt_set *set, char *text, int line,
                               const spindle_tokenizer *tok,
                               const spindle_gen_params *base,
                               const sp_run_prompts_args *a,
                               spindle_error *err) {
    if (set->n == set->cap) {
        int cap = set->cap ? 2 * set->cap : 16;
        sp_prompt_job *jobs = realloc(set->jobs, (size_t)cap * sizeof *jobs);
        if (!jobs) return sp_prompts_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        set->jobs = jobs;
        set->cap = cap;
    }
    sp_prompt_job *j = &set->jobs[set->n++];
    memset(j, 0, sizeof *j);
    j->line = line;
    j->gen = *base;
    spindle_status st = text[0] == '{'
                            ? parse_object(text, tok, a, j, err)
                            : encode_text(tok, a, text, NULL, j, err);
    if (!st && j->n_prompt == 0)
        st = sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT, "%s line %d: an empty prompt",
                  a->path, line);
    return st;
}

/* Every non-blank line; a trailing '\r' is dropped. */
spindle_status sp_prompt_set_read(const sp_run_prompts_args *a,
                                  const spindle_tokenizer *tok,
                                  const spindle_gen_params *base,
                                  sp_prompt_set *set, spindle_error *err) {
    FILE *f = strcmp(a->path, "-") ? fopen(a->path, "rb") : stdin;
    if (!f) return sp_prompts_fail(err, SPINDLE_ERR_IO, "%s: cannot open", a->path);
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    spindle_status st = SPINDLE_OK;
    for (int line = 1; !st && (len = getline(&buf, &cap, f)) >= 0; line++) {
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        if ((size_t)len != strlen(buf))
            st = sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT, "%s line %d: a NUL byte",
                      a->path, line);
        else if (buf[strspn(buf, " \t")] != '\0')
            st = add_line(set, buf, line, tok, base, a, err);
    }
    free(buf);
    if (f != stdin) fclose(f);
    if (!st && set->n == 0)
        st = sp_prompts_fail(err, SPINDLE_ERR_ARGUMENT, "%s: no prompts", a->path);
    return st;
}

