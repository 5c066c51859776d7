/* engine_harness — drives the step engine (include/spindle.h, spindle_engine_*)
 * through a scripted scenario for tests/parity/test_engine.py.
 *
 * usage: engine_harness SCENARIO.json   (the result is one JSON object on
 * stdout; logits go to raw float32 files, [steps][vocab], in logits_dir)
 *
 * Scenario: {"model": DIR, "threads": N, "max_context": N,
 *   "mode": "step" | "background" | "generate",
 *   "max_seqs": N, "max_batch_tokens": N, "logits_dir": DIR,
 *   "free_after_tokens": N (background: free the engine once N tokens came),
 *   "requests": [{"prompt": [...], "max_tokens": N, "temperature": T,
 *     "top_p": P, "top_k": K, "seed": S, "min_p": M, "xtc_probability": X,
 *     "xtc_threshold": T, "repetition_penalty": R,
 *     "ignore_eos": B, "stop_ids": [...], "top_logprobs": N, "logits": B,
 *     "submit_at": K, "cancel_at": K, "after": I, "stop_after": N,
 *     "foreign_seq": B, "own_seq": B, "next_logits": B, "seq_of": I,
 *     "truncate_to": T,
 *     "spec": "ngram" | "draft" | "mtp", "num_draft_tokens": K, "ngram_max": N,
 *     "ngram_min": N, "fixed_k": B,
 *     "spans": [{"tokens": [...]} | {"tokens": [...] (placeholders),
 *       "embeddings_file": PATH (raw f32, n x hidden), "source": S (the
 *       digest is spindle_span_digest of S), "bidirectional": B,
 *       "no_per_layer_input": B}] instead of "prompt",
 *     "checkpoint_every": N, "checkpoint_file": PATH (each checkpoint
 *       saved there), "resume_file": PATH (resume that checkpoint; use
 *       with "after")}],
 *   "kv_blocks": N (the KV pool holds N blocks), "no_prefix_cache": B,
 *   "prompt_cache_dir": DIR (the on-disk prompt cache),
 *   "draft_model": DIR (for "spec": "draft"),
 *   "always_accept": B (speculation's deliberately wrong acceptance rule),
 *   "draft_delay_ms": T (each draft-model step takes T ms longer: a slow
 *     draft model),
 *   "greedy_drafts": B (a draft model or MTP head drafts its argmax at any
 *     temperature),
 *   "fixed_costs": B (speculation's adaptive rule never measures step
 *     times: its choices depend on the acceptance counts alone)}
 * "step": the harness calls spindle_engine_step; before step K it submits
 *   the requests with submit_at K and cancels those with cancel_at K.
 * "background": K counts tokens generated so far by all requests.
 * "after": I submits the request from request I's on_finish callback.
 * "stop_after": N makes on_token return false at the N-th token.
 * "foreign_seq": the request continues a sequence of a second copy of the
 *   model, which the forward pass must refuse (for that request only).
 * "own_seq": the request runs on a sequence the harness made (and keeps
 *   until the end, holding its blocks).
 * "seq_of": I continues request I's sequence (own_seq), truncated to T
 *   tokens first when truncate_to >= 0 (use with "after": I).
 * "generate": each request alone through spindle_generate (its prompt
 *   logits as the one logits row).
 * LoRA: "adapters": {NAME: DIR} loads adapters; a request's "adapter": NAME
 *   and "adapter_scale": F pick one; "unload_adapters_at": K (step mode)
 *   drops the harness's references before step K, while requests that
 *   named them may still run.
 * "next_logits": B (with own_seq and a logits directory): after the run
 *   the harness feeds the request's sequence its last generated token and
 *   writes the logits of that position to next_logits_file (the state
 *   after rollbacks). */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spindle.h"
#include "generation/engine.h"
#include "generation/speculative.h"

