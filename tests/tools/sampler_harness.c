/* sampler_harness — drives the sampler and logits processors for
 * tests/unit_py/test_sampler_vs_mlx.py. Reads one JSON request per line on
 * stdin and prints one JSON reply per line. -inf travels as null both ways.
 *
 * Request: {"op": OP, "logits": [...], ...params}
 *   log_softmax            -> {"values", "lse"}
 *   top_p | min_p | top_k | xtc (logits are log-probabilities)
 *                          -> {"values"}
 *   processors (history, logit_bias [[id, bias]...], *_penalty,
 *               *_context_size) -> {"values"}
 *   chain   (processors, then log-softmax, then the sampler's filters)
 *                          -> {"values"}
 *   sample  (processors, then n_samples draws from copies of the logits
 *            with one sampler) -> {"tokens", "logprobs"}
 * Errors reply {"error": message}. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "generation/sampler.h"

static double num(const cJSON *req, const char *key, double fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

/* A JSON array of numbers (null: -inf) as floats; NULL if absent. */
static float *float_array(const cJSON *req, const char *key, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(req, key);
    *n = cJSON_GetArraySize(a);
    float *out = malloc(((size_t)*n + 1) * sizeof *out);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) out[i++] = cJSON_IsNumber(e)
                                            ? (float)e->valuedouble
                                            : -INFINITY;
    return out;
}

static int32_t *int_array(const cJSON *req, const char *key, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(req, key);
    *n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
    int32_t *out = malloc(((size_t)*n + 1) * sizeof *out);
    int i = 0;
    const cJSON *e;
    if (*n) cJSON_ArrayForEach(e, a) out[i++] = (int32_t)e->valuedouble;
    return out;
}

static cJSON *values_json(const float *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i])
                                               : cJSON_CreateNull());
    return a;
}

static spindle_status make_processors(const cJSON *req,
                                      sp_logits_processors **out,
                                      spindle_error *err) {
    sp_logits_params lp = sp_logits_params_defaults();
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(req, "logit_bias");
    int nb = cJSON_IsArray(bias) ? cJSON_GetArraySize(bias) : 0;
    sp_logit_bias *b = calloc((size_t)nb + 1, sizeof *b);
    for (int i = 0; i < nb; i++) {
        const cJSON *pair = cJSON_GetArrayItem(bias, i);
        b[i].token = (int32_t)cJSON_GetArrayItem(pair, 0)->valuedouble;
        b[i].bias = (float)cJSON_GetArrayItem(pair, 1)->valuedouble;
    }
    lp.logit_bias = b;
    lp.n_logit_bias = nb;
    lp.repetition_penalty = (float)num(req, "repetition_penalty", 0);
    lp.repetition_context_size = (int)num(req, "repetition_context_size", 20);
    lp.presence_penalty = (float)num(req, "presence_penalty", 0);
    lp.presence_context_size = (int)num(req, "presence_context_size", 20);
    lp.frequency_penalty = (float)num(req, "frequency_penalty", 0);
    lp.frequency_context_size = (int)num(req, "frequency_context_size", 20);
    spindle_status st = sp_logits_processors_new(&lp, out, err);
    free(b);
    return st;
}

static spindle_status make_sampler(const cJSON *req, spindle_sampler **out,
                                   spindle_error *err) {
    spindle_sampler_params o = spindle_sampler_defaults();
    o.temperature = (float)num(req, "temperature", 0);
    o.top_k = (int)num(req, "top_k", 0);
    o.top_p = (float)num(req, "top_p", 0);
    o.min_p = (float)num(req, "min_p", 0);
    o.min_tokens_to_keep = (int)num(req, "min_tokens_to_keep", 1);
    o.seed = (uint64_t)num(req, "seed", 0);
    o.xtc_probability = (float)num(req, "xtc_probability", 0);
    o.xtc_threshold = (float)num(req, "xtc_threshold", 0.1);
    int ns;
    int32_t *special = int_array(req, "xtc_special", &ns);
    o.xtc_special_tokens = special;
    o.n_xtc_special_tokens = ns;
    spindle_status st = spindle_sampler_new(&o, out, err);
    free(special);
    return st;
}

