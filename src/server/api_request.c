/* Request bodies -> validated structs (api_request.h): the typed field
 * readers, the sampling fields shared by both generation routes, and the
 * routes' own fields. The chat messages are normalized in api_messages.c.
 * Pure functions, fuzzed by tests/fuzz/fuzz_server_request.c. */
#include "server/api_request.h"
#include "server/api_json.h"
#include "server/api_grammar.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sp_api_fail(sp_api_error *err, int http_status, const char *type,
                 const char *param, const char *code, const char *fmt, ...) {
    err->http_status = http_status;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    snprintf(err->code, sizeof err->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

bool sp_api_bad(sp_api_error *err, const char *param, const char *fmt, ...) {
    err->http_status = 400;
    err->type = "invalid_request_error";
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    err->code[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

void sp_api_error_from_status(sp_api_error *e, spindle_status st, const char *param,
                              const char *message) {
    const char *msg = message && message[0] ? message : spindle_status_name(st);
    switch (st) {
    case SPINDLE_ERR_MEMORY:
        sp_api_fail(e, 503, "server_error", NULL, NULL, "%s", msg);
        break;
    case SPINDLE_ERR_ARGUMENT:
    case SPINDLE_ERR_FORMAT:
    case SPINDLE_ERR_TEMPLATE:
    case SPINDLE_ERR_LIMIT:
    case SPINDLE_ERR_UNSUPPORTED:
        sp_api_bad(e, param, "%s", msg);
        break;
    default:
        sp_api_fail(e, 500, "server_error", NULL, NULL, "%s", msg);
    }
}

/* ------------------------------------------------------- typed field reads
 * Each returns false (with err) for a present field of the wrong type or
 * out of range, and leaves *out alone when the field is absent or null. */

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool read_bool(const cJSON *obj, const char *key, bool *out,
                      sp_api_error *err) {
    const cJSON *v = field(obj, key);
    if (!v) return true;
    if (!cJSON_IsBool(v)) return sp_api_bad(err, key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return true;
}

bool sp_api_read_long(const cJSON *v, const char *param, long lo, long hi,
                      long *out, sp_api_error *err) {
    if (!cJSON_IsNumber(v))
        return sp_api_bad(err, param, "'%s' must be an integer", param);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return sp_api_bad(err, param, "'%s' must be an integer", param);
    if (d < (double)lo || d > (double)hi)
        return sp_api_bad(err, param, "'%s' must be in [%ld, %ld], got %.17g",
                          param, lo, hi, d);
    *out = (long)d;
    return true;
}

static bool read_int(const cJSON *obj, const char *key, long lo, long hi,
                     int *out, sp_api_error *err) {
    const cJSON *v = field(obj, key);
    long x = 0;
    if (!v) return true;
    if (!sp_api_read_long(v, key, lo, hi, &x, err)) return false;
    *out = (int)x;
    return true;
}

static bool read_float(const cJSON *obj, const char *key, double lo, double hi,
                       float *out, sp_api_error *err) {
    const cJSON *v = field(obj, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return sp_api_bad(err, key, "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return sp_api_bad(err, key, "'%s' must be in [%g, %g], got %.17g", key,
                          lo, hi, v->valuedouble);
    *out = (float)v->valuedouble;
    return true;
}

static bool dup_text(const cJSON *v, char **out, sp_api_error *err) {
    if (!(*out = strdup(v->valuestring)))
        return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    return true;
}

cJSON *sp_api_parse_object(const char *body, size_t len, sp_api_error *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        /* cJSON points `end` at the failure (its global error pointer is
         * shared between threads). */
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : len;
        sp_api_bad(err, NULL, "request body is not valid JSON (at byte %zu)", at);
        return NULL;
    }
    while (end && end < body + len && strchr(" \t\r\n", *end) && *end) end++;
    if (end && end < body + len) {
        cJSON_Delete(root);
        sp_api_bad(err, NULL, "request body has bytes after the JSON value (at byte %zu)",
                   (size_t)(end - body));
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        sp_api_bad(err, NULL, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* --------------------------------------------------------- shared fields */

bool sp_api_check_model(const cJSON *root, const sp_api_limits *limits,
                        const cJSON **model, sp_api_error *err) {
    const cJSON *v = *model = field(root, "model");
    if (!v) return true;
    if (!cJSON_IsString(v)) return sp_api_bad(err, "model", "'model' must be a string");
    bool known = limits->n_model_names == 0;
    for (int i = 0; i < limits->n_model_names && !known; i++)
        known = !strcmp(v->valuestring, limits->model_names[i]);
    if (!known)
        return sp_api_fail(err, 404, "invalid_request_error", "model", "model_not_found",
                           "The model '%.200s' does not exist (this server serves '%.150s')",
                           v->valuestring, limits->model_names[0]);
    return true;
}

static bool read_model(const cJSON *root, const sp_api_limits *limits,
                       sp_api_request *r, sp_api_error *err) {
    const cJSON *v;
    if (!sp_api_check_model(root, limits, &v, err)) return false;
    return !v || dup_text(v, &r->model, err);
}

static bool read_stop(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    const cJSON *v = field(root, "stop");
    if (!v) return true;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return true;
        r->n_stop = 1;
        return dup_text(v, &r->stop[0], err);
    }
    if (!cJSON_IsArray(v))
        return sp_api_bad(err, "stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(v) > SP_API_MAX_STOP)
        return sp_api_bad(err, "stop", "'stop' takes at most %d strings", SP_API_MAX_STOP);
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s))
            return sp_api_bad(err, "stop", "'stop' must be a string or an array of strings");
        if (!s->valuestring[0]) continue;
        if (!dup_text(s, &r->stop[r->n_stop], err)) return false;
        r->n_stop++;
    }
    return true;
}

/* {"token id": bias}: ids as decimal strings, biases in [-100, 100]. */
static bool read_logit_bias(const cJSON *root, const sp_api_limits *limits,
                            sp_api_request *r, sp_api_error *err) {
    const cJSON *v = field(root, "logit_bias");
    if (!v) return true;
    if (!cJSON_IsObject(v))
        return sp_api_bad(err, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    int n = cJSON_GetArraySize(v);
    if (n > SP_API_MAX_LOGIT_BIAS)
        return sp_api_bad(err, "logit_bias", "'logit_bias' takes at most %d entries",
                          SP_API_MAX_LOGIT_BIAS);
    if (n == 0) return true;
    r->bias_ids = malloc((size_t)n * sizeof *r->bias_ids);
    r->bias_values = malloc((size_t)n * sizeof *r->bias_values);
    if (!r->bias_ids || !r->bias_values)
        return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        char *end;
        long id = strtol(e->string, &end, 10);
        if (!e->string[0] || *end || id < 0 || id >= limits->vocab_size)
            return sp_api_bad(err, "logit_bias",
                              "'logit_bias' key '%.40s' is not a token id in [0, %d)",
                              e->string, limits->vocab_size);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) ||
            e->valuedouble < -100 || e->valuedouble > 100)
            return sp_api_bad(err, "logit_bias",
                              "'logit_bias' values must be numbers in [-100, 100]");
        r->bias_ids[k] = (int32_t)id;
        r->bias_values[k++] = (float)e->valuedouble;
    }
    r->gen.logit_bias_ids = r->bias_ids;
    r->gen.logit_bias_values = r->bias_values;
    r->gen.n_logit_bias = k;
    return true;
}

/* temperature, top_p, top_k, min_p, seed, the penalties and their context
 * sizes (mlx_lm.server's names), XTC. Ranges: OpenAI's where it has them,
 * else what mlx-lm's sampler accepts. */
static bool read_sampling(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    spindle_sampler_params *s = &r->gen.sampler;
    spindle_gen_params *g = &r->gen;
    const cJSON *seed = field(root, "seed");
    if (seed) {
        long x;
        /* 2^53: every integer a double holds exactly. */
        if (!sp_api_read_long(seed, "seed", -(1L << 53), 1L << 53, &x, err)) return false;
        s->seed = (uint64_t)x;
        r->seed_given = true;
    }
    return read_float(root, "temperature", 0, 100, &s->temperature, err) &&
           read_float(root, "top_p", 0, 1, &s->top_p, err) &&
           read_int(root, "top_k", 0, 1 << 30, &s->top_k, err) &&
           read_float(root, "min_p", 0, 1, &s->min_p, err) &&
           read_float(root, "xtc_probability", 0, 1, &s->xtc_probability, err) &&
           read_float(root, "xtc_threshold", 0, 0.5, &s->xtc_threshold, err) &&
           read_float(root, "repetition_penalty", 0, 100, &g->repetition_penalty, err) &&
           read_float(root, "presence_penalty", -100, 100, &g->presence_penalty, err) &&
           read_float(root, "frequency_penalty", -100, 100, &g->frequency_penalty, err) &&
           read_int(root, "repetition_context_size", 0, 1 << 24,
                    &g->repetition_context_size, err) &&
           read_int(root, "presence_context_size", 0, 1 << 24,
                    &g->presence_context_size, err) &&
           read_int(root, "frequency_context_size", 0, 1 << 24,
                    &g->frequency_context_size, err);
}

/* num_draft_tokens and speculative.n_max name the same K (both given:
 * they must agree); speculative.n_min <= K when both are known here. */
static bool read_speculative(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    int k = -1, n_max = -1;
    r->draft_tokens = r->min_draft_tokens = -1;
    if (!read_int(root, "num_draft_tokens", 0, SPINDLE_MAX_DRAFT_TOKENS, &k, err) ||
        !read_int(root, "speculative.n_max", 0, SPINDLE_MAX_DRAFT_TOKENS, &n_max, err) ||
        !read_int(root, "speculative.n_min", 0, SPINDLE_MAX_DRAFT_TOKENS,
                  &r->min_draft_tokens, err))
        return false;
    if (k >= 0 && n_max >= 0 && k != n_max)
        return sp_api_bad(err, "speculative.n_max",
                          "'speculative.n_max' (%d) and 'num_draft_tokens' (%d) differ",
                          n_max, k);
    r->draft_tokens = k >= 0 ? k : n_max;
    if (r->draft_tokens >= 0 && r->min_draft_tokens > r->draft_tokens)
        return sp_api_bad(err, "speculative.n_min",
                          "'speculative.n_min' (%d) exceeds the draft length %d",
                          r->min_draft_tokens, r->draft_tokens);
    return true;
}

static bool read_stream(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    if (!read_bool(root, "stream", &r->stream, err)) return false;
    const cJSON *opts = field(root, "stream_options");
    if (!opts) return true;
    if (!cJSON_IsObject(opts))
        return sp_api_bad(err, "stream_options", "'stream_options' must be an object");
    if (!r->stream)
        return sp_api_bad(err, "stream_options",
                          "'stream_options' is only allowed when 'stream' is true");
    return read_bool(opts, "include_usage", &r->include_usage, err);
}

static bool read_max_tokens(const cJSON *root, const sp_api_limits *limits,
                            sp_api_request *r, sp_api_error *err) {
    r->max_tokens = limits->default_max_tokens;
    r->max_tokens_given = field(root, "max_tokens") || field(root, "max_completion_tokens");
    /* max_completion_tokens is the newer name and wins. */
    return read_int(root, "max_tokens", 1, 1 << 24, &r->max_tokens, err) &&
           read_int(root, "max_completion_tokens", 1, 1 << 24, &r->max_tokens, err);
}

/* diffusion_steps, block_length and remasking: a diffusion model's
 * settings (spindle run's --diffusion-steps, --block-length, --remasking);
 * diffusion_job.c checks that the model denoises. */
static bool read_diffusion(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    const cJSON *v = field(root, "remasking");
    r->remasking_given = v != NULL;
    if (v && !(cJSON_IsString(v) && spindle_remasking_parse(v->valuestring, &r->remasking)))
        return sp_api_bad(err, "remasking", "'remasking' must be one of confidence, "
                          "margin, entropy, origin, random");
    return read_int(root, "diffusion_steps", 1, 1 << 24, &r->diffusion_steps, err) &&
           read_int(root, "block_length", 1, 1 << 24, &r->block_length, err);
}

/* n: choices decoded side by side; choice i samples with seed + i. A
 * resume or a slot continues one sequence, so they take one choice. */
static bool read_n(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    r->n_choices = 1;
    return read_int(root, "n", 1, SP_API_MAX_CHOICES, &r->n_choices, err);
}

static bool check_n(const sp_api_request *r, sp_api_error *err) {
    if (r->n_choices > 1 && r->resume_id)
        return sp_api_bad(err, "n", "'n' must be 1 with 'resume_id' (a resume continues one "
                          "choice), got %d", r->n_choices);
    if (r->n_choices > 1 && r->id_slot >= 0)
        return sp_api_bad(err, "n", "'n' must be 1 with 'id_slot' (a slot keeps one "
                          "sequence), got %d", r->n_choices);
    return true;
}

/* chat: logprobs (bool) and top_logprobs (0..20, needs logprobs);
 * completions: logprobs as the number of alternatives, 0..5. */
static bool read_logprobs(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    if (r->kind == SP_API_COMPLETION) {
        int n = -1;
        if (!read_int(root, "logprobs", 0, 5, &n, err)) return false;
        r->logprobs = n >= 0;
        r->top_logprobs = n > 0 ? n : 0;
        return true;
    }
    if (!read_bool(root, "logprobs", &r->logprobs, err) ||
        !read_int(root, "top_logprobs", 0, SPINDLE_MAX_TOP_LOGPROBS, &r->top_logprobs, err))
        return false;
    if (r->top_logprobs > 0 && !r->logprobs)
        return sp_api_bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return true;
}

/* resume_id: a string (which checkpoint, durable.c decides). */
static bool read_resume_id(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    const cJSON *v = field(root, "resume_id");
    if (!v) return true;
    if (!cJSON_IsString(v)) return sp_api_bad(err, "resume_id", "resume_id must be a string");
    return dup_text(v, &r->resume_id, err);
}

/* id_slot: an integer in [0, n_slots), or -1 (llama-server's "any slot",
 * which here is none). */
static bool read_id_slot(const cJSON *root, const sp_api_limits *limits, sp_api_request *r,
                         sp_api_error *err) {
    const cJSON *v = field(root, "id_slot");
    r->id_slot = -1;
    if (!v) return true;
    double d = cJSON_IsNumber(v) ? v->valuedouble : -2;
    if (d == -1) return true;
    if (d < 0 || d >= limits->n_slots || d != (int)d)
        return sp_api_bad(err, "id_slot", "id_slot must be an integer in [0, %d]",
                          limits->n_slots - 1);
    r->id_slot = (int)d;
    return true;
}

/* ------------------------------------------------------------ the routes */

static bool read_prompt_ids(const cJSON *v, const sp_api_limits *limits,
                            sp_api_request *r, sp_api_error *err) {
    int n = cJSON_GetArraySize(v);
    if (!(r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids)))
        return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        long id = 0;
        if (!sp_api_read_long(e, "prompt", 0, limits->vocab_size - 1L, &id, err))
            return false;
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)id;
    }
    return true;
}