typedef struct req_run {
    int index;
    int32_t *prompt, *stop_ids;
    int n_prompt, n_stop_ids;
    spindle_span *spans;
    int n_spans;
    const char *checkpoint_file, *resume_file;
    spindle_checkpoint *resume;
    spindle_gen_params params;
    int top_logprobs, submit_at, cancel_at, after, stop_after;
    int seq_of, truncate_to;
    bool want_logits, foreign_seq, own_seq, next_logits;
    spindle_seq *seq;

    spindle_request_id id;
    bool submitted, cancel_result, stream_matches;
    spindle_status submit_status;
    char submit_error[512];
    int32_t *tokens;
    float *logprobs;
    spindle_token_logprob *top;
    int n_tokens, cap;
    float *logits;
    size_t rows, rows_cap;
    int finish_calls;
    spindle_stop_reason reason;
    spindle_status status;
    char error[512];
    spindle_request_stats stats;
} req_run;

typedef struct harness {
    spindle_model *model, *foreign, *draft;
    spindle_engine *engine;
    int vocab;
    req_run *reqs;
    int n_reqs;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    long total_tokens;
    int finished;
    spindle_adapter *adapters[16];
    const char *adapter_names[16];
    int n_adapters, unload_adapters_at;
    int max_running, max_queued;  /* spindle_engine_counts after steps */
} harness;

static harness H;

static double num(const cJSON *o, const char *key, double fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

static bool flag(const cJSON *o, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static int32_t *ints(const cJSON *o, const char *key, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    *n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
    int32_t *out = malloc(((size_t)*n + 1) * sizeof *out);
    int i = 0;
    const cJSON *e;
    if (*n) cJSON_ArrayForEach(e, a) out[i++] = (int32_t)e->valuedouble;
    return out;
}

static float *read_floats(const char *path, size_t n) {
    float *out = malloc(n * sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f || fread(out, sizeof *out, n, f) != n) {
        fprintf(stderr, "engine_harness: cannot read %zu floats from %s\n", n,
                path);
        exit(1);
    }
    fclose(f);
    return out;
}

/* A request's "spans" (see the top): the prompt as spans. */
static void parse_spans(const cJSON *j, req_run *r) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "spans"), *s;
    if (!cJSON_IsArray(a)) return;
    r->spans = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *r->spans);
    cJSON_ArrayForEach(s, a) {
        spindle_span *sp = &r->spans[r->n_spans++];
        sp->tokens = ints(s, "tokens", &sp->n);
        const char *file = cJSON_GetStringValue(
            cJSON_GetObjectItem(s, "embeddings_file"));
        if (!file) continue;
        sp->kind = SPINDLE_SPAN_EMBEDDINGS;
        sp->embeddings = read_floats(
            file, (size_t)sp->n * spindle_model_hidden_size(H.model));
        const char *src = cJSON_GetStringValue(cJSON_GetObjectItem(s, "source"));
        spindle_span_digest(src, src ? strlen(src) : 0, "engine_harness",
                            sp->digest);
        sp->flags = (flag(s, "bidirectional") ? SPINDLE_SPAN_BIDIRECTIONAL : 0) |
                    (flag(s, "no_per_layer_input")
                         ? SPINDLE_SPAN_NO_PER_LAYER_INPUT : 0);
    }
}

static void save_checkpoint(spindle_checkpoint *ck, void *user) {
    const req_run *r = user;
    spindle_error err = {0};
    if (spindle_checkpoint_save(ck, r->checkpoint_file, &err)) {
        fprintf(stderr, "engine_harness: %s\n", err.message);
        exit(1);
    }
}

static void parse_checkpoints(const cJSON *j, req_run *r) {
    r->checkpoint_file = cJSON_GetStringValue(
        cJSON_GetObjectItem(j, "checkpoint_file"));
    r->resume_file = cJSON_GetStringValue(cJSON_GetObjectItem(j, "resume_file"));
    if (!r->checkpoint_file) return;
    r->params.checkpoint_every = (int)num(j, "checkpoint_every", 1);
    r->params.on_checkpoint = save_checkpoint;
    r->params.checkpoint_user = r;
}

static void free_spans(req_run *r) {
    for (int i = 0; i < r->n_spans; i++) {
        free((void *)r->spans[i].tokens);
        free((void *)r->spans[i].embeddings);
    }
    free(r->spans);
}

