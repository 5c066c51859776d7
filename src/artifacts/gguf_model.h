/* A GGUF file as a model: its tensors under Hugging Face names and its
 * metadata as a config.json-shaped object, so that the model families bind
 * and configure GGUF files with the same code as safetensors directories.
 *
 * Tensor names follow llama.cpp (gguf-py's TENSOR_NAMES): blk.N.attn_q ->
 * model.layers.N.self_attn.q_proj and so on, plus what the model family
 * adds (sp_gguf_family); names without a counterpart keep their GGUF
 * spelling. Shapes are reversed to row-major order (GGUF's
 * ne[0] is the contiguous dimension). */
#ifndef SP_ARTIFACTS_GGUF_MODEL_H
#define SP_ARTIFACTS_GGUF_MODEL_H

#include "spindle.h"
#include "artifacts/config.h"
#include "artifacts/gguf.h"
#include "artifacts/safetensors.h"

typedef struct sp_gguf_weights sp_gguf_weights;

/* ------------------------------------------- what a model family supplies
 * artifacts/ knows the GGUF format and llama.cpp's generic spelling; each
 * family in models/ knows its own additions and hands them down as this
 * table (artifacts/ never includes models/). */

/* A per-layer module: blk.N.<gguf>.* <-> model.layers.N.<hf>.* */
typedef struct sp_gguf_name_map {
    const char *gguf, *hf;
} sp_gguf_name_map;

typedef enum sp_gguf_key_kind {
    SP_GGUF_KEY_COUNT,   /* a positive integer, at most 2^30 */
    SP_GGUF_KEY_REAL,    /* a finite number */
    /* A count that means the same in a Hugging Face / mlx-lm config.json
     * (Qwen3-MoE's expert sizes), so `spindle convert` writes it there;
     * convert refuses files carrying any other family key. */
    SP_GGUF_KEY_HF_COUNT
} sp_gguf_key_kind;

/* An optional `{arch}.key` copied to config.json's `json` when present. */
typedef struct sp_gguf_key_map {
    const char *key, *json;
    sp_gguf_key_kind kind;
} sp_gguf_key_map;

typedef struct sp_gguf_family {
    const char *arch;        /* general.architecture */
    const char *model_type;  /* the transformers model_type it loads as */
    const char *hf_class;    /* its *ForCausalLM, for converted configs */
    /* blk.N.* modules this family spells differently from, or in addition
     * to, llama.cpp's common ones (attn_*, ffn_{gate,up,down,norm});
     * looked up first. {NULL}-terminated, or NULL. */
    const sp_gguf_name_map *layer_names;
    /* Non-layer tensors the family adds, <gguf>.* <-> <hf>.* (Gemma 4's
     * per-layer embedding table); looked up first. {NULL}-terminated, or
     * NULL. */
    const sp_gguf_name_map *global_names;
    /* The family's own metadata keys. {NULL}-terminated, or NULL. */
    const sp_gguf_key_map *keys;
    /* What does not map key for key (per-layer arrays, settings a tensor
     * carries), run on the config.json object after the common keys and
     * `keys`; it may replace what they set. A family with this hook reads
     * those itself: the common reading then skips array-valued counts
     * (llama.cpp's per-layer feed_forward_length, attention.head_count_kv)
     * and leaves the rope_freqs tensor to it. NULL: none. */
    spindle_status (*config)(const sp_gguf_weights *w, cJSON *json,
                             spindle_error *err);
    /* config.json keys (a JSON object text) that llama.cpp's loader of
     * this architecture takes as fixed, so that GGUF files carry no key
     * for them (Qwen3-MoE: every layer MoE, top-k renormalized); `spindle
     * convert` writes them. NULL: none. */
    const char *implied_config;
    /* The family's config hook derives the head sizes itself: the common
     * reading writes no head_dim and no partial_rotary_factor, and accepts
     * a value_length other than key_length (llama.cpp's deepseek2 stores
     * MLA's latent sizes there). */
    bool own_head_dims;
    /* llama.cpp permuted the q/k rows for its interleaved RoPE (Llama). */
    bool rope_interleaved;
    /* llama.cpp's converter stored norm weights with the 1 of a (1 + w)
     * norm added (Gemma). */
    bool norm_plus_one;
} sp_gguf_family;