static cJSON *handle(const cJSON *req, spindle_error *err) {
    const cJSON *opj = cJSON_GetObjectItemCaseSensitive(req, "op");
    const char *op = cJSON_IsString(opj) ? opj->valuestring : "";
    int n, nh;
    float *x = float_array(req, "logits", &n);
    int32_t *hist = int_array(req, "history", &nh);
    float *scratch = malloc(((size_t)n + 1) * sizeof *scratch);
    cJSON *reply = cJSON_CreateObject();
    spindle_status st = SPINDLE_OK;
    sp_logits_processors *procs = NULL;
    spindle_sampler *sampler = NULL;

    if (n <= 0) {
        st = sp_fail(err, SPINDLE_ERR_ARGUMENT, "no logits");
    } else if (!strcmp(op, "log_softmax")) {
        float lse;
        st = sp_sample_log_softmax(x, n, &lse, err);
        if (!st) cJSON_AddNumberToObject(reply, "lse", lse);
    } else if (!strcmp(op, "top_p")) {
        sp_apply_top_p(x, n, (float)num(req, "top_p", 1), scratch);
    } else if (!strcmp(op, "min_p")) {
        sp_apply_min_p(x, n, (float)num(req, "min_p", 0),
                       (int)num(req, "min_tokens_to_keep", 1), scratch);
    } else if (!strcmp(op, "top_k")) {
        sp_apply_top_k(x, n, (int)num(req, "top_k", 0), scratch);
    } else if (!strcmp(op, "xtc")) {
        int ns;
        int32_t *special = int_array(req, "xtc_special", &ns);
        sp_apply_xtc(x, n, (float)num(req, "xtc_threshold", 0.1), special,
                     ns, scratch);
        free(special);
    } else if (!strcmp(op, "processors") || !strcmp(op, "chain") ||
               !strcmp(op, "sample")) {
        st = make_processors(req, &procs, err);
        if (!st) st = sp_logits_process(procs, hist, nh, x, n, err);
        if (!st && strcmp(op, "processors")) st = make_sampler(req, &sampler, err);
        if (!st && !strcmp(op, "chain")) {
            st = sp_sample_log_softmax(x, n, NULL, err);
            if (!st) st = sp_sampler_filter(sampler, x, n, err);
        } else if (!st && !strcmp(op, "sample")) {
            int draws = (int)num(req, "n_samples", 1);
            cJSON *toks = cJSON_AddArrayToObject(reply, "tokens");
            cJSON *lps = cJSON_AddArrayToObject(reply, "logprobs");
            for (int d = 0; d < draws && !st; d++) {
                memcpy(scratch, x, (size_t)n * sizeof *x);
                int32_t tok;
                float lp;
                st = spindle_sampler_sample(sampler, scratch, n, &tok, &lp,
                                            err);
                if (!st) {
                    cJSON_AddItemToArray(toks, cJSON_CreateNumber(tok));
                    cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp));
                }
            }
        }
    } else {
        st = sp_fail(err, SPINDLE_ERR_ARGUMENT, "unknown op '%s'", op);
    }
    if (!st && strcmp(op, "sample"))
        cJSON_AddItemToObject(reply, "values", values_json(x, n));
    if (st) {
        cJSON_Delete(reply);
        reply = cJSON_CreateObject();
        cJSON_AddStringToObject(reply, "error", err->message);
    }
    spindle_sampler_free(sampler);
    sp_logits_processors_free(procs);
    free(scratch);
    free(hist);
    free(x);
    return reply;
}

int main(void) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        spindle_error err = {0};
        cJSON *req = cJSON_Parse(line);
        cJSON *reply;
        if (!req) {
            reply = cJSON_CreateObject();
            cJSON_AddStringToObject(reply, "error", "request is not JSON");
        } else {
            reply = handle(req, &err);
        }
        char *text = cJSON_PrintUnformatted(reply);
        printf("%s\n", text);
        fflush(stdout);
        free(text);
        cJSON_Delete(reply);
        cJSON_Delete(req);
    }
    free(line);
    return 0;
}
