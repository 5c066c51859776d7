/* The request bodies of the server's JSON routes, parsed and validated.
 *
 * Every parser here is a pure function from bytes (plus the served model's
 * fixed facts, sp_api_limits) to a request struct or an sp_api_error: no
 * model, tokenizer or socket is touched, so tests/fuzz/fuzz_server_request
 * drives them directly. Unknown fields are ignored, as OpenAI clients
 * expect; a JSON null counts as an absent field. */
#ifndef SP_SERVER_API_REQUEST_H
#define SP_SERVER_API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

/* OpenAI's error object: {"error": {"message", "type", "param", "code"}}
 * (param and code null when empty), sent with http_status. */
typedef struct sp_api_error {
    int http_status;
    const char *type;     /* static: "invalid_request_error", ... */
    char param[64];
    char code[48];
    char message[400];
} sp_api_error;

/* Fill `err` (printf-style message) and return false, so that a check reads
 * `return sp_api_fail(...)`. `param` and `code` may be NULL. */
bool sp_api_fail(sp_api_error *err, int http_status, const char *type,
                 const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The common case: 400 invalid_request_error naming `param`. */
bool sp_api_bad(sp_api_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A library failure on the client's input as an API error: argument,
 * format, template, limit and unsupported errors are the request's fault
 * (400 naming `param`), memory 503, anything else 500. The one mapping of
 * spindle_status to HTTP statuses. */
void sp_api_error_from_status(sp_api_error *err, spindle_status st, const char *param,
                              const char *message);

/* The most stop strings a request may give (OpenAI's limit). */
#define SP_API_MAX_STOP 4
/* The most adapters one request's "adapters" may stack. */
#define SP_API_MAX_ADAPTERS 16
/* The most logit_bias entries (OpenAI's documented maximum is 300). */
#define SP_API_MAX_LOGIT_BIAS 1024

/* What a parser needs to know of the served model. */
typedef struct sp_api_limits {
    int vocab_size;                /* token ids must be below it */
    const char *const *model_names;/* names `model` may take (any if none) */
    int n_model_names;
    int default_max_tokens;        /* when the request gives none */
    int n_slots;                   /* id_slot must be below it */
    /* The chat template's image marker text (Gemma 3: <start_of_image>)
     * an image_url part becomes; NULL: the model takes no images. */
    const char *image_marker;
    size_t max_image_bytes;        /* an image's bytes; 0: SP_API_IMAGE_BYTES_DEFAULT */
    /* http(s) image URLs are taken (and fetched later, remote_media.h);
     * false: they are refused with a 400 naming --allow-remote-media. */
    bool allow_remote_media;
} sp_api_limits;

#define SP_API_IMAGE_BYTES_DEFAULT ((size_t)20 << 20)

/* The most images one request may carry. */
#define SP_API_MAX_IMAGES 16

/* `model` of a request body (NULL when absent, *model borrowed from root):
 * a string naming the served model, else 400 / 404. */
struct cJSON;
bool sp_api_check_model(const struct cJSON *root, const sp_api_limits *limits,
                        const struct cJSON **model, sp_api_error *err);

typedef enum sp_api_kind {
    SP_API_CHAT = 0,    /* POST /v1/chat/completions */
    SP_API_COMPLETION   /* POST /v1/completions */
} sp_api_kind;

/* Whose API a generation request speaks: the body it came in and the
 * shape of its answer and errors. */
typedef enum sp_api_dialect {
    SP_API_OPENAI = 0,  /* chat / text completions */
    SP_API_ANTHROPIC,   /* POST /v1/messages (api_anthropic.c) */
    SP_API_RESPONSES    /* POST /v1/responses (api_responses.c) */
} sp_api_dialect;

/* tool_choice, parallel_tool_calls and reasoning_format (api_tools.c). */
typedef enum sp_api_tool_choice_kind {
    SP_TOOL_CHOICE_AUTO = 0,
    SP_TOOL_CHOICE_NONE,      /* tools shown to the template, no call parsed */
    SP_TOOL_CHOICE_REQUIRED,
    SP_TOOL_CHOICE_NAMED      /* {"type": "function", "function": {"name"}} */
} sp_api_tool_choice_kind;

typedef struct sp_api_tool_choice {
    sp_api_tool_choice_kind kind;
    char name[128];           /* SP_TOOL_CHOICE_NAMED: a function of `tools` */
    bool single_call;         /* parallel_tool_calls: false */
    bool no_reasoning;        /* reasoning_format: "none" (the text as generated) */
} sp_api_tool_choice;

/* A generation request. Strings and arrays are malloc'd and owned by the
 * struct (sp_api_request_free). */
/* The most choices (`n`) one request may ask for. */
#define SP_API_MAX_CHOICES 16

typedef struct sp_api_request {
    sp_api_kind kind;
    sp_api_dialect dialect;
    char *model;                 /* as requested; NULL when absent */
    /* chat: the messages with text content parts joined and tool-call
     * arguments parsed to objects (what chat templates expect), tools and
     * chat_template_kwargs as given; JSON text, NULL when absent */
    char *messages_json;
    char *tools_json;
    char *template_kwargs_json;
    /* chat: the image_url parts' decoded files, in the order of the image
     * markers they left in messages_json; a remote image's file is NULL
     * and image_urls holds its URL (fetched when the job encodes it) */
    unsigned char *images[SP_API_MAX_IMAGES];
    size_t image_bytes[SP_API_MAX_IMAGES];
    char *image_urls[SP_API_MAX_IMAGES];
    int n_images;
    sp_api_tool_choice tool_choice;
    /* completion: prompt text, or token ids (prompt_ids non-NULL) */
    char *prompt_text;
    int32_t *prompt_ids;
    int n_prompt_ids;

    bool stream;
    bool include_usage;          /* stream_options.include_usage */
    int max_tokens;              /* max_completion_tokens, max_tokens or the
                                    default */
    bool max_tokens_given;       /* by the request, not the default */
    int n_choices;               /* n: 1..SP_API_MAX_CHOICES */
    spindle_gen_params gen;      /* sampler and logits processors; its
                                    arrays point into this struct */
    bool seed_given;
    char *stop[SP_API_MAX_STOP];
    int n_stop;
    /* chat: logprobs (bool) + top_logprobs (0..20); completions: logprobs
     * as an integer 0..5 of alternatives */
    bool logprobs;
    int top_logprobs;
    int32_t *bias_ids;
    float *bias_values;
    /* Speculative decoding, where the server runs it (--spec): K as
     * num_draft_tokens (mlx_lm.server) or speculative.n_max (llama-server),
     * 0 turning it off for the request; speculative.n_min, the shortest
     * draft verified. -1: the server's. */
    int draft_tokens;
    int min_draft_tokens;
    /* The adapter asked for besides `model` (server/adapters.c resolves
     * them): mlx_lm.server's "adapters" (mounted adapters' names or
     * paths: one string, or a list whose adapters are stacked), llama-
     * server's "lora" (the one entry with a non-zero scale). */
    char **adapters;
    int n_adapters;
    /* The mounted adapters chosen, comma-separated (adapters.c), and the
     * stack made of them when there are several (the request's
     * reference). */
    char *adapter_name;
    spindle_adapter *stacked_adapter;
    bool has_lora;
    int lora_id;
    float lora_scale;
    /* response_format / grammar: a spindle_grammar_kind, or -1 for none;
     * the text (GBNF or schema JSON) and the field it came from. The
     * compiled grammar (job.c) is owned here too. */
    int grammar_kind;
    char *grammar_text;
    const char *grammar_param;
    spindle_grammar *grammar;
    /* Durable requests (durable.h): the checkpoint to resume, NULL when
     * absent. */
    char *resume_id;
    /* llama-server's slot (slots.h): [0, n_slots), or -1 for none (absent,
     * or its -1, "any slot"). */
    int id_slot;
    /* POST /v1/responses (api_responses.c): the conversation without the
     * instructions (chat messages JSON: what a later previous_response_id
     * continues), the request's fields that the response object repeats
     * (a JSON object), and whether the response is kept (store). */
    char *conversation_json;
    char *responses_echo_json;
    bool store;
    /* A diffusion model's settings (diffusion_job.h): diffusion_steps and
     * block_length, 0 when absent; remasking when remasking_given. */
    int diffusion_steps, block_length;
    spindle_remasking remasking;
    bool remasking_given;
} sp_api_request;

/* api_lora.c: "adapters" and "lora" of a generation body (cJSON root). */
struct cJSON;
bool sp_api_read_adapter_fields(const struct cJSON *root, sp_api_request *r,
                                sp_api_error *err);

/* POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
 * /v1/unload_lora_adapter {"lora_name"} (vLLM's bodies; path NULL for
 * unload). Both strings malloc'd. */
bool sp_api_parse_lora_request(const char *body, size_t len, bool need_path,
                               char **name, char **path, sp_api_error *err);

/* Parse a chat or completion body. On failure `*out` is left empty (safe to
 * free) and `err` says why. */
bool sp_api_parse_generation(sp_api_kind kind, const char *body, size_t len,
                             const sp_api_limits *limits, sp_api_request *out,
                             sp_api_error *err);
void sp_api_request_free(sp_api_request *r);

/* POST /v1/messages (Anthropic's Messages API) as a chat request of dialect
 * SP_API_ANTHROPIC: system, messages (text, tool_use and tool_result
 * blocks), tools, tool_choice, stop_sequences, max_tokens (required unless
 * count_only: the body of /v1/messages/count_tokens), temperature, top_p,
 * top_k, stream, thinking (the template's enable_thinking). The rest of the
 * body is ignored (metadata, ...). */
bool sp_api_parse_anthropic(const char *body, size_t len, const sp_api_limits *limits,
                            bool count_only, sp_api_request *out, sp_api_error *err);

/* previous_response_id's conversation (chat messages as a JSON array,
 * malloc'd), or NULL when no response of that id is kept. */
typedef char *(*sp_api_history_fn)(void *ctx, const char *response_id);

/* POST /v1/responses (OpenAI's Responses API) as a chat request of dialect
 * SP_API_RESPONSES: instructions, input (a string, or message,
 * function_call and function_call_output items), previous_response_id
 * (its conversation from `history`; an unknown id is a 404), function
 * tools, tool_choice, text.format (json_schema / json_object through the
 * grammar engine), max_output_tokens, temperature, top_p, stream, store,
 * parallel_tool_calls, reasoning and metadata (repeated in the answer). */
bool sp_api_parse_responses(const char *body, size_t len, const sp_api_limits *limits,
                            sp_api_history_fn history, void *ctx, sp_api_request *out,
                            sp_api_error *err);

/* POST /tokenize: llama-server's {"content", "add_special" (default false),
 * "parse_special" (default true; false is refused: Spindle's tokenizers
 * always match special tokens), "with_pieces"}. */
typedef struct sp_api_tokenize {
    char *content;
    size_t content_len;
    bool add_special;
    bool with_pieces;
} sp_api_tokenize;

bool sp_api_parse_tokenize(const char *body, size_t len, sp_api_tokenize *out,
                           sp_api_error *err);
void sp_api_tokenize_free(sp_api_tokenize *t);

/* POST /detokenize: {"tokens": [ids]}, each id below vocab_size. */
bool sp_api_parse_detokenize(const char *body, size_t len,
                             const sp_api_limits *limits, int32_t **ids,
                             int *n_ids, sp_api_error *err);

/* POST /apply-template: {"messages", "tools", "chat_template_kwargs"} as for
 * chat completions; only those three fields of `out` are set. */
bool sp_api_parse_apply_template(const char *body, size_t len,
                                 sp_api_request *out, sp_api_error *err);

#endif
