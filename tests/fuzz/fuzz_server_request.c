/* The HTTP server's request parsers (src/server/api_request.h) on fuzzed
 * bodies: pure functions from bytes to a request or an OpenAI error, so no
 * model is loaded.
 *
 * Input: one byte choosing the route (low 3 bits: chat, completions,
 * tokenize, detokenize, apply-template, 5: embeddings, 6: load_lora_adapter,
 * 7: unload_lora_adapter; with 0x08 set, 0 and 1 are Anthropic's
 * /v1/messages and /v1/messages/count_tokens, 2 is /v1/responses, whose
 * previous_response_id "resp_kept" is known, 5 is /v1/rerank), then the
 * body. A parsed Responses request is also answered: its response object
 * built from a fixed reply (reasoning, text, a call) must parse, and so
 * must the conversation it keeps. Invariants: an
 * error is a 4xx (or 503 for memory) with a type and a message, and its
 * JSON object parses with exactly the four OpenAI keys; a parsed request
 * keeps every documented bound (ids in the vocabulary, at most 4 non-empty
 * stop strings, max_tokens >= 1, top_logprobs <= 20, id_slot a slot or -1,
 * n in 1..16 and 1 with resume_id or id_slot, rerank's 1..2048 string
 * documents with top_n among them,
 * message JSON that parses as an array of objects with string roles). */
#include "fuzz_common.h"

#include <cjson/cJSON.h>

#include "server/api_anthropic.h"
#include "server/api_embeddings.h"
#include "server/api_rerank.h"
#include "server/api_request.h"
#include "server/api_response.h"
#include "server/api_responses.h"

#define VOCAB 1000

static const char *const names[] = {"tiny", "/models/tiny"};
static const sp_api_limits limits = {.vocab_size = VOCAB, .model_names = names,
                                     .n_model_names = 2, .default_max_tokens = 16,
                                     .n_slots = 4, .image_marker = "<start_of_image>"};

static void check_error(const sp_api_error *e) {
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "rejected (%d): %s\n", e->http_status, e->message);
    FUZZ_CHECK((e->http_status >= 400 && e->http_status < 500) || e->http_status == 503,
               "status %d", e->http_status);
    FUZZ_CHECK(e->type && e->message[0], "error without type or message");
    char *json = sp_api_error_json(e);
    FUZZ_CHECK(json, "error JSON");
    cJSON *root = cJSON_Parse(json);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "error");
    FUZZ_CHECK(cJSON_GetArraySize(root) == 1 && cJSON_GetArraySize(o) == 4 &&
                   cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "message")),
               "error object %s", json);
    cJSON_Delete(root);
    free(json);
}

/* Anthropic's {"type": "error", "error": {"type", "message"}}. */
static void check_anthropic_error(const sp_api_error *e) {
    check_error(e);
    char *json = sp_anthropic_error_json(e);
    cJSON *root = cJSON_Parse(json);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "error");
    FUZZ_CHECK(cJSON_GetArraySize(root) == 2 && cJSON_GetArraySize(o) == 2 &&
                   cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "type")),
               "anthropic error object %s", json ? json : "(null)");
    cJSON_Delete(root);
    free(json);
}

static void check_messages(const char *json) {
    cJSON *m = cJSON_Parse(json);
    FUZZ_CHECK(cJSON_IsArray(m) && cJSON_GetArraySize(m) > 0, "messages %s", json);
    const cJSON *msg;
    cJSON_ArrayForEach(msg, m) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(msg, "role")), "role");
        FUZZ_CHECK(!content || cJSON_IsString(content) || cJSON_IsNull(content),
                   "content parts left unjoined");
    }
    cJSON_Delete(m);
}

