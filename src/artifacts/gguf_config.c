/* GGUF metadata -> a config.json-shaped object (llama.cpp's key names,
 * llama-arch.cpp LLM_KV_*), parsed by the same code as config.json, so the
 * families read their settings the same way for both formats.
 *
 * Here are the keys every family shares; a family's own keys come from its
 * sp_gguf_family table, and what does not map key for key from its config
 * hook, run last. llama.cpp conventions carried over: files whose
 * family says rope_interleaved have q/k rows permuted for llama.cpp's
 * interleaved RoPE (rope_traditional here, no repacking); the stop tokens
 * are the file's eos/eot/eom ids plus the end-of-turn tokens llama.cpp
 * recognizes by their text. */
#include "artifacts/gguf_model.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct meta {
    const sp_gguf *g;
    const char *arch;
    const char *path;
    /* The family's config hook reads per-layer arrays itself. */
    bool family_arrays;
    spindle_error *err;
} meta;

const sp_gguf_value *sp_gguf_arch_value(const sp_gguf *g, const char *arch,
                                        const char *key) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return sp_gguf_find(g, full);
}

spindle_status sp_gguf_arch_count(const sp_gguf *g, const char *arch,
                                  const char *key, bool required,
                                  int64_t *out, spindle_error *err) {
    const sp_gguf_value *v = sp_gguf_arch_value(g, arch, key);
    int64_t x = 0;
    if (!v && !required) return SPINDLE_OK;
    double d = 0;
    if (v && sp_gguf_value_number(v, &d) && d == floor(d) && d >= 1 &&
        d <= (double)(1 << 30))
        x = (int64_t)d;
    if (!x)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: '%s.%s' is %s (a positive integer is needed)",
                       sp_gguf_path(g), arch, key, v ? "invalid" : "missing");
    *out = x;
    return SPINDLE_OK;
}

spindle_status sp_gguf_arch_real(const sp_gguf *g, const char *arch,
                                 const char *key, double *out, bool *found,
                                 spindle_error *err) {
    const sp_gguf_value *v = sp_gguf_arch_value(g, arch, key);
    double x;
    *found = v != NULL;
    if (!v) return SPINDLE_OK;
    if (!sp_gguf_value_number(v, &x) || !isfinite(x))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: '%s.%s' is not a number",
                       sp_gguf_path(g), arch, key);
    *out = x;
    return SPINDLE_OK;
}

static const sp_gguf_value *arch_key(const meta *m, const char *key) {
    return sp_gguf_arch_value(m->g, m->arch, key);
}

/* The counts llama.cpp reads per layer (get_key_or_arr) that a family's
 * config hook reads itself when they are arrays; every other count is one
 * number (an array block_count or head_count left the hook without
 * num_hidden_layers, check_head_dims dividing by zero). */
static bool per_layer_key(const meta *m, const char *key) {
    return m->family_arrays && (!strcmp(key, "feed_forward_length") ||
                                !strcmp(key, "attention.head_count_kv"));
}

/* A positive integer `{arch}.key` into json[name] (json NULL: only into
 * *value); required or optional. */
static spindle_status put_int(const meta *m, cJSON *json, const char *key,
                              const char *name, bool required,
                              int64_t *value) {
    const sp_gguf_value *v = arch_key(m, key);
    if (v && v->type == SP_GGUF_ARRAY && per_layer_key(m, key))
        return SPINDLE_OK;
    int64_t x = 0;
    spindle_status st = sp_gguf_arch_count(m->g, m->arch, key, required, &x,
                                           m->err);
    if (st || !x) return st;
    if (json && !cJSON_AddNumberToObject(json, name, (double)x))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    if (value) *value = x;
    return SPINDLE_OK;
}