/* A string, an array of one string, or an array of token ids. */
static bool read_prompt(const cJSON *root, const sp_api_limits *limits,
                        sp_api_request *r, sp_api_error *err) {
    const cJSON *v = field(root, "prompt");
    if (!v) return sp_api_bad(err, "prompt", "'prompt' is required");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child))
        v = v->child;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return sp_api_bad(err, "prompt", "'prompt' is empty");
        return dup_text(v, &r->prompt_text, err);
    }
    if (!cJSON_IsArray(v))
        return sp_api_bad(err, "prompt", "'prompt' must be a string or an array of token ids");
    if (cJSON_GetArraySize(v) == 0) return sp_api_bad(err, "prompt", "'prompt' is empty");
    if (cJSON_IsString(v->child))
        return sp_api_bad(err, "prompt", "'prompt' takes one string (batches of prompts "
                                         "are not supported)");
    return read_prompt_ids(v, limits, r, err);
}

static bool read_completion_only(const cJSON *root, sp_api_error *err) {
    bool echo = false;
    int best_of = 1;
    if (!read_bool(root, "echo", &echo, err) ||
        !read_int(root, "best_of", 1, 128, &best_of, err))
        return false;
    if (echo) return sp_api_bad(err, "echo", "'echo' is not supported");
    if (best_of != 1) return sp_api_bad(err, "best_of", "'best_of' must be 1");
    return true;
}