static void check_generation(const sp_api_request *r) {
    FUZZ_CHECK(r->max_tokens >= 1 && r->max_tokens <= (1 << 24) &&
                   r->gen.max_tokens == r->max_tokens, "max_tokens %d", r->max_tokens);
    FUZZ_CHECK(r->n_stop >= 0 && r->n_stop <= SP_API_MAX_STOP, "n_stop %d", r->n_stop);
    for (int i = 0; i < r->n_stop; i++) FUZZ_CHECK(r->stop[i] && r->stop[i][0], "stop");
    FUZZ_CHECK(r->top_logprobs >= 0 && r->top_logprobs <= SPINDLE_MAX_TOP_LOGPROBS, "top");
    FUZZ_CHECK(!r->include_usage || r->stream, "include_usage without stream");
    FUZZ_CHECK(r->n_choices >= 1 && r->n_choices <= SP_API_MAX_CHOICES, "n %d", r->n_choices);
    FUZZ_CHECK(r->n_choices == 1 || (!r->resume_id && r->id_slot < 0),
               "n > 1 with one sequence");
    for (int i = 0; i < r->gen.n_logit_bias; i++)
        FUZZ_CHECK(r->gen.logit_bias_ids[i] >= 0 && r->gen.logit_bias_ids[i] < VOCAB &&
                       r->gen.logit_bias_values[i] >= -100 && r->gen.logit_bias_values[i] <= 100,
                   "logit bias");
    if (r->kind == SP_API_CHAT) {
        check_messages(r->messages_json);
    } else {
        FUZZ_CHECK(!r->prompt_text != !r->prompt_ids, "one prompt form");
        FUZZ_CHECK(!r->prompt_text || r->prompt_text[0], "empty prompt");
        for (int i = 0; i < r->n_prompt_ids; i++)
            FUZZ_CHECK(r->prompt_ids[i] >= 0 && r->prompt_ids[i] < VOCAB, "prompt id");
    }
    FUZZ_CHECK(!r->model || !strcmp(r->model, names[0]) || !strcmp(r->model, names[1]),
               "unknown model accepted");
    FUZZ_CHECK(r->id_slot >= -1 && r->id_slot < limits.n_slots, "id_slot %d", r->id_slot);
}

/* Every input is text or a non-empty list of ids in the vocabulary; the
 * response of a parsed request parses, with one item per input. */
static void check_embeddings(const sp_api_embeddings *r) {
    FUZZ_CHECK(r->n_inputs >= 1 && r->n_inputs <= SP_API_MAX_EMBED_INPUTS,
               "n_inputs %d", r->n_inputs);
    FUZZ_CHECK(r->dimensions >= 0, "dimensions %d", r->dimensions);
    for (int i = 0; i < r->n_inputs; i++) {
        const spindle_embed_input *in = &r->inputs[i];
        FUZZ_CHECK(in->text || (in->tokens && in->n_tokens >= 1), "input %d", i);
        for (int t = 0; !in->text && t < in->n_tokens; t++)
            FUZZ_CHECK(in->tokens[t] >= 0 && in->tokens[t] < VOCAB, "id");
    }
    float v[3] = {0.5f, -1.0f, 3.25f};
    float *out = calloc((size_t)r->n_inputs * 3, sizeof *out);
    FUZZ_CHECK(out, "memory");
    memcpy(out, v, sizeof v);
    char *json = sp_api_embeddings_response(r, "tiny", out, 3, 7);
    cJSON *root = cJSON_Parse(json);
    FUZZ_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "data")) ==
                   r->n_inputs, "response %.200s", json ? json : "(null)");
    cJSON_Delete(root);
    free(json);
    free(out);
}

static char *kept_history(void *ctx, const char *id) {
    (void)ctx;
    static const char kept[] = "[{\"role\":\"user\",\"content\":\"hi\"},"
                               "{\"role\":\"assistant\",\"content\":\"yo\"}]";
    return strcmp(id, "resp_kept") ? NULL : strdup(kept);
}

/* The response object and the kept conversation of a parsed request. */
static void check_responses_answer(const sp_api_request *r) {
    sp_api_head h = {.kind = SP_API_CHAT, .id = "resp_1", .created = 1, .model = "tiny"};
    sp_tool_delta call = {.index = 0, .id = "call_1", .name = "f", .arguments = "{}",
                          .arguments_len = 2};
    sp_api_delta d = {.text = "hi", .len = 2, .reasoning = "hm", .reasoning_len = 2,
                      .tool_calls = &call, .n_tool_calls = 1};
    sp_api_usage u = {.prompt_tokens = 3, .completion_tokens = 2};
    sp_strbuf out = {0};
    sp_responses_stream st;
    sp_responses_start(&out, &st, &h, r->responses_echo_json);
    sp_responses_delta(&out, &st, &d);
    sp_responses_end(&out, &st, false, &u);
    char *json = sp_responses_json(&st), *history = sp_responses_history(&st, r->conversation_json);
    cJSON *o = cJSON_Parse(json), *c = cJSON_Parse(history);
    FUZZ_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "output")) == 3,
               "response %.300s", json ? json : "(null)");
    FUZZ_CHECK(cJSON_IsArray(c) && cJSON_GetArraySize(c) >= 2, "history %.300s",
               history ? history : "(null)");
    FUZZ_CHECK(!out.oom && out.len, "events");
    cJSON_Delete(o);
    cJSON_Delete(c);
    free(json);
    free(history);
    sp_strbuf_free(&out);
    sp_responses_stream_free(&st);
}

/* A query, 1..max string documents, top_n among them; the response parses
 * with top_n results, best first. */
