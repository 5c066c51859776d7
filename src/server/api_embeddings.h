/* POST /v1/embeddings: the request body to a validated struct, and the
 * response JSON. Pure functions (fuzzed by tests/fuzz/fuzz_server_request's
 * embeddings mode): no model, tokenizer or socket. */
#ifndef SP_SERVER_API_EMBEDDINGS_H
#define SP_SERVER_API_EMBEDDINGS_H

#include "server/api_request.h"

/* OpenAI's limit on inputs per request. */
#define SP_API_MAX_EMBED_INPUTS 2048

/* `input` as OpenAI takes it: a string, a list of strings, a list of token
 * ids, or a list of token-id lists. Everything is owned by the struct
 * (sp_api_embeddings_free); inputs[i] point into it. */
typedef struct sp_api_embeddings {
    spindle_embed_input *inputs;
    int n_inputs;
    int32_t *ids;          /* every token input's ids, one after another */
    bool base64;           /* encoding_format "base64" (else "float") */
    int dimensions;        /* 0: the model's width */
    char *prompt, *prompt_name;   /* sentence-transformers' prompts */
    char *model;           /* as requested; NULL when absent */
    struct cJSON *root;    /* the body, which the text inputs point into */
} sp_api_embeddings;

bool sp_api_parse_embeddings(const char *body, size_t len,
                             const sp_api_limits *limits,
                             sp_api_embeddings *out, sp_api_error *err);
void sp_api_embeddings_free(sp_api_embeddings *r);

/* The response: data[i] = {object, index, embedding} with out[i][width]
 * as numbers or base64 of little-endian f32, and usage. Returns malloc'd
 * JSON or NULL (out of memory). */
char *sp_api_embeddings_response(const sp_api_embeddings *r, const char *model,
                                 const float *out, int width,
                                 int64_t prompt_tokens);

#endif