static bool read_chat_inputs(const cJSON *root, const sp_api_limits *limits,
                             sp_api_request *r, sp_api_error *err) {
    return sp_api_messages_json(field(root, "messages"), limits, r, err) &&
           sp_api_optional_json(field(root, "tools"), "tools", cJSON_Array,
                                &r->tools_json, err) &&
           sp_api_optional_json(field(root, "chat_template_kwargs"),
                                "chat_template_kwargs", cJSON_Object,
                                &r->template_kwargs_json, err) &&
           sp_api_read_tool_choice(root, field(root, "tools"), r, err);
}

bool sp_api_parse_generation(sp_api_kind kind, const char *body, size_t len,
                             const sp_api_limits *limits, sp_api_request *out,
                             sp_api_error *err) {
    cJSON *root = sp_api_parse_object(body, len, err);
    if (!root) {
        memset(out, 0, sizeof *out);
        out->kind = kind;
        return false;
    }
    bool ok = sp_api_parse_generation_root(kind, root, limits, out, err);
    cJSON_Delete(root);
    return ok;
}

bool sp_api_parse_generation_root(sp_api_kind kind, const cJSON *root,
                                  const sp_api_limits *limits, sp_api_request *out,
                                  sp_api_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->gen = spindle_gen_defaults();
    bool ok = read_model(root, limits, out, err) &&
              (kind == SP_API_CHAT ? read_chat_inputs(root, limits, out, err)
                                   : read_prompt(root, limits, out, err) &&
                                         read_completion_only(root, err)) &&
              read_stream(root, out, err) && read_max_tokens(root, limits, out, err) &&
              read_n(root, out, err) && read_sampling(root, out, err) &&
              read_stop(root, out, err) && read_logit_bias(root, limits, out, err) &&
              read_logprobs(root, out, err) && read_speculative(root, out, err) &&
              sp_api_read_adapter_fields(root, out, err) &&
              sp_api_read_grammar(root, out, err) && read_resume_id(root, out, err) &&
              read_id_slot(root, limits, out, err) && read_diffusion(root, out, err) &&
              check_n(out, err);
    if (!ok) sp_api_request_free(out);
    else out->gen.max_tokens = out->max_tokens;
    return ok;
}