static void parse_request(const cJSON *j, int index, req_run *r) {
    memset(r, 0, sizeof *r);
    r->index = index;
    r->prompt = ints(j, "prompt", &r->n_prompt);
    parse_spans(j, r);
    if (r->spans) {
        free(r->prompt);
        r->prompt = NULL;
    }
    r->stop_ids = ints(j, "stop_ids", &r->n_stop_ids);
    spindle_gen_params *p = &r->params;
    *p = spindle_gen_defaults();
    p->max_tokens = (int)num(j, "max_tokens", 32);
    p->sampler.temperature = (float)num(j, "temperature", 0);
    p->sampler.top_p = (float)num(j, "top_p", 1);
    p->sampler.top_k = (int)num(j, "top_k", 0);
    p->sampler.seed = (uint64_t)num(j, "seed", 0);
    p->sampler.min_p = (float)num(j, "min_p", 0);
    p->sampler.xtc_probability = (float)num(j, "xtc_probability", 0);
    p->sampler.xtc_threshold = (float)num(j, "xtc_threshold", 0.1);
    p->repetition_penalty = (float)num(j, "repetition_penalty", 0);
    p->ignore_eos = flag(j, "ignore_eos");
    p->stop_ids = r->stop_ids;
    p->n_stop_ids = r->n_stop_ids;
    r->top_logprobs = (int)num(j, "top_logprobs", 0);
    r->want_logits = flag(j, "logits");
    r->submit_at = (int)num(j, "submit_at", 0);
    r->cancel_at = (int)num(j, "cancel_at", -1);
    r->after = (int)num(j, "after", -1);
    r->stop_after = (int)num(j, "stop_after", 0);
    r->foreign_seq = flag(j, "foreign_seq");
    r->own_seq = flag(j, "own_seq");
    r->next_logits = flag(j, "next_logits");
    r->seq_of = (int)num(j, "seq_of", -1);
    r->truncate_to = (int)num(j, "truncate_to", -1);
    const char *spec = cJSON_GetStringValue(cJSON_GetObjectItem(j, "spec"));
    if (spec) {
        p->spec.mode = !strcmp(spec, "draft") ? SPINDLE_SPEC_DRAFT
                       : !strcmp(spec, "mtp") ? SPINDLE_SPEC_MTP
                                              : SPINDLE_SPEC_NGRAM;
        p->spec.num_draft_tokens = (int)num(j, "num_draft_tokens", 0);
        p->spec.ngram_max = (int)num(j, "ngram_max", 0);
        p->spec.ngram_min = (int)num(j, "ngram_min", 0);
        p->spec.min_draft_tokens = (int)num(j, "min_draft_tokens", 0);
        p->spec.fixed_k = flag(j, "fixed_k");
        p->spec.draft_model = H.draft;
    }
    r->stream_matches = true;
    const char *adapter = cJSON_GetStringValue(cJSON_GetObjectItem(j, "adapter"));
    for (int i = 0; adapter && i < H.n_adapters; i++)
        if (!strcmp(adapter, H.adapter_names[i])) p->adapter = H.adapters[i];
    if (adapter && !p->adapter) {
        fprintf(stderr, "engine_harness: no adapter %s\n", adapter);
        exit(1);
    }
    p->adapter_scale = (float)num(j, "adapter_scale", 0);
    parse_checkpoints(j, r);
}

/* ------------------------------------------------------------ callbacks */

static void grow_tokens(req_run *r) {
    if (r->n_tokens < r->cap) return;
    r->cap = r->cap ? 2 * r->cap : 64;
    r->tokens = realloc(r->tokens, (size_t)r->cap * sizeof *r->tokens);
    r->logprobs = realloc(r->logprobs, (size_t)r->cap * sizeof *r->logprobs);
    r->top = realloc(r->top, (size_t)r->cap * SPINDLE_MAX_TOP_LOGPROBS * sizeof *r->top);
}

