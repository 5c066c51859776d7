/* Gemma 4 GGUF files (llama.cpp's "gemma4": the converter's Gemma4Model,
 * loaded by src/models/gemma4.cpp) as the config.json and tensor names
 * gemma4.c binds.
 *
 * What the file spells otherwise:
 *  - key_length / value_length are the full-attention layers' head size
 *    (global_head_dim), key_length_swa / value_length_swa the sliding
 *    layers' (head_dim);
 *  - the full layers' "proportional" RoPE is a NeoX RoPE over the whole
 *    global head with frequency factors rope_freqs.weight: 1 for the pairs
 *    it rotates, 1e30 (no rotation) for the rest; the sliding layers use
 *    rope.freq_base_swa over their whole head;
 *  - feed_forward_length is per layer when the KV-sharing layers have
 *    double-wide MLPs, attention.head_count_kv per layer when the K = V
 *    full layers have a KV head count of their own
 *    (num_global_key_value_heads);
 *  - K = V full layers have no attn_v, MoE layers an ffn_gate_inp (the
 *    flags are the tensors present, as llama.cpp decides per layer);
 *  - llama.cpp's defaults where the file is silent: no final softcap, no
 *    KV sharing, RoPE bases 10000.
 * Where llama.cpp computes something gemma4.c does not (per-layer values
 * off Gemma 4's pattern, another KV-sharing target, RoPE scaling), the
 * file is refused with one line. */
#include "models/gemma4.h"
#include "artifacts/gguf_model.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "gemma4"

typedef struct ctx {
    const sp_gguf_weights *w;
    const sp_gguf *g;
    const char *path;
    cJSON *json;
    spindle_error *err;
    int n;         /* layers */
    bool *swa;     /* [n] sliding-window layer */
} ctx;

/* json[key] = item (replacing what the common keys set); item NULL: out
 * of memory. */
