/* config.json of a converted GGUF: llama.cpp's metadata keys (llama-arch.cpp
 * LLM_KV_*) back to the Hugging Face names, written for rotate-half RoPE
 * (the converter un-permutes Llama q/k), plus mlx-lm's "quantization"
 * block. Gemma 3 follows llama.cpp's conventions where the file is silent:
 * sliding-window pattern 6, local RoPE base 10000, query scale
 * key_length^-0.5. */
#include "convert/convert_internal.h"
#include "artifacts/gguf_model.h"
#include "artifacts/safetensors_write.h"
#include "base/error.h"
#include "base/mapped_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ctx {
    const sp_gguf *g;
    const sp_conv_summary *s;
    cJSON *json;
    spindle_error *err;
    bool oom;
} ctx;

static const sp_gguf_value *arch_key(const ctx *c, const char *key) {
    return sp_gguf_arch_value(c->g, c->s->arch, key);
}

static void num(ctx *c, cJSON *obj, const char *name, double v) {
    if (!cJSON_AddNumberToObject(obj, name, v)) c->oom = true;
}

/* A positive integer `{arch}.key` (dflt when absent; 0 = required). */
static spindle_status get_int(ctx *c, const char *key, int64_t dflt,
                              int64_t *out) {
    *out = dflt;
    return sp_gguf_arch_count(c->g, c->s->arch, key, !dflt, out, c->err);
}

/* An optional finite number `{arch}.key` into obj[name] (dflt when absent,
 * NAN: then nothing is written). */
static spindle_status put_real(ctx *c, cJSON *obj, const char *key,
                               const char *name, double dflt) {
    double x = dflt;
    bool found;
    spindle_status st = sp_gguf_arch_real(c->g, c->s->arch, key, &x, &found,
                                          c->err);
    if (!st && !isnan(x)) num(c, obj, name, x);
    return st;
}

static void token_id(ctx *c, const char *key, const char *name) {
    const sp_gguf_value *v = sp_gguf_find(c->g, key);
    int64_t id;
    if (v && sp_gguf_value_i64(v, &id) && id >= 0) num(c, c->json, name, (double)id);
}

static spindle_status rope_scaling(ctx *c) {
    const sp_gguf_value *t = arch_key(c, "rope.scaling.type");
    sp_gguf_str type = {"linear", 6};
    if (t && !sp_gguf_value_str(t, &type))
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: rope.scaling.type is not a string", sp_gguf_path(c->g));
    if (!t && !arch_key(c, "rope.scale_linear")) return SPINDLE_OK;
    if (type.len == 4 && !memcmp(type.ptr, "none", 4)) return SPINDLE_OK;
    if (!(type.len == 6 && !memcmp(type.ptr, "linear", 6)))
        return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: RoPE scaling '%.*s' cannot be converted (only "
                       "linear)", sp_gguf_path(c->g), (int)type.len, type.ptr);
    cJSON *rs = cJSON_AddObjectToObject(c->json, "rope_scaling");
    if (!rs || !cJSON_AddStringToObject(rs, "type", "linear") ||
        !cJSON_AddStringToObject(rs, "rope_type", "linear"))
        c->oom = true;
    return put_real(c, rs, t ? "rope.scaling.factor" : "rope.scale_linear",
                    "factor", 1.0);
}