/* An optional finite number `{arch}.key` into json[name]. */
static spindle_status put_num(const meta *m, cJSON *json, const char *key,
                              const char *name) {
    double x = 0;
    bool found = false;
    spindle_status st = sp_gguf_arch_real(m->g, m->arch, key, &x, &found,
                                          m->err);
    if (st || !found) return st;
    if (!cJSON_AddNumberToObject(json, name, x))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

static bool has_tensor(const sp_gguf_weights *w, const char *hf_name) {
    return sp_gguf_weights_find(w, hf_name) != NULL;
}

static spindle_status rope_scaling(const meta *m, cJSON *json) {
    const sp_gguf_value *t = arch_key(m, "rope.scaling.type");
    const sp_gguf_value *lin = arch_key(m, "rope.scale_linear"); /* old files */
    sp_gguf_str type = {"linear", 6};
    if (t && !sp_gguf_value_str(t, &type))
        return sp_fail(m->err, SPINDLE_ERR_FORMAT,
                       "%s: '%s.rope.scaling.type' is not a string", m->path,
                       m->arch);
    if ((!t && !lin) || (type.len == 4 && !memcmp(type.ptr, "none", 4)))
        return SPINDLE_OK;
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(type.len < 31 ? type.len : 31),
             type.ptr);
    cJSON *rs = cJSON_AddObjectToObject(json, "rope_scaling");
    if (!rs || !cJSON_AddStringToObject(rs, "type", name))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st;
    if ((st = put_num(m, rs, t ? "rope.scaling.factor" : "rope.scale_linear",
                      "factor")) ||
        (st = put_num(m, rs, "rope.scaling.original_context_length",
                      "original_max_position_embeddings")) ||
        (st = put_num(m, rs, "rope.scaling.yarn_beta_fast", "beta_fast")) ||
        (st = put_num(m, rs, "rope.scaling.yarn_beta_slow", "beta_slow")) ||
        /* llama.cpp: mscale 1 over mscale_all_dim = this (DeepSeek-V2's
         * exception aside) */
        (st = put_num(m, rs, "rope.scaling.yarn_log_multiplier",
                      "mscale_all_dim")))
        return st;
    return SPINDLE_OK;
}

static spindle_status add_id(cJSON *arr, int64_t id, spindle_error *err) {
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if (e->valuedouble == (double)id) return SPINDLE_OK;
    if (!cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)id)))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

/* bos and the end-of-generation ids. */
static spindle_status special_ids(const meta *m, cJSON *json) {
    int64_t id;
    const sp_gguf_value *v = sp_gguf_find(m->g, "tokenizer.ggml.bos_token_id");
    if (v && sp_gguf_value_i64(v, &id) && id >= 0 &&
        !cJSON_AddNumberToObject(json, "bos_token_id", (double)id))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    /* a masked-diffusion model's mask token (LLaDA's <|mdm_mask|>) */
    v = sp_gguf_find(m->g, "tokenizer.ggml.mask_token_id");
    if (v && sp_gguf_value_i64(v, &id) && id >= 0 &&
        !cJSON_AddNumberToObject(json, "mask_token_id", (double)id))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    /* whether position i's logits predict token i + 1 (Dream) */
    bool shift;
    v = sp_gguf_find(m->g, "diffusion.shift_logits");
    if (v && sp_gguf_value_bool(v, &shift) &&
        !cJSON_AddBoolToObject(json, "diffusion_shift_logits", shift))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    cJSON *eos = cJSON_AddArrayToObject(json, "eos_token_id");
    if (!eos) return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    static const char *const id_keys[] = {"tokenizer.ggml.eos_token_id",
                                          "tokenizer.ggml.eot_token_id",
                                          "tokenizer.ggml.eom_token_id"};
    spindle_status st;
    for (size_t i = 0; i < sizeof id_keys / sizeof *id_keys; i++) {
        v = sp_gguf_find(m->g, id_keys[i]);
        if (v && sp_gguf_value_i64(v, &id) && id >= 0 &&
            (st = add_id(eos, id, m->err)))
            return st;
    }
    /* llama.cpp (llama-vocab.cpp) also ends generation on these texts. */
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
        "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|end_of_text|>"};
    v = sp_gguf_find(m->g, "tokenizer.ggml.tokens");
    uint64_t n = v && v->type == SP_GGUF_ARRAY ? sp_gguf_array_count(v) : 0;
    for (uint64_t i = 0; i < n; i++) {
        sp_gguf_str s;
        if (!sp_gguf_array_str(v, i, &s) || s.len < 5 || s.len > 16 ||
            s.ptr[0] != '<')
            continue;
        for (size_t k = 0; k < sizeof eog_texts / sizeof *eog_texts; k++)
            if (strlen(eog_texts[k]) == s.len &&
                !memcmp(eog_texts[k], s.ptr, s.len) &&
                (st = add_id(eos, (int64_t)i, m->err)))
                return st;
    }
    return SPINDLE_OK;
}