void sp_api_request_free(sp_api_request *r) {
    free(r->model);
    free(r->messages_json);
    free(r->tools_json);
    free(r->template_kwargs_json);
    for (int i = 0; i < r->n_images; i++) {
        free(r->images[i]);
        free(r->image_urls[i]);
    }
    free(r->prompt_text);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->bias_ids);
    free(r->bias_values);
    for (int i = 0; i < r->n_adapters; i++) free(r->adapters[i]);
    free(r->adapters);
    free(r->adapter_name);
    spindle_adapter_unload(r->stacked_adapter);
    free(r->grammar_text);
    spindle_grammar_free(r->grammar);
    free(r->resume_id);
    free(r->conversation_json);
    free(r->responses_echo_json);
    sp_api_kind kind = r->kind;
    sp_api_dialect dialect = r->dialect;
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->dialect = dialect;
}

bool sp_api_parse_tokenize(const char *body, size_t len, sp_api_tokenize *out,
                           sp_api_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = sp_api_parse_object(body, len, err);
    if (!root) return false;
    bool parse_special = true, ok = true;
    const cJSON *content = field(root, "content");
    if (!cJSON_IsString(content))
        ok = sp_api_bad(err, "content", "'content' must be a string");
    ok = ok && read_bool(root, "add_special", &out->add_special, err) &&
         read_bool(root, "parse_special", &parse_special, err) &&
         read_bool(root, "with_pieces", &out->with_pieces, err);
    if (ok && !parse_special)
        ok = sp_api_bad(err, "parse_special",
                        "'parse_special': false is not supported (special tokens are "
                        "always matched)");
    if (ok && (ok = dup_text(content, &out->content, err)))
        out->content_len = strlen(out->content);
    cJSON_Delete(root);
    if (!ok) sp_api_tokenize_free(out);
    return ok;
}