static spindle_status set(ctx *c, cJSON *obj, const char *key, cJSON *item) {
    if (!item) return sp_fail(c->err, SPINDLE_ERR_MEMORY, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    if (!cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return sp_fail(c->err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    return SPINDLE_OK;
}

static spindle_status set_num(ctx *c, const char *key, double v) {
    return set(c, c->json, key, cJSON_CreateNumber(v));
}

static bool has(const ctx *c, int l, const char *module) {
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.%s", l, module);
    return sp_gguf_weights_find(c->w, name) != NULL;
}

/* A count `gemma4.key` that may be 0 (absent: dflt, or an error when
 * dflt < 0). */
static spindle_status count0(ctx *c, const char *key, int64_t dflt,
                             int64_t *out) {
    const sp_gguf_value *v = sp_gguf_arch_value(c->g, ARCH, key);
    double d = -1;
    if (!v && dflt >= 0) {
        *out = dflt;
        return SPINDLE_OK;
    }
    if (!v || !sp_gguf_value_number(v, &d) || d != floor(d) || d < 0 ||
        d > (double)(1 << 30))
        return sp_fail(c->err, SPINDLE_ERR_FORMAT, "%s: '%s.%s' is %s (a "
                       "count is needed)", c->path, ARCH, key,
                       v ? "invalid" : "missing");
    *out = (int64_t)d;
    return SPINDLE_OK;
}

/* A positive count `gemma4.key` per layer: one number for every layer or
 * an array of n (llama.cpp's get_key_or_arr); absent: dflt (0: an
 * error). */
static spindle_status per_layer(ctx *c, const char *key, int64_t dflt,
                                int64_t *out) {
    const sp_gguf_value *v = sp_gguf_arch_value(c->g, ARCH, key);
    if (!v || v->type != SP_GGUF_ARRAY) {
        int64_t x = dflt;
        spindle_status st = sp_gguf_arch_count(c->g, ARCH, key, !dflt, &x,
                                               c->err);
        for (int l = 0; l < c->n && !st; l++) out[l] = x;
        return st;
    }
    bool ok = sp_gguf_array_count(v) == (uint64_t)c->n;
    for (int l = 0; l < c->n && ok; l++) {
        sp_gguf_value e;
        double d = 0;
        ok = sp_gguf_array_at(v, (uint64_t)l, &e) &&
             sp_gguf_value_number(&e, &d) && d == floor(d) && d >= 1 &&
             d <= (double)(1 << 30);
        out[l] = (int64_t)d;
    }
    if (!ok)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT, "%s: '%s.%s' must be a "
                       "positive count or one per layer (%d)", c->path,
                       ARCH, key, c->n);
    return SPINDLE_OK;
}

/* The head sizes: head_dim the sliding layers', global_head_dim the full
 * layers'; each kind ropes its whole head (the full layers' partial
 * rotation is in rope_freqs). */
static spindle_status head_dims(ctx *c, int64_t *global) {
    int64_t swa = 0, v_full, v_swa, rot_full, rot_swa;
    spindle_status st;
    if ((st = sp_gguf_arch_count(c->g, ARCH, "attention.key_length", true,
                                 global, c->err)) ||
        (st = sp_gguf_arch_count(c->g, ARCH, "attention.key_length_swa",
                                 true, &swa, c->err)))
        return st;
    v_full = *global;
    v_swa = swa;
    rot_full = *global;
    if ((st = sp_gguf_arch_count(c->g, ARCH, "attention.value_length_swa",
                                 false, &v_swa, c->err)) ||
        (st = sp_gguf_arch_count(c->g, ARCH, "attention.value_length",
                                 false, &v_full, c->err)) ||
        (st = sp_gguf_arch_count(c->g, ARCH, "rope.dimension_count", false,
                                 &rot_full, c->err)))
        return st;
    rot_swa = rot_full; /* llama.cpp's default */
    if ((st = sp_gguf_arch_count(c->g, ARCH, "rope.dimension_count_swa",
                                 false, &rot_swa, c->err)))
        return st;
    if (v_full != *global || v_swa != swa || rot_full != *global ||
        rot_swa != swa || *global % 2 || swa % 2)
        return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: gemma4 head "
                       "sizes key/value/rope %lld/%lld/%lld (full) and "
                       "%lld/%lld/%lld (sliding) must agree and be even",
                       c->path, (long long)*global, (long long)v_full,
                       (long long)rot_full, (long long)swa, (long long)v_swa,
                       (long long)rot_swa);
    if ((st = set_num(c, "head_dim", (double)swa))) return st;
    return set_num(c, "global_head_dim", (double)*global);
}

/* The pairs the full layers rotate: rope_freqs.weight [global / 2] is 1
 * for them, then at least 1e20 (angles below 1e-10: no rotation); 0 when
 * there is no full layer and no tensor. */
static spindle_status rotated_pairs(ctx *c, int64_t global, int *pairs) {
    const sp_tensor_info *t = sp_gguf_weights_find(c->w, "rope_freqs.weight");
    bool any_full = false;
    for (int l = 0; l < c->n; l++) any_full |= !c->swa[l];
    *pairs = 0;
    if (!t && !any_full) return SPINDLE_OK;
    if (!t || t->ggml_quant || t->dtype != SP_DTYPE_F32 || t->ndim != 1 ||
        t->shape[0] != global / 2)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT, "%s: %s tensor "
                       "'rope_freqs.weight' (F32 [%lld], the full layers' "
                       "frequency factors)", c->path, t ? "bad" : "missing",
                       (long long)(global / 2));
    bool tail = false;
    for (int64_t i = 0; i < global / 2; i++) {
        float f;
        memcpy(&f, (const unsigned char *)t->data + 4 * i, sizeof f);
        if (!tail && f == 1.0f) {
            ++*pairs;
        } else if (f >= 1e20f) {
            tail = true;
        } else {
            return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: "
                           "rope_freqs.weight[%lld] is %g: only Gemma 4's "
                           "proportional RoPE (1 for the rotated pairs, "
                           "then 1e30) is supported", c->path, (long long)i,
                           (double)f);
        }
    }
    if (!*pairs)
        return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: rope_freqs."
                       "weight rotates no pair", c->path);
    return SPINDLE_OK;
}