static void add_logits_row(req_run *r, const float *row) {
    if (r->rows == r->rows_cap) {
        r->rows_cap = r->rows_cap ? 2 * r->rows_cap : 8;
        r->logits = realloc(r->logits, r->rows_cap * (size_t)H.vocab * sizeof(float));
    }
    memcpy(r->logits + r->rows++ * (size_t)H.vocab, row, (size_t)H.vocab * sizeof(float));
}

static bool on_token(spindle_request_id id, const spindle_token_info *info,
                     void *user) {
    (void)id;
    req_run *r = user;
    grow_tokens(r);
    if (info->index != r->n_tokens) r->stream_matches = false;
    r->tokens[r->n_tokens] = info->token;
    r->logprobs[r->n_tokens] = info->logprob;
    if (info->n_top != r->top_logprobs || (info->n_top && !info->top))
        r->stream_matches = false;
    for (int k = 0; k < info->n_top && info->top; k++)
        r->top[(size_t)r->n_tokens * SPINDLE_MAX_TOP_LOGPROBS + k] = info->top[k];
    r->n_tokens++;
    if (r->want_logits) {
        if (info->logits) add_logits_row(r, info->logits);
        else r->stream_matches = false;
    }
    pthread_mutex_lock(&H.lock);
    H.total_tokens++;
    pthread_cond_broadcast(&H.changed);
    pthread_mutex_unlock(&H.lock);
    return !(r->stop_after > 0 && r->n_tokens >= r->stop_after);
}

static void submit(req_run *r);

static void on_finish(spindle_request_id id, const spindle_request_result *res,
                      void *user) {
    req_run *r = user;
    pthread_mutex_lock(&H.lock);  /* submit writes r->id under it */
    if (id != r->id) r->stream_matches = false;
    pthread_mutex_unlock(&H.lock);
    r->finish_calls++;
    r->reason = res->stop_reason;
    r->status = res->status;
    snprintf(r->error, sizeof r->error, "%s", res->error);
    r->stats = res->stats;
    if (res->n_tokens != r->n_tokens ||
        (r->n_tokens && memcmp(res->tokens, r->tokens,
                               (size_t)r->n_tokens * sizeof *r->tokens)))
        r->stream_matches = false;
    for (int i = 0; i < H.n_reqs; i++)  /* submit from inside a callback */
        if (H.reqs[i].after == r->index && !H.reqs[i].submitted)
            submit(&H.reqs[i]);
    pthread_mutex_lock(&H.lock);
    H.finished++;
    pthread_cond_broadcast(&H.changed);
    pthread_mutex_unlock(&H.lock);
}

static void submit(req_run *r) {
    spindle_error err = {0};
    if ((r->foreign_seq || r->own_seq) && !r->seq &&
        spindle_seq_new(r->own_seq ? H.model : H.foreign, &r->seq, &err)) {
        fprintf(stderr, "engine_harness: %s\n", err.message);
        exit(1);
    }
    if (r->seq_of >= 0 && !r->seq) {
        r->seq = H.reqs[r->seq_of].seq;
        H.reqs[r->seq_of].seq = NULL;
        if (r->seq && r->truncate_to >= 0 &&
            spindle_seq_truncate(r->seq, r->truncate_to, &err)) {
            fprintf(stderr, "engine_harness: truncate: %s\n", err.message);
            exit(1);
        }
    }
    if (r->resume_file && !r->resume) {
        if (spindle_checkpoint_load(H.model, r->resume_file, &r->resume, &err)) {
            fprintf(stderr, "engine_harness: %s\n", err.message);
            exit(1);
        }
        r->params.resume = r->resume;
    }
    spindle_request q = {
        .prompt = r->prompt, .n_prompt = r->n_prompt, .params = &r->params,
        .spans = r->spans, .n_spans = r->n_spans,
        .top_logprobs = r->top_logprobs, .want_logits = r->want_logits,
        .seq = r->seq, .on_token = on_token, .on_finish = on_finish,
        .user = r};
    r->submitted = true;
    pthread_mutex_lock(&H.lock);  /* on_finish may run before *id is set */
    r->submit_status = spindle_engine_submit(H.engine, &q, &r->id, &err);
    pthread_mutex_unlock(&H.lock);
    if (r->submit_status) {
        snprintf(r->submit_error, sizeof r->submit_error, "%s", err.message);
        pthread_mutex_lock(&H.lock);
        H.finished++;  /* counts as done: no callback will come */
        pthread_mutex_unlock(&H.lock);
    }
}