void sp_api_tokenize_free(sp_api_tokenize *t) {
    free(t->content);
    memset(t, 0, sizeof *t);
}

bool sp_api_parse_detokenize(const char *body, size_t len,
                             const sp_api_limits *limits, int32_t **ids,
                             int *n_ids, sp_api_error *err) {
    *ids = NULL;
    *n_ids = 0;
    cJSON *root = sp_api_parse_object(body, len, err);
    if (!root) return false;
    const cJSON *v = field(root, "tokens");
    sp_api_request tmp = {0};
    bool ok = cJSON_IsArray(v)
                  ? read_prompt_ids(v, limits, &tmp, err)
                  : sp_api_bad(err, "tokens", "'tokens' must be an array of token ids");
    if (!ok && !strcmp(err->param, "prompt")) {
        snprintf(err->param, sizeof err->param, "tokens");
        snprintf(err->message, sizeof err->message,
                 "'tokens' must be an array of token ids in [0, %d)", limits->vocab_size);
    }
    cJSON_Delete(root);
    if (!ok) {
        free(tmp.prompt_ids);
        return false;
    }
    *ids = tmp.prompt_ids;
    *n_ids = tmp.n_prompt_ids;
    return true;
}

bool sp_api_parse_apply_template(const char *body, size_t len,
                                 sp_api_request *out, sp_api_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = sp_api_parse_object(body, len, err);
    if (!root) return false;
    bool ok = read_chat_inputs(root, NULL, out, err);
    cJSON_Delete(root);
    if (!ok) sp_api_request_free(out);
    return ok;
}
