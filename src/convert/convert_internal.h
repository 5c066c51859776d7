/* Pieces of the GGUF converter shared between convert.c (tensors),
 * convert_config.c (config.json), convert_tokenizer.c and convert_vocab.c
 * (tokenizer files). Internal to the converter. */
#ifndef SP_CONVERT_CONVERT_INTERNAL_H
#define SP_CONVERT_CONVERT_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include "spindle.h"
#include "artifacts/gguf.h"
#include "artifacts/gguf_model.h"
#include "compute/tensor.h"

/* What the tensor pass learned that config.json needs. */
typedef struct sp_conv_summary {
    const char *arch;       /* general.architecture */
    const sp_gguf_family *family; /* its tables, from the model family */
    int64_t vocab_size;     /* rows of token_embd */
    bool has_output;        /* output.weight present (untied head) */
    bool attention_bias;    /* blk.0.attn_q.bias present */
    sp_dtype dtype;         /* float type of dequantized tensors */
    cJSON *quant_modules;   /* {"module": bits, ...} of quantized modules */
} sp_conv_summary;

/* `{arch}.key` as an integer; false when absent or not an integer. */
bool sp_conv_arch_int(const sp_gguf *g, const char *arch, const char *key,
                      int64_t *out);

/* config.json object for the file. */
spindle_status sp_conv_config(const sp_gguf *g, const sp_conv_summary *s,
                              cJSON **out, spindle_error *err);

/* Write dir/tokenizer.json and dir/tokenizer_config.json. */
spindle_status sp_conv_tokenizer(const sp_gguf *g, const char *dir,
                                 spindle_error *err);

/* Serialize `json` (pretty) to dir/name atomically; frees nothing. */
spindle_status sp_conv_write_json(const cJSON *json, const char *dir,
                                  const char *name, spindle_error *err);

/* --------------------------------------------- convert_vocab.c: vocabularies */

/* Token text -> id of its last occurrence (a Python dict built in order);
 * the strings are borrowed and must outlive the map. */
typedef struct sp_conv_vocab sp_conv_vocab;
spindle_status sp_conv_vocab_new(char *const *tokens, size_t n,
                                 sp_conv_vocab **out, spindle_error *err);
void sp_conv_vocab_free(sp_conv_vocab *v);
/* -1 when absent. */
int32_t sp_conv_vocab_id(const sp_conv_vocab *v, const char *s);

/* transformers' Gemma respelling: a token of whitespace containing a space
 * becomes that many U+2581. malloc'd. */
char *sp_conv_gemma_spelling(const char *tok);

/* transformers' byte-level spelling: a token already written in GPT-2's
 * byte alphabet stays, any other is re-spelled byte by byte. malloc'd. */
bool sp_conv_in_byte_alphabet(const char *tok);
char *sp_conv_byte_level_spelling(const char *tok);

/* Merges implied by the vocabulary (transformers' generate_merges), ranked
 * by key[id] (descending); pairs[2i], pairs[2i+1] are token ids. */
spindle_status sp_conv_derive_merges(char *const *tokens, size_t n,
                                     const double *key,
                                     const sp_conv_vocab *v, int32_t **pairs,
                                     size_t *n_pairs, spindle_error *err);

#endif