/* ---------------------------------------------------------------- modes */

static void unload_adapters(void) {
    for (int i = 0; i < H.n_adapters; i++) spindle_adapter_unload(H.adapters[i]);
    H.n_adapters = 0;
}

static void load_adapters(const cJSON *sc) {
    const cJSON *a, *all = cJSON_GetObjectItem(sc, "adapters");
    H.unload_adapters_at = (int)num(sc, "unload_adapters_at", -1);
    cJSON_ArrayForEach(a, all) {
        spindle_error err = {0};
        if (H.n_adapters == 16 || !cJSON_IsString(a) ||
            spindle_adapter_load(H.model, a->valuestring,
                                 &H.adapters[H.n_adapters], &err)) {
            fprintf(stderr, "engine_harness: adapter %s: %s\n", a->string,
                    err.message);
            exit(1);
        }
        H.adapter_names[H.n_adapters++] = a->string;
    }
}

static int run_steps(void) {
    int step = 0;
    for (;; step++) {
        bool pending = false;
        for (int i = 0; i < H.n_reqs; i++) {
            req_run *r = &H.reqs[i];
            if (!r->submitted && r->after < 0 && r->submit_at == step) submit(r);
            if (r->cancel_at == step && r->submitted)
                r->cancel_result = spindle_engine_cancel(H.engine, r->id);
            if (!r->submitted && r->after < 0) pending = true;
        }
        if (step == H.unload_adapters_at) unload_adapters();
        int active = 0;
        spindle_error err = {0};
        if (spindle_engine_step(H.engine, &active, &err)) {
            fprintf(stderr, "engine_harness: step: %s\n", err.message);
            exit(1);
        }
        int queued, running, flagged = 0;
        spindle_engine_counts(H.engine, &queued, &running);
        /* spindle_engine_is_running marks the same requests the count
         * counts (a request submitted by a callback is only queued). */
        for (int i = 0; i < H.n_reqs; i++)
            flagged += H.reqs[i].submitted && H.reqs[i].submit_status == SPINDLE_OK &&
                       spindle_engine_is_running(H.engine, H.reqs[i].id);
        if (flagged != running) {
            fprintf(stderr, "engine_harness: step %d: %d requests report running, the "
                            "counts say %d\n", step, flagged, running);
            exit(1);
        }
        if (running > H.max_running) H.max_running = running;
        if (queued > H.max_queued) H.max_queued = queued;
        if (!active && !pending) return step + 1;
        if (step > 100000) {
            fprintf(stderr, "engine_harness: no end after %d steps\n", step);
            exit(1);
        }
    }
}

/* Background mode: submit_at / cancel_at count generated tokens. */
static void run_background(long free_after) {
    int done_actions = 0, n_actions = 0;
    for (int i = 0; i < H.n_reqs; i++)
        n_actions += (H.reqs[i].after < 0) + (H.reqs[i].cancel_at >= 0);
    pthread_mutex_lock(&H.lock);
    while (done_actions < n_actions) {
        for (int i = 0; i < H.n_reqs; i++) {
            req_run *r = &H.reqs[i];
            if (!r->submitted && r->after < 0 && H.total_tokens >= r->submit_at) {
                pthread_mutex_unlock(&H.lock);
                submit(r);
                pthread_mutex_lock(&H.lock);
                done_actions++;
            }
            if (r->cancel_at >= 0 && r->submitted && r->id &&
                H.total_tokens >= r->cancel_at) {
                r->cancel_result = spindle_engine_cancel(H.engine, r->id);
                r->cancel_at = -1;
                done_actions++;
            }
        }
        if (done_actions < n_actions) pthread_cond_wait(&H.changed, &H.lock);
    }
    if (free_after > 0) {
        while (H.total_tokens < free_after && H.finished < H.n_reqs)
            pthread_cond_wait(&H.changed, &H.lock);
    } else {
        while (H.finished < H.n_reqs) pthread_cond_wait(&H.changed, &H.lock);
    }
    pthread_mutex_unlock(&H.lock);
}

