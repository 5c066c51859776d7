/* spindle/embed.h: embeddings from encoder and decoder models. Part of the
 * public API: include "spindle.h", whose opening comment states the
 * conventions every call here follows. */
#ifndef SPINDLE_EMBED_H
#define SPINDLE_EMBED_H

#include "spindle/model.h"
#include "spindle/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------------- embeddings
 * Sentence embeddings from an encoder (BERT) or a decoder embedding model
 * (Qwen3-Embedding style), laid out as sentence-transformers saves them:
 * modules.json (Transformer, Pooling, optional Normalize),
 * 1_Pooling/config.json (mean, CLS or last-token pooling),
 * sentence_bert_config.json (max_seq_length) and
 * config_sentence_transformers.json (named prompts). An encoder without
 * modules.json pools by mean, unnormalized (sentence-transformers' default
 * for a bare model); a decoder without it is not an embedding model. */
typedef struct spindle_embedder spindle_embedder;

/* How token rows become one embedding (llama.cpp's --pooling names). */
typedef enum spindle_pooling {
    SPINDLE_POOLING_MODEL = 0,  /* the model's own: sentence-transformers'
                                   Pooling module, a GGUF's
                                   {arch}.pooling_type */
    SPINDLE_POOLING_MEAN,
    SPINDLE_POOLING_CLS,        /* the first token */
    SPINDLE_POOLING_LAST        /* the last token */
} spindle_pooling;

typedef struct spindle_embedder_options {
    int n_threads;   /* the embedder's own threads; <= 0: every core */
    /* SPINDLE_POOLING_MODEL (0): the model's; a GGUF that records none (a
     * chat model's file) is then refused with SPINDLE_ERR_UNSUPPORTED
     * rather than pooled by a guess. Another value overrides the model's.
     * Out of range: SPINDLE_ERR_ARGUMENT. */
    spindle_pooling pooling;
    int max_tokens;  /* truncation length; <= 0: max_seq_length, else the
                        model's context; never past the context (an
                        encoder's: its position table) */
} spindle_embedder_options;

/* Reads the sentence-transformers files of `model`'s directory; fails with
 * one line naming the file and key for a bad one, and with
 * SPINDLE_ERR_UNSUPPORTED for a model that is not an embedding model. The
 * embedder borrows the model (free the embedder first). options may be
 * NULL. Safe concurrently with any model call. */
spindle_status spindle_embedder_new(spindle_model *model,
                                    const spindle_embedder_options *options,
                                    spindle_embedder **out,
                                    spindle_error *err);
void spindle_embedder_free(spindle_embedder *e);
/* The embedding width; 0 for NULL. */
int spindle_embedder_dim(const spindle_embedder *e);
/* Tokens an input keeps (longer ones are truncated); 0 for NULL. */
int spindle_embedder_max_tokens(const spindle_embedder *e);

/* One input: token ids (special tokens included, as encoded with
 * add_special), or text to be encoded with the embedder's tokenizer. */
typedef struct spindle_embed_input {
    const int32_t *tokens;  /* NULL: use text */
    int n_tokens;
    const char *text;       /* UTF-8, NUL-terminated */
} spindle_embed_input;

typedef struct spindle_embed_request {
    const spindle_embed_input *inputs;
    int n_inputs;
    /* Needed for text inputs; borrowed for the call. */
    const spindle_tokenizer *tokenizer;
    /* Prepended to every text input: a literal prompt, else the named one
     * of config_sentence_transformers.json (NULL: the file's default
     * prompt, if any). Unknown names fail. */
    const char *prompt;
    const char *prompt_name;
    /* Matryoshka truncation to the first `dimensions` values (<= 0: all),
     * renormalized when the model normalizes. */
    int dimensions;
} spindle_embed_request;

/* Embeds every input in input order into out[n_inputs][width] (width:
 * dimensions, else spindle_embedder_dim), many inputs per forward pass.
 * Inputs longer than max_tokens are truncated as sentence-transformers
 * does (the leading tokens kept, the special tokens the tokenizer adds
 * kept); a request of any size is split into passes, never refused for
 * its length. *n_prompt_tokens (may be NULL) gets the tokens embedded.
 * Thread-safe: calls on one embedder serialize on its lock, and may run
 * concurrently with the model's other calls (spindle_forward, an engine),
 * since the embedder has its own scratch and threads. */
spindle_status spindle_embed(spindle_embedder *e,
                             const spindle_embed_request *request,
                             float *out, int64_t *n_prompt_tokens,
                             spindle_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_EMBED_H */