static spindle_status rope_base(ctx *c, const char *key, double *out) {
    bool found;
    spindle_status st = sp_gguf_arch_real(c->g, ARCH, key, out, &found,
                                          c->err);
    if (!st && !(*out > 0))
        st = sp_fail(c->err, SPINDLE_ERR_FORMAT, "%s: '%s.%s' must be "
                     "positive", c->path, ARCH, key);
    return st;
}

/* rope_parameters of both layer kinds. */
static spindle_status rope(ctx *c, int64_t global) {
    if (cJSON_GetObjectItemCaseSensitive(c->json, "rope_scaling"))
        return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: RoPE scaling "
                       "in a gemma4 file is not supported", c->path);
    int pairs;
    double base = 10000.0, base_swa = 10000.0; /* llama.cpp's defaults */
    spindle_status st;
    if ((st = rotated_pairs(c, global, &pairs)) ||
        (st = rope_base(c, "rope.freq_base", &base)) ||
        (st = rope_base(c, "rope.freq_base_swa", &base_swa)))
        return st;
    /* gemma4.c rotates (int)(global * partial) dimensions. */
    double partial = pairs ? 2.0 * pairs / (double)global : 1.0;
    while ((int64_t)((double)global * partial) < 2 * (int64_t)pairs)
        partial = nextafter(partial, 2.0);
    cJSON *p = cJSON_CreateObject();
    cJSON *full = p ? cJSON_AddObjectToObject(p, "full_attention") : NULL;
    cJSON *sliding = p ? cJSON_AddObjectToObject(p, "sliding_attention")
                       : NULL;
    bool ok = full && sliding &&
              cJSON_AddStringToObject(full, "rope_type", "proportional") &&
              cJSON_AddNumberToObject(full, "rope_theta", base) &&
              cJSON_AddNumberToObject(full, "partial_rotary_factor",
                                      partial) &&
              cJSON_AddStringToObject(sliding, "rope_type", "default") &&
              cJSON_AddNumberToObject(sliding, "rope_theta", base_swa);
    if (!ok) {
        cJSON_Delete(p);
        p = NULL;
    }
    return set(c, c->json, "rope_parameters", p);
}

/* num_kv_shared_layers, checked against llama.cpp's rule (a sharing
 * sliding layer attends layer first - 2, a full one layer first - 1,
 * first the first sharing layer) where gemma4.c takes the last earlier
 * layer of the same kind; *first is that first layer. */
static spindle_status kv_sharing(ctx *c, int *first) {
    int64_t shared;
    spindle_status st = count0(c, "attention.shared_kv_layers", 0, &shared);
    if (st) return st;
    if (shared > c->n - 2 && shared)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT, "%s: '%s.attention."
                       "shared_kv_layers' %lld leaves fewer than 2 of %d "
                       "layers with KV of their own", c->path, ARCH,
                       (long long)shared, c->n);
    *first = c->n - (int)shared;
    for (int l = *first; l < c->n; l++) {
        int target = *first - (c->swa[l] ? 2 : 1), last = -1;
        for (int i = 0; i < *first; i++)
            if (c->swa[i] == c->swa[l]) last = i;
        if (last != target)
            return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: layer %d "
                           "shares layer %d's KV in llama.cpp, not the last "
                           "earlier layer of its kind", c->path, l, target);
    }
    return set_num(c, "num_kv_shared_layers", (double)shared);
}

/* intermediate_size from a per-layer feed_forward_length: one size, the
 * KV-sharing layers' possibly twice it (use_double_wide_mlp). */
