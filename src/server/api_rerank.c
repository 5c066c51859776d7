/* The /v1/rerank request and response (llama-server's and vLLM's shape).
 * Pure functions, fuzzed by tests/fuzz/fuzz_server_request.c (its rerank
 * route). */
#include "server/api_rerank.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool read_documents(const cJSON *v, sp_api_rerank *r, sp_api_error *err) {
    if (!v) return sp_api_bad(err, "documents", "'documents' is required");
    if (!cJSON_IsArray(v))
        return sp_api_bad(err, "documents", "'documents' must be a list of strings");
    const int n = cJSON_GetArraySize(v);
    if (n == 0) return sp_api_bad(err, "documents", "'documents' is an empty list");
    if (n > SP_API_MAX_RERANK_DOCUMENTS)
        return sp_api_bad(err, "documents", "'documents' has %d items (at most %d)",
                          n, SP_API_MAX_RERANK_DOCUMENTS);
    if (!(r->documents = calloc((size_t)n, sizeof *r->documents)))
        return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        if (!cJSON_IsString(x))
            return sp_api_bad(err, "documents", "'documents' item %d is not a "
                              "string", r->n_documents);
        r->documents[r->n_documents++] = x->valuestring;
    }
    return true;
}

static bool read_options(const cJSON *root, sp_api_rerank *r, sp_api_error *err) {
    const cJSON *v = field(root, "top_n");
    r->top_n = r->n_documents;
    if (v) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
        if (d != floor(d) || d < 1 || d > 1e9)
            return sp_api_bad(err, "top_n", "'top_n' must be a positive integer");
        if (d < r->n_documents) r->top_n = (int)d;
    }
    if ((v = field(root, "return_documents"))) {
        if (!cJSON_IsBool(v))
            return sp_api_bad(err, "return_documents",
                              "'return_documents' must be a boolean");
        r->return_documents = cJSON_IsTrue(v);
    }
    return true;
}

bool sp_api_parse_rerank(const char *body, size_t len,
                         const sp_api_limits *limits, sp_api_rerank *r,
                         sp_api_error *err) {
    memset(r, 0, sizeof *r);
    r->root = cJSON_ParseWithLength(body, len);
    if (!r->root || !cJSON_IsObject(r->root)) {
        sp_api_rerank_free(r);
        return sp_api_bad(err, NULL, "request body must be a JSON object");
    }
    const cJSON *model, *q = field(r->root, "query");
    bool ok = sp_api_check_model(r->root, limits, &model, err);
    if (ok && model && !(r->model = strdup(model->valuestring)))
        ok = sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
    if (ok && !q) ok = sp_api_bad(err, "query", "'query' is required");
    if (ok && !cJSON_IsString(q))
        ok = sp_api_bad(err, "query", "'query' must be a string");
    if (ok) r->query = q->valuestring;
    ok = ok && read_documents(field(r->root, "documents"), r, err) &&
         read_options(r->root, r, err);
    if (!ok) sp_api_rerank_free(r);
    return ok;
}

void sp_api_rerank_free(sp_api_rerank *r) {
    free(r->documents);
    free(r->model);
    cJSON_Delete(r->root);
    memset(r, 0, sizeof *r);
}

/* Indices sorted by score, highest first; equal scores in input order. */
typedef struct ranked {
    float score;
    int index;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->index - y->index;
}

char *sp_api_rerank_response(const sp_api_rerank *r, const char *model,
                             const float *scores, int64_t prompt_tokens) {
    ranked *order = malloc((size_t)r->n_documents * sizeof *order);
    cJSON *root = cJSON_CreateObject();
    bool ok = order && root;
    for (int i = 0; ok && i < r->n_documents; i++)
        order[i] = (ranked){scores[i], i};
    if (ok) qsort(order, (size_t)r->n_documents, sizeof *order, by_score);
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *results = cJSON_AddArrayToObject(root, "results");
    ok = ok && results;
    for (int k = 0; ok && k < r->top_n; k++) {
        cJSON *item = cJSON_CreateObject();
        ok = item && cJSON_AddItemToArray(results, item);
        if (!ok) {
            cJSON_Delete(item);
            break;
        }
        cJSON_AddNumberToObject(item, "index", order[k].index);
        cJSON_AddNumberToObject(item, "relevance_score", order[k].score);
        if (r->return_documents) {
            cJSON *doc = cJSON_AddObjectToObject(item, "document");
            ok = doc && cJSON_AddStringToObject(doc, "text",
                                                r->documents[order[k].index]);
        }
    }
    cJSON *usage = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)prompt_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)prompt_tokens);
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    free(order);
    return json;
}