static void check_rerank(const sp_api_rerank *r) {
    FUZZ_CHECK(r->query, "query");
    FUZZ_CHECK(r->n_documents >= 1 && r->n_documents <= SP_API_MAX_RERANK_DOCUMENTS,
               "n_documents %d", r->n_documents);
    FUZZ_CHECK(r->top_n >= 1 && r->top_n <= r->n_documents, "top_n %d", r->top_n);
    for (int i = 0; i < r->n_documents; i++) FUZZ_CHECK(r->documents[i], "document %d", i);
    float *scores = calloc((size_t)r->n_documents, sizeof *scores);
    FUZZ_CHECK(scores, "memory");
    for (int i = 0; i < r->n_documents; i++) scores[i] = (float)((i * 7) % 5) / 4.0f;
    char *json = sp_api_rerank_response(r, "tiny", scores, 7);
    cJSON *root = cJSON_Parse(json);
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(root, "results");
    FUZZ_CHECK(cJSON_GetArraySize(results) == r->top_n, "response %.200s",
               json ? json : "(null)");
    double last = 2.0;
    const cJSON *item;
    cJSON_ArrayForEach(item, results) {
        const double s = cJSON_GetObjectItemCaseSensitive(item, "relevance_score")->valuedouble;
        FUZZ_CHECK(s <= last, "results out of order");
        last = s;
    }
    cJSON_Delete(root);
    free(json);
    free(scores);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    sp_api_error e;
    memset(&e, 0, sizeof e);
    int route = data[0] & 7;
    if ((data[0] & 8) && route <= 1) {
        sp_api_request r;
        if (sp_api_parse_anthropic(body, len, &limits, route == 1, &r, &e)) {
            FUZZ_CHECK(r.dialect == SP_API_ANTHROPIC && r.kind == SP_API_CHAT, "dialect");
            check_generation(&r);
        } else {
            check_anthropic_error(&e);
        }
        sp_api_request_free(&r);
    } else if ((data[0] & 8) && route == 2) {
        sp_api_request r;
        if (sp_api_parse_responses(body, len, &limits, kept_history, NULL, &r, &e)) {
            FUZZ_CHECK(r.dialect == SP_API_RESPONSES && r.kind == SP_API_CHAT, "dialect");
            check_generation(&r);
            check_responses_answer(&r);
        } else {
            check_error(&e);
        }
        sp_api_request_free(&r);
    } else if (route <= 1) {
        sp_api_request r;
        if (sp_api_parse_generation(route ? SP_API_COMPLETION : SP_API_CHAT, body, len,
                                    &limits, &r, &e)) {
            check_generation(&r);
            sp_api_request_free(&r);
        } else {
            check_error(&e);
            sp_api_request_free(&r);   /* left empty: freeing again is safe */
        }
    } else if (route == 2) {
        sp_api_tokenize t;
        if (sp_api_parse_tokenize(body, len, &t, &e)) {
            FUZZ_CHECK(t.content && strlen(t.content) == t.content_len, "content");
            sp_api_tokenize_free(&t);
        } else {
            check_error(&e);
        }
    } else if (route == 3) {
        int32_t *ids = NULL;
        int n = 0;
        if (sp_api_parse_detokenize(body, len, &limits, &ids, &n, &e)) {
            for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < VOCAB, "id");
            free(ids);
        } else {
            check_error(&e);
            FUZZ_CHECK(!ids, "ids returned with an error");
        }
    } else if ((data[0] & 8) && route == 5) {
        sp_api_rerank r;
        if (sp_api_parse_rerank(body, len, &limits, &r, &e)) {
            check_rerank(&r);
            sp_api_rerank_free(&r);
        } else {
            check_error(&e);
        }
    } else if (route == 5) {
        sp_api_embeddings r;
        if (sp_api_parse_embeddings(body, len, &limits, &r, &e)) {
            check_embeddings(&r);
            sp_api_embeddings_free(&r);
        } else {
            check_error(&e);
        }
    } else if (route >= 6) {
        char *name = NULL, *path = NULL;
        const bool load = route == 6;
        if (sp_api_parse_lora_request(body, len, load, &name, load ? &path : NULL, &e)) {
            FUZZ_CHECK(name && name[0] && (!load || (path && path[0])), "lora request");
            free(name);
            free(path);
        } else {
            check_error(&e);
            FUZZ_CHECK(!name && !path, "strings returned with an error");
        }
    } else {
        sp_api_request r;
        if (sp_api_parse_apply_template(body, len, &r, &e)) {
            check_messages(r.messages_json);
            sp_api_request_free(&r);
        } else {
            check_error(&e);
        }
    }
    return 0;
}
