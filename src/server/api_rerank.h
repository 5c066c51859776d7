/* POST /v1/rerank (and /rerank): the request body to a validated struct,
 * and the response JSON, in the shape llama-server, vLLM, Jina and Cohere
 * share. Pure functions (fuzzed by tests/fuzz/fuzz_server_request's rerank
 * mode): no model, tokenizer or socket. */
#ifndef SP_SERVER_API_RERANK_H
#define SP_SERVER_API_RERANK_H

#include "server/api_request.h"

/* Documents per request, as many as /v1/embeddings takes inputs. */
#define SP_API_MAX_RERANK_DOCUMENTS 2048

typedef struct sp_api_rerank {
    const char *query;           /* into root */
    const char **documents;      /* into root; owned array */
    int n_documents;
    int top_n;                   /* results kept, best first (<= n_documents) */
    bool return_documents;       /* each result carries {"text": document} */
    char *model;                 /* as requested; NULL when absent */
    struct cJSON *root;          /* the body */
} sp_api_rerank;

/* `query` a string, `documents` a non-empty list of strings, `top_n` a
 * positive integer (default: every document), `return_documents` a
 * boolean (default false); `model` checked as every route checks it. */
bool sp_api_parse_rerank(const char *body, size_t len,
                         const sp_api_limits *limits, sp_api_rerank *out,
                         sp_api_error *err);
void sp_api_rerank_free(sp_api_rerank *r);

/* {"model", "object": "list", "results": [{"index", "relevance_score",
 * "document"?}], "usage": {"prompt_tokens", "total_tokens"}}: the top_n
 * documents by score, highest first (ties in input order). Returns
 * malloc'd JSON or NULL (out of memory). */
char *sp_api_rerank_response(const sp_api_rerank *r, const char *model,
                             const float *scores, int64_t prompt_tokens);

#endif