static spindle_status mlp_widths(ctx *c, int first, int64_t *ff) {
    spindle_status st = per_layer(c, "feed_forward_length", 0, ff);
    if (st) return st;
    bool wide = first < c->n && ff[first] == 2 * ff[0];
    for (int l = 0; l < c->n; l++)
        if (ff[l] != (l >= first && wide ? 2 : 1) * ff[0])
            return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: layer %d's "
                           "feed_forward_length %lld: only one size, twice "
                           "it on the KV-sharing layers, is supported",
                           c->path, l, (long long)ff[l]);
    if ((st = set_num(c, "intermediate_size", (double)ff[0]))) return st;
    return set(c, c->json, "use_double_wide_mlp", cJSON_CreateBool(wide));
}

/* KV heads per kind, and K = V full layers (no attn_v): those may have a
 * head count of their own (num_global_key_value_heads). */
static spindle_status kv_heads(ctx *c, int first, int64_t *kv) {
    int64_t heads = 0;
    spindle_status st = sp_gguf_arch_count(c->g, ARCH,
                                           "attention.head_count", true,
                                           &heads, c->err);
    if (!st) st = per_layer(c, "attention.head_count_kv", heads, kv);
    if (st) return st;
    int64_t kind[2] = {0, 0}; /* by kind: [0] full, [1] sliding */
    int v_full = 0, full = 0;
    for (int l = 0; l < c->n; l++) {
        int64_t *k = &kind[c->swa[l]];
        if (*k && *k != kv[l])
            return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: layer %d's "
                           "attention.head_count_kv %lld differs from other "
                           "layers of its kind", c->path, l,
                           (long long)kv[l]);
        *k = kv[l];
        if (!c->swa[l] && l < first) {
            full++;
            v_full += has(c, l, "self_attn.v_proj.weight");
        }
    }
    if (v_full && v_full != full)
        return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: %d of %d full-"
                       "attention layers have attn_v (all or none)", c->path,
                       v_full, full);
    bool k_eq_v = full && !v_full;
    if (kind[0] && kind[1] && kind[0] != kind[1] && !k_eq_v)
        return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED, "%s: full layers "
                       "with their own KV head count need K = V (no "
                       "attn_v)", c->path);
    if ((st = set_num(c, "num_key_value_heads",
                      (double)(kind[1] ? kind[1] : kind[0]))) ||
        (st = set(c, c->json, "attention_k_eq_v", cJSON_CreateBool(k_eq_v))))
        return st;
    return k_eq_v && kind[0]
               ? set_num(c, "num_global_key_value_heads", (double)kind[0])
               : SPINDLE_OK;
}

/* The sliding window, per-layer inputs, MoE, softcap. */
static spindle_status extras(ctx *c) {
    int64_t window = 0, P = 0, experts = 0, top_k = 0, inter = 0;
    spindle_status st;
    if ((st = sp_gguf_arch_count(c->g, ARCH, "attention.sliding_window",
                                 true, &window, c->err)) ||
        (st = count0(c, "embedding_length_per_layer_input", -1, &P)) ||
        (st = set_num(c, "sliding_window", (double)window)) ||
        (st = set_num(c, "hidden_size_per_layer_input", (double)P)))
        return st;
    /* llama.cpp's per-layer table has a row per token. */
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(c->json,
                                                          "vocab_size");
    if (P && (st = set_num(c, "vocab_size_per_layer_input",
                           vocab->valuedouble)))
        return st;
    bool moe = false;
    for (int l = 0; l < c->n; l++) moe |= has(c, l, "router.weight");
    if ((st = set(c, c->json, "enable_moe_block", cJSON_CreateBool(moe))))
        return st;
    if (moe &&
        ((st = sp_gguf_arch_count(c->g, ARCH, "expert_count", true,
                                  &experts, c->err)) ||
         (st = sp_gguf_arch_count(c->g, ARCH, "expert_used_count", true,
                                  &top_k, c->err)) ||
         (st = sp_gguf_arch_count(c->g, ARCH, "expert_feed_forward_length",
                                  true, &inter, c->err)) ||
         (st = set_num(c, "num_experts", (double)experts)) ||
         (st = set_num(c, "top_k_experts", (double)top_k)) ||
         (st = set_num(c, "moe_intermediate_size", (double)inter))))
        return st;
    if (cJSON_GetObjectItemCaseSensitive(c->json, "final_logit_softcapping"))
        return SPINDLE_OK;
    return set(c, c->json, "final_logit_softcapping", cJSON_CreateNull());
}