/* The family of general.architecture `arch` among `families` (NULL-
 * terminated), or NULL. */
const sp_gguf_family *sp_gguf_family_find(const sp_gguf_family *const *families,
                                          const char *arch);
/* general.architecture of g (a name without NUL, shorter than cap) into
 * out, and its family among `families`; an unknown one is
 * SPINDLE_ERR_UNSUPPORTED listing the supported names. */
spindle_status sp_gguf_family_of(const sp_gguf *g,
                                 const sp_gguf_family *const *families,
                                 char *out, size_t cap,
                                 const sp_gguf_family **family,
                                 spindle_error *err);

/* Whether `arg` names a GGUF model: a file (which must then be GGUF), or a
 * directory with no config.json and exactly one *.gguf. *file is the
 * malloc'd path of the GGUF file, or NULL when `arg` is something else (a
 * Hugging Face directory or repo id). */
spindle_status sp_gguf_model_locate(const char *arg, char **file,
                                    spindle_error *err);

/* The Hugging Face name of GGUF tensor `name` (blk.3.attn_q.weight ->
 * model.layers.3.self_attn.q_proj.weight) in `family`'s spelling, into
 * out[cap]. False when the name has no counterpart or does not fit. */
bool sp_gguf_translate_name(const char *name, const sp_gguf_family *family,
                            char *out, size_t cap);

/* Tensor t of g as an sp_tensor_info under its GGUF name (row-major shape,
 * dtype or ggml_quant); an unreadable ggml type is SPINDLE_ERR_UNSUPPORTED. */
spindle_status sp_gguf_tensor_info(const sp_gguf *g, const sp_gguf_tensor *t,
                                   sp_tensor_info *info, spindle_error *err);

/* Open the file and index its tensors under Hugging Face names, in the
 * spelling of its family among `families` (NULL-terminated); a file of
 * another architecture is SPINDLE_ERR_UNSUPPORTED. */
spindle_status sp_gguf_weights_open(const char *path,
                                    const sp_gguf_family *const *families,
                                    sp_gguf_weights **out,
                                    spindle_error *err);
void sp_gguf_weights_free(sp_gguf_weights *w);

const sp_tensor_info *sp_gguf_weights_find(const sp_gguf_weights *w,
                                           const char *hf_name);
size_t sp_gguf_weights_count(const sp_gguf_weights *w);
const sp_gguf *sp_gguf_weights_file(const sp_gguf_weights *w);
const sp_gguf_family *sp_gguf_weights_family(const sp_gguf_weights *w);

/* ------------------------------------------------- metadata (gguf_config.c)
 * Shared with the converter, which writes config.json from the same keys. */

/* `{arch}.key` of g, or NULL when absent. */
const sp_gguf_value *sp_gguf_arch_value(const sp_gguf *g, const char *arch,
                                        const char *key);

/* A positive integer `{arch}.key` (at most 2^30, of any numeric type: an
 * integral f32 counts) into *out. Absent: *out is left as it is, and that
 * is an error only when `required`. */
spindle_status sp_gguf_arch_count(const sp_gguf *g, const char *arch,
                                  const char *key, bool required,
                                  int64_t *out, spindle_error *err);

/* A finite number `{arch}.key` of any numeric type (u8..i64, f32, f64; not
 * bool) into *out; *found says whether the key is there (absent is no
 * error). */
spindle_status sp_gguf_arch_real(const sp_gguf *g, const char *arch,
                                 const char *key, double *out, bool *found,
                                 spindle_error *err);

/* Fill cfg from the metadata, llama.cpp's common keys and the family's own
 * (sp_gguf_family.keys), through sp_config_from_json. The dimensions are
 * checked before anything is derived from them. */
spindle_status sp_gguf_model_config(const sp_gguf_weights *w,
                                    sp_model_config *cfg, spindle_error *err);

#endif