static bool generate_token(int32_t token, void *user) {
    (void)token;
    req_run *r = user;
    r->n_tokens++;
    return !(r->stop_after > 0 && r->n_tokens >= r->stop_after);
}

static void run_generate(void) {
    float *row = malloc((size_t)H.vocab * sizeof *row);
    for (int i = 0; i < H.n_reqs; i++) {
        req_run *r = &H.reqs[i];
        spindle_error err = {0};
        spindle_seq *seq = NULL;
        spindle_gen_stats st;
        int32_t *toks = NULL;
        int n = 0;
        r->submitted = true;
        r->status = spindle_seq_new(H.model, &seq, &err);
        if (!r->status)
            r->status = spindle_generate(H.model, seq, r->prompt, r->n_prompt,
                                         &r->params, generate_token, r, &toks,
                                         &n, row, &st, &err);
        spindle_seq_free(seq);
        snprintf(r->error, sizeof r->error, "%s", r->status ? err.message : "");
        r->reason = r->status ? SPINDLE_STOP_ERROR : st.stop_reason;
        r->stream_matches = r->status || n == r->n_tokens;
        r->n_tokens = 0;
        for (int k = 0; k < n; k++) {
            grow_tokens(r);
            r->tokens[r->n_tokens] = toks[k];
            r->logprobs[r->n_tokens++] = 0;
        }
        if (!r->status && r->want_logits) add_logits_row(r, row);
        r->finish_calls = 1;
        spindle_free(toks);
    }
    free(row);
}

/* --------------------------------------------------------------- output */

/* own_seq: the logits after feeding the last generated token. */
static void write_next_logits(const req_run *r, const char *logits_dir,
                              cJSON *o) {
    float *row = malloc((size_t)H.vocab * sizeof *row);
    spindle_batch_entry en = {.seq = r->seq, .tokens = &r->tokens[r->n_tokens - 1],
                              .n_tokens = 1, .logits_mode = SPINDLE_LOGITS_LAST,
                              .logits = row};
    spindle_error err;
    char path[4096];
    snprintf(path, sizeof path, "%s/req%d.next.f32", logits_dir, r->index);
    FILE *f = NULL;
    if (spindle_forward(H.model, &en, 1, &err) || !(f = fopen(path, "wb")) ||
        fwrite(row, sizeof *row, (size_t)H.vocab, f) != (size_t)H.vocab) {
        fprintf(stderr, "engine_harness: next logits: %s\n", err.message);
        exit(1);
    }
    fclose(f);
    free(row);
    cJSON_AddStringToObject(o, "next_logits_file", path);
    cJSON_AddNumberToObject(o, "seq_length", spindle_seq_length(r->seq));
}