/* sp_gguf_family.config: every key the family reads beyond the common
 * ones, in order. */
static spindle_status gemma4_gguf_config(const sp_gguf_weights *w,
                                         cJSON *json, spindle_error *err) {
    const sp_gguf *g = sp_gguf_weights_file(w);
    ctx c = {.w = w, .g = g, .path = sp_gguf_path(g), .json = json,
             .err = err};
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(json,
                                                      "num_hidden_layers");
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(json, "layer_types");
    c.n = (int)n->valuedouble; /* block_count, checked by the common keys */
    if (cJSON_GetArraySize(types) != c.n)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: '%s.attention."
                       "sliding_window_pattern' must flag each of the %d "
                       "layers", c.path, ARCH, c.n);
    c.swa = calloc((size_t)c.n, sizeof *c.swa);
    int64_t *per = calloc((size_t)c.n, sizeof *per);
    spindle_status st = c.swa && per ? SPINDLE_OK
                        : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int l = 0; l < c.n && !st; l++)
        c.swa[l] = !strcmp(cJSON_GetArrayItem(types, l)->valuestring,
                           "sliding_attention");
    int64_t global = 0;
    int first = c.n;
    if (!st) st = head_dims(&c, &global);
    if (!st) st = rope(&c, global);
    if (!st) st = kv_sharing(&c, &first);
    if (!st) st = mlp_widths(&c, first, per);
    if (!st) st = kv_heads(&c, first, per);
    if (!st) st = extras(&c);
    free(per);
    free(c.swa);
    return st;
}

static const sp_gguf_name_map gemma4_gguf_layers[] = {
    /* The sandwich norms, as Gemma 3's. */
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
    {"layer_output_scale", "layer_scalar"},
    /* MoE layers: the dense MLP's and the experts' norms, the router
     * (.weight, and its .scale: mlx-lm's router.scale), the experts with
     * per_expert_scale as ffn_down_exps.scale. */
    {"post_ffw_norm_1", "post_feedforward_layernorm_1"},
    {"pre_ffw_norm_2", "pre_feedforward_layernorm_2"},
    {"post_ffw_norm_2", "post_feedforward_layernorm_2"},
    {"ffn_gate_inp", "router"},
    {"ffn_gate_up_exps", "experts.switch_glu.gate_up_proj"},
    {"ffn_gate_exps", "experts.switch_glu.gate_proj"},
    {"ffn_up_exps", "experts.switch_glu.up_proj"},
    {"ffn_down_exps", "experts.switch_glu.down_proj"},
    /* Per-layer inputs. */
    {"inp_gate", "per_layer_input_gate"},
    {"proj", "per_layer_projection"},
    {"post_norm", "post_per_layer_input_norm"},
    {NULL, NULL},
};

static const sp_gguf_name_map gemma4_gguf_globals[] = {
    {"per_layer_token_embd", "model.embed_tokens_per_layer"},
    {"per_layer_model_proj", "model.per_layer_model_projection"},
    {"per_layer_proj_norm", "model.per_layer_projection_norm"},
    {NULL, NULL},
};

static const sp_gguf_key_map gemma4_gguf_keys[] = {
    {"final_logit_softcapping", "final_logit_softcapping", SP_GGUF_KEY_REAL},
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

/* No hf_class: `spindle convert` does not write Gemma 4 configs. */
const sp_gguf_family sp_gemma4_gguf = {
    .arch = ARCH,
    .model_type = "gemma4_text",
    .layer_names = gemma4_gguf_layers,
    .global_names = gemma4_gguf_globals,
    .keys = gemma4_gguf_keys,
    .config = gemma4_gguf_config,
};