static spindle_status gemma3_keys(ctx *c, int64_t head_dim, int64_t layers) {
    int64_t window, pattern;
    spindle_status st;
    if ((st = get_int(c, "attention.sliding_window", 4096, &window)) ||
        (st = get_int(c, "attention.sliding_window_pattern", 6, &pattern)))
        return st;
    num(c, c->json, "sliding_window", (double)window);
    num(c, c->json, "sliding_window_pattern", (double)pattern);
    /* Newer transformers read layer_types; every pattern-th layer is global. */
    cJSON *types = cJSON_AddArrayToObject(c->json, "layer_types");
    for (int64_t l = 0; types && l < layers; l++)
        if (!cJSON_AddItemToArray(types, cJSON_CreateString(
                (l + 1) % pattern ? "sliding_attention" : "full_attention")))
            c->oom = true;
    if (!types) c->oom = true;
    num(c, c->json, "query_pre_attn_scalar", (double)head_dim);
    if (!cJSON_AddStringToObject(c->json, "hidden_activation", "gelu_pytorch_tanh"))
        c->oom = true;
    if ((st = put_real(c, c->json, "rope.freq_base_swa", "rope_local_base_freq",
                       10000.0)) ||
        (st = put_real(c, c->json, "final_logit_softcapping",
                       "final_logit_softcapping", NAN)) ||
        (st = put_real(c, c->json, "attn_logit_softcapping",
                       "attn_logit_softcapping", NAN)))
        return st;
    return SPINDLE_OK;
}

/* mlx-lm quantizes a module iff its .scales exist, with the defaults unless
 * the block names the module: defaults = the most common bit width. */
static void quantization(ctx *c) {
    int count[9] = {0};
    const cJSON *m;
    cJSON_ArrayForEach(m, c->s->quant_modules) count[(int)m->valuedouble == 8 ? 8 : 4]++;
    if (!count[4] && !count[8]) return;
    int bits = count[4] >= count[8] ? 4 : 8;
    cJSON *q = cJSON_AddObjectToObject(c->json, "quantization");
    if (!q) {
        c->oom = true;
        return;
    }
    num(c, q, "group_size", 32);
    num(c, q, "bits", bits);
    if (!cJSON_AddStringToObject(q, "mode", "affine")) c->oom = true;
    cJSON_ArrayForEach(m, c->s->quant_modules) {
        if ((int)m->valuedouble == bits) continue;
        cJSON *o = cJSON_AddObjectToObject(q, m->string);
        if (!o) {
            c->oom = true;
            return;
        }
        num(c, o, "group_size", 32);
        num(c, o, "bits", m->valuedouble);
    }
}

/* The architecture's fixed settings (sp_gguf_family.implied_config). */
static void implied_keys(ctx *c, const char *json) {
    cJSON *implied = json ? cJSON_Parse(json) : NULL;
    if (json && !implied) {
        c->oom = true;
        return;
    }
    cJSON *item;
    while (implied && (item = implied->child)) {
        cJSON_DetachItemViaPointer(implied, item);
        cJSON_DeleteItemFromObjectCaseSensitive(c->json, item->string);
        if (!cJSON_AddItemToObject(c->json, item->string, item)) {
            cJSON_Delete(item);
            c->oom = true;
        }
    }
    cJSON_Delete(implied);
}