static cJSON *request_json(const req_run *r, const char *logits_dir) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)r->id);
    if (r->submit_status) {
        cJSON_AddStringToObject(o, "submit_status", spindle_status_name(r->submit_status));
        cJSON_AddStringToObject(o, "submit_error", r->submit_error);
        return o;
    }
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top");
    for (int i = 0; i < r->n_tokens; i++) {
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(r->tokens[i]));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(r->logprobs[i]));
        if (!r->top_logprobs) continue;
        cJSON *t = cJSON_CreateArray();
        for (int k = 0; k < r->top_logprobs; k++) {
            const spindle_token_logprob *e = &r->top[(size_t)i * SPINDLE_MAX_TOP_LOGPROBS + k];
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(e->token));
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(e->logprob));
            cJSON_AddItemToArray(t, pair);
        }
        cJSON_AddItemToArray(tops, t);
    }
    cJSON_AddStringToObject(o, "stop_reason", spindle_stop_reason_name(r->reason));
    cJSON_AddStringToObject(o, "status", spindle_status_name(r->status));
    cJSON_AddStringToObject(o, "error", r->error);
    cJSON_AddNumberToObject(o, "finish_calls", r->finish_calls);
    cJSON_AddBoolToObject(o, "stream_matches", r->stream_matches);
    cJSON_AddBoolToObject(o, "cancel_result", r->cancel_result);
    cJSON *s = cJSON_AddObjectToObject(o, "stats");
    cJSON_AddNumberToObject(s, "prompt_tokens", r->stats.prompt_tokens);
    cJSON_AddNumberToObject(s, "cached_tokens", r->stats.cached_tokens);
    cJSON_AddNumberToObject(s, "generated_tokens", r->stats.generated_tokens);
    cJSON_AddNumberToObject(s, "ttft_seconds", r->stats.ttft_seconds);
    cJSON_AddNumberToObject(s, "queue_seconds", r->stats.queue_seconds);
    cJSON_AddNumberToObject(s, "total_seconds", r->stats.total_seconds);
    const spindle_spec_stats *sp = &r->stats.spec;
    cJSON_AddNumberToObject(s, "drafted", (double)sp->drafted);
    cJSON_AddNumberToObject(s, "accepted", (double)sp->accepted);
    cJSON_AddNumberToObject(s, "target_forwards", (double)sp->target_forwards);
    cJSON_AddNumberToObject(s, "decode_tokens", (double)sp->decode_tokens);
    cJSON *at = cJSON_AddArrayToObject(s, "drafted_at");
    for (int k = 0; k < SPINDLE_MAX_DRAFT_TOKENS && sp->drafted_at[k]; k++)
        cJSON_AddItemToArray(at, cJSON_CreateNumber((double)sp->drafted_at[k]));
    if (r->next_logits && r->seq && r->n_tokens > 0 && logits_dir)
        write_next_logits(r, logits_dir, o);
    if (r->rows && logits_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/req%d.f32", logits_dir, r->index);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(r->logits, sizeof(float) * (size_t)H.vocab, r->rows, f) != r->rows) {
            fprintf(stderr, "engine_harness: cannot write %s\n", path);
            exit(1);
        }
        fclose(f);
        cJSON_AddStringToObject(o, "logits_file", path);
        cJSON_AddNumberToObject(o, "logits_rows", (double)r->rows);
    }
    return o;
}