/* llama.cpp's attention.sliding_window_pattern as a flag per layer (its
 * other form is a period, which families read as a count) is transformers'
 * layer_types. */
static spindle_status layer_types(const meta *m, cJSON *json) {
    const sp_gguf_value *v = arch_key(m, "attention.sliding_window_pattern");
    if (!v || v->type != SP_GGUF_ARRAY) return SPINDLE_OK;
    uint64_t n = sp_gguf_array_count(v);
    if (n > 4096) /* block_count's own bound */
        return sp_fail(m->err, SPINDLE_ERR_FORMAT,
                       "%s: '%s.attention.sliding_window_pattern' lists %llu "
                       "layers", m->path, m->arch, (unsigned long long)n);
    cJSON *types = cJSON_AddArrayToObject(json, "layer_types");
    if (!types) return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        sp_gguf_value e;
        bool sliding;
        if (!sp_gguf_array_at(v, i, &e) || !sp_gguf_value_bool(&e, &sliding))
            return sp_fail(m->err, SPINDLE_ERR_FORMAT,
                           "%s: '%s.attention.sliding_window_pattern' must "
                           "be a count or an array of bools", m->path,
                           m->arch);
        if (!cJSON_AddItemToArray(types, cJSON_CreateString(
                sliding ? "sliding_attention" : "full_attention")))
            return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    return SPINDLE_OK;
}

/* The family's own optional keys (sp_gguf_family.keys); a count given as
 * an array is layer_types' form, read above. */
static spindle_status family_keys(const meta *m, const sp_gguf_family *family,
                                  cJSON *json) {
    spindle_status st = layer_types(m, json);
    for (const sp_gguf_key_map *k = family->keys; k && k->key && !st; k++) {
        const sp_gguf_value *v = arch_key(m, k->key);
        if (v && v->type == SP_GGUF_ARRAY &&
            !strcmp(k->key, "attention.sliding_window_pattern"))
            continue;
        st = k->kind != SP_GGUF_KEY_REAL
                 ? put_int(m, json, k->key, k->json, false, NULL)
                 : put_num(m, json, k->key, k->json);
    }
    return st;
}

/* The attention dimensions as the engine will derive them, checked before
 * anything divides by them: one line naming the keys at fault. */
static spindle_status check_head_dims(const meta *m, int64_t hidden,
                                      int64_t heads, int64_t *head_dim,
                                      int64_t rope_dim) {
    if (!*head_dim) {
        /* llama.cpp's n_embd_head_k = n_embd / n_head. */
        if (heads > hidden)
            return sp_fail(m->err, SPINDLE_ERR_FORMAT,
                           "%s: attention.head_count %lld exceeds "
                           "embedding_length %lld and no attention.key_length "
                           "gives the head size", m->path, (long long)heads,
                           (long long)hidden);
        *head_dim = hidden / heads;
    }
    if (rope_dim && (rope_dim > *head_dim || rope_dim % 2))
        return sp_fail(m->err, SPINDLE_ERR_FORMAT,
                       "%s: rope.dimension_count %lld must be even and at "
                       "most the head size %lld", m->path,
                       (long long)rope_dim, (long long)*head_dim);
    return SPINDLE_OK;
}