spindle_status sp_conv_config(const sp_gguf *g, const sp_conv_summary *s,
                              cJSON **out, spindle_error *err) {
    *out = NULL;
    ctx c = {.g = g, .s = s, .json = cJSON_CreateObject(), .err = err};
    if (!c.json) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    const char *hf_class = s->family->hf_class;
    const char *model_type = s->family->model_type;
    bool gemma = !strcmp(s->arch, "gemma3");
    /* A family's own keys (Granite's multipliers, OLMo 3's windows, the
     * Mistral 3 temperature) have no config.json form here yet: refuse
     * rather than write a config that means another model. Counts that
     * mean the same there (Qwen3-MoE's expert sizes) are copied. */
    for (const sp_gguf_key_map *k = s->family->keys; !gemma && k && k->key;
         k++) {
        int64_t v;
        if (!sp_gguf_arch_value(g, s->arch, k->key)) continue;
        if (k->kind == SP_GGUF_KEY_HF_COUNT &&
            sp_conv_arch_int(g, s->arch, k->key, &v)) {
            num(&c, c.json, k->json, (double)v);
            continue;
        }
        cJSON_Delete(c.json);
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: converting '%s' files with '%s.%s' is not "
                       "supported", sp_gguf_path(g), s->arch, s->arch,
                       k->key);
    }
    int64_t hidden, layers, ffn, heads, kv, head_dim, ctx_len;
    spindle_status st;
    if ((st = get_int(&c, "embedding_length", 0, &hidden)) ||
        (st = get_int(&c, "block_count", 0, &layers)) ||
        (st = get_int(&c, "feed_forward_length", 0, &ffn)) ||
        (st = get_int(&c, "attention.head_count", 0, &heads)) ||
        (st = get_int(&c, "attention.head_count_kv", heads, &kv)) ||
        (st = get_int(&c, "attention.key_length", hidden / heads ? hidden / heads : 1,
                      &head_dim)) ||
        (st = get_int(&c, "context_length", gemma ? 32768 : 4096, &ctx_len))) {
        cJSON_Delete(c.json);
        return st;
    }
    cJSON *arr = cJSON_AddArrayToObject(c.json, "architectures");
    if (!arr || !cJSON_AddItemToArray(arr, cJSON_CreateString(hf_class)) ||
        !cJSON_AddStringToObject(c.json, "model_type", model_type))
        c.oom = true;
    num(&c, c.json, "hidden_size", (double)hidden);
    num(&c, c.json, "intermediate_size", (double)ffn);
    num(&c, c.json, "num_hidden_layers", (double)layers);
    num(&c, c.json, "num_attention_heads", (double)heads);
    num(&c, c.json, "num_key_value_heads", (double)kv);
    num(&c, c.json, "head_dim", (double)head_dim);
    num(&c, c.json, "max_position_embeddings", (double)ctx_len);
    num(&c, c.json, "vocab_size", (double)s->vocab_size);
    token_id(&c, "tokenizer.ggml.bos_token_id", "bos_token_id");
    token_id(&c, "tokenizer.ggml.eos_token_id", "eos_token_id");
    token_id(&c, "tokenizer.ggml.padding_token_id", "pad_token_id");
    if (!cJSON_AddBoolToObject(c.json, "tie_word_embeddings", !s->has_output) ||
        !cJSON_AddBoolToObject(c.json, "attention_bias", s->attention_bias) ||
        !cJSON_AddBoolToObject(c.json, "mlp_bias", false) ||
        !cJSON_AddStringToObject(c.json, "torch_dtype",
                                 s->dtype == SP_DTYPE_F32 ? "float32" : "bfloat16"))
        c.oom = true;
    if (!gemma && !cJSON_AddStringToObject(c.json, "hidden_act", "silu")) c.oom = true;
    if ((st = put_real(&c, c.json, "attention.layer_norm_rms_epsilon",
                       "rms_norm_eps", 1e-6)) ||
        (st = put_real(&c, c.json, "rope.freq_base", "rope_theta",
                       gemma ? 1000000.0 : 10000.0)) ||
        (st = rope_scaling(&c)) ||
        (gemma && (st = gemma3_keys(&c, head_dim, layers)))) {
        cJSON_Delete(c.json);
        return st;
    }
    int64_t rope_dim;
    if (sp_conv_arch_int(g, s->arch, "rope.dimension_count", &rope_dim) &&
        rope_dim != head_dim)
        num(&c, c.json, "partial_rotary_factor", (double)rope_dim / (double)head_dim);
    quantization(&c);
    implied_keys(&c, s->family->implied_config);
    if (c.oom) {
        cJSON_Delete(c.json);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    *out = c.json;
    return SPINDLE_OK;
}

spindle_status sp_conv_write_json(const cJSON *json, const char *dir,
                                  const char *name, spindle_error *err) {
    char *text = cJSON_Print(json);
    char *path = sp_path_join(dir, name);
    spindle_status st = text && path
                            ? sp_write_file_atomic(path, text, strlen(text), err)
                            : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    free(text);
    free(path);
    return st;
}