/* The KV pool's block counts under `key`. */
static void add_pool_json(cJSON *out, const char *key) {
    spindle_kv_pool_info p;
    spindle_error err = {0};
    if (spindle_model_kv_pool_info(H.model, &p, &err)) return;
    cJSON *o = cJSON_AddObjectToObject(out, key);
    cJSON_AddNumberToObject(o, "blocks", p.blocks);
    cJSON_AddNumberToObject(o, "used", p.used);
    cJSON_AddNumberToObject(o, "cached", p.cached);
    cJSON_AddNumberToObject(o, "free", p.free);
    cJSON_AddNumberToObject(o, "block_tokens", p.block_tokens);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: engine_harness SCENARIO.json\n");
        return 2;
    }
    char *text = read_file(argv[1]);
    cJSON *sc = text ? cJSON_Parse(text) : NULL;
    if (!sc) {
        fprintf(stderr, "engine_harness: cannot read %s\n", argv[1]);
        return 2;
    }
    const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(sc, "mode"));
    const char *model_dir = cJSON_GetStringValue(cJSON_GetObjectItem(sc, "model"));
    const char *logits_dir = cJSON_GetStringValue(cJSON_GetObjectItem(sc, "logits_dir"));
    spindle_load_options lo = {.n_threads = (int)num(sc, "threads", 0),
                               .max_context = (int)num(sc, "max_context", 0),
                               .prompt_cache_dir = cJSON_GetStringValue(
                                   cJSON_GetObjectItem(sc, "prompt_cache_dir"))};
    spindle_error err = {0};
    if (!mode || !model_dir || spindle_model_load(model_dir, &lo, &H.model, &err)) {
        fprintf(stderr, "engine_harness: %s\n", mode && model_dir ? err.message : "mode and model are required");
        return 1;
    }
    spindle_kv_pool_info pool;
    if (num(sc, "kv_blocks", 0) > 0 &&
        !spindle_model_kv_pool_info(H.model, &pool, &err)) {
        lo.kv_bytes = (size_t)num(sc, "kv_blocks", 0) * pool.block_bytes;
        spindle_model_free(H.model);
        if (spindle_model_load(model_dir, &lo, &H.model, &err)) {
            fprintf(stderr, "engine_harness: %s\n", err.message);
            return 1;
        }
    }
    H.vocab = spindle_model_vocab_size(H.model);
    pthread_mutex_init(&H.lock, NULL);
    pthread_cond_init(&H.changed, NULL);
    load_adapters(sc);
    const cJSON *reqs = cJSON_GetObjectItem(sc, "requests");
    H.n_reqs = cJSON_GetArraySize(reqs);
    H.reqs = calloc((size_t)H.n_reqs + 1, sizeof *H.reqs);
    const char *draft_dir = cJSON_GetStringValue(cJSON_GetObjectItem(sc, "draft_model"));
    if (draft_dir && spindle_model_load(draft_dir, &lo, &H.draft, &err)) {
        fprintf(stderr, "engine_harness: draft model: %s\n", err.message);
        return 1;
    }
    bool foreign = false;
    for (int i = 0; i < H.n_reqs; i++) {
        parse_request(cJSON_GetArrayItem(reqs, i), i, &H.reqs[i]);
        foreign |= H.reqs[i].foreign_seq;
    }
    if (foreign && spindle_model_load(model_dir, &lo, &H.foreign, &err)) {
        fprintf(stderr, "engine_harness: %s\n", err.message);
        return 1;
    }
    int steps = 0;
    if (!strcmp(mode, "generate")) {
        run_generate();
    } else {
        spindle_engine_options eo = spindle_engine_defaults();
        eo.max_seqs = (int)num(sc, "max_seqs", 16);
        eo.max_batch_tokens = (int)num(sc, "max_batch_tokens", 512);
        eo.background = !strcmp(mode, "background");
        eo.no_prefix_cache = flag(sc, "no_prefix_cache");
        if (spindle_engine_new(H.model, &eo, &H.engine, &err)) {
            fprintf(stderr, "engine_harness: %s\n", err.message);
            return 1;
        }
        sp_engine_set_testing(H.engine, &(sp_engine_testing){
            .always_accept = flag(sc, "always_accept"),
            .draft_delay = num(sc, "draft_delay_ms", 0) / 1000,
            .greedy_drafts = flag(sc, "greedy_drafts"),
            .fixed_costs = flag(sc, "fixed_costs")});
        if (eo.background) run_background((long)num(sc, "free_after_tokens", 0));
        else steps = run_steps();
        spindle_engine_free(H.engine);
    }
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "steps", steps);
    cJSON_AddNumberToObject(out, "max_running", H.max_running);
    cJSON_AddNumberToObject(out, "max_queued", H.max_queued);
    cJSON *arr = cJSON_AddArrayToObject(out, "requests");
    for (int i = 0; i < H.n_reqs; i++)
        cJSON_AddItemToArray(arr, request_json(&H.reqs[i], logits_dir));
    add_pool_json(out, "pool_end");  /* the harness's sequences still held */
    for (int i = 0; i < H.n_reqs; i++) spindle_seq_free(H.reqs[i].seq);
    add_pool_json(out, "pool_final");
    char *s = cJSON_PrintUnformatted(out);
    puts(s);
    free(s);
    cJSON_Delete(out);
    for (int i = 0; i < H.n_reqs; i++) {
        req_run *r = &H.reqs[i];
        free(r->prompt);
        free_spans(r);
        spindle_checkpoint_free(r->resume);
        free(r->stop_ids);
        free(r->tokens);
        free(r->logprobs);
        free(r->top);
        free(r->logits);
    }
    free(H.reqs);
    unload_adapters();
    spindle_model_free(H.foreign);
    spindle_model_free(H.draft);
    spindle_model_free(H.model);
    cJSON_Delete(sc);
    free(text);
    return 0;
}