static spindle_status build(const sp_gguf_weights *w, const meta *m,
                            cJSON *json) {
    const sp_gguf_family *family = sp_gguf_weights_family(w);
    if (!family->config && has_tensor(w, "rope_freqs.weight"))
        return sp_fail(m->err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: rope_freqs (RoPE frequency factors, Llama 3 "
                       "scaling) is not supported", m->path);
    const sp_tensor_info *emb = sp_gguf_weights_find(w, "model.embed_tokens.weight");
    if (!emb || emb->ndim != 2)
        return sp_fail(m->err, SPINDLE_ERR_FORMAT,
                       "%s: missing 2-D tensor 'token_embd.weight'", m->path);
    int64_t hidden = 0, heads = 0, head_dim = 0;
    spindle_status st;
    if (!cJSON_AddStringToObject(json, "model_type", family->model_type) ||
        !cJSON_AddNumberToObject(json, "vocab_size", (double)emb->shape[0]))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    /* feed_forward_length is optional as in llama.cpp: a converter whose
     * config has no dense width (Qwen3.5 MoE) writes none, and the config
     * reader then takes the experts' (config.c). */
    if ((st = put_int(m, json, "embedding_length", "hidden_size", true, &hidden)) ||
        (st = put_int(m, json, "block_count", "num_hidden_layers", true, NULL)) ||
        (st = put_int(m, json, "feed_forward_length", "intermediate_size", false, NULL)) ||
        (st = put_int(m, json, "attention.head_count", "num_attention_heads", true, &heads)) ||
        (st = put_int(m, json, "attention.head_count_kv", "num_key_value_heads", false, NULL)) ||
        (st = put_int(m, family->own_head_dims ? NULL : json,
                      "attention.key_length", "head_dim", false, &head_dim)) ||
        (st = put_int(m, json, "context_length", "max_position_embeddings", false, NULL)) ||
        (st = put_num(m, json, "attention.layer_norm_rms_epsilon", "rms_norm_eps")) ||
        (st = put_num(m, json, "rope.freq_base", "rope_theta")) ||
        (st = rope_scaling(m, json)) || (st = special_ids(m, json)))
        return st;
    int64_t value_len = 0, rope_dim = 0;
    if ((st = put_int(m, NULL, "attention.value_length", NULL, false, &value_len)) ||
        (st = put_int(m, NULL, "rope.dimension_count", NULL, false, &rope_dim)) ||
        (st = check_head_dims(m, hidden, heads, &head_dim, rope_dim)))
        return st;
    if (family->own_head_dims) {
        /* the family's hook reads the sizes (below) */
    } else if (value_len && value_len != head_dim)
        return sp_fail(m->err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: value_length %lld differs from key_length %lld",
                       m->path, (long long)value_len, (long long)head_dim);
    else if (rope_dim && rope_dim != head_dim &&
        !cJSON_AddNumberToObject(json, "partial_rotary_factor",
                                 (double)rope_dim / (double)head_dim))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    /* Biases are decided by the tensors present (the files carry no flag). */
    if (!cJSON_AddBoolToObject(json, "attention_bias",
                               has_tensor(w, "model.layers.0.self_attn.o_proj.bias")) ||
        !cJSON_AddBoolToObject(json, "mlp_bias",
                               has_tensor(w, "model.layers.0.mlp.up_proj.bias")) ||
        !cJSON_AddBoolToObject(json, "rope_traditional",
                               family->rope_interleaved))
        return sp_fail(m->err, SPINDLE_ERR_MEMORY, "out of memory");
    if ((st = family_keys(m, family, json)) || !family->config) return st;
    return family->config(w, json, m->err);
}

spindle_status sp_gguf_model_config(const sp_gguf_weights *w,
                                    sp_model_config *cfg,
                                    spindle_error *err) {
    memset(cfg, 0, sizeof *cfg);
    const sp_gguf *g = sp_gguf_weights_file(w);
    meta m = {.g = g, .arch = sp_gguf_weights_family(w)->arch,
              .path = sp_gguf_path(g),
              .family_arrays = sp_gguf_weights_family(w)->config != NULL,
              .err = err};
    cJSON *json = cJSON_CreateObject();
    if (!json) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = build(w, &m, json);
    if (st) {
        cJSON_Delete(json);
        return st;
    }
    return sp_config_from_json(json, m.path, cfg, err);
}
