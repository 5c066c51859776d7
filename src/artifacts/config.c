/* Parsing of config.json and generation_config.json. */
#include "artifacts/config.h"
#include "base/error.h"
#include "base/mapped_file.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *get(const sp_model_config *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg->json, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

int sp_config_int(const sp_model_config *cfg, const char *key, int dflt) {
    const cJSON *v = get(cfg, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        fabs(v->valuedouble) > 2e9)
        return dflt;
    return (int)v->valuedouble;
}

double sp_config_num(const sp_model_config *cfg, const char *key,
                     double dflt) {
    const cJSON *v = get(cfg, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

bool sp_config_bool(const sp_model_config *cfg, const char *key, bool dflt) {
    const cJSON *v = get(cfg, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* A JSON number that is an integer in [lo, hi] (checked before converting:
 * a double outside int's range has no defined int value). */
static bool json_int(const cJSON *v, int lo, int hi, int *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return false;
    *out = (int)v->valuedouble;
    return true;
}

/* Required positive integer with a sanity bound, so that later allocations
 * sized by it cannot be absurd. */
static spindle_status need_int(const sp_model_config *cfg, const char *path,
                               const char *key, int max, int *out,
                               spindle_error *err) {
    const cJSON *v = get(cfg, key);
    if (!v)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: missing '%s'", path, key);
    if (!json_int(v, 1, max, out))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: '%s' must be an integer in [1, %d]", path, key,
                       max);
    return SPINDLE_OK;
}

static void add_eos(sp_model_config *cfg, const cJSON *v) {
    if (cJSON_IsArray(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) add_eos(cfg, e);
        return;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2e9)
        return;
    int32_t id = (int32_t)v->valuedouble;
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] == id) return;
    if (cfg->n_eos < SP_MAX_EOS) cfg->eos_ids[cfg->n_eos++] = id;
}

static sp_dtype parse_dtype_name(const char *s) {
    if (!s) return SP_DTYPE_F32;
    if (!strcmp(s, "bfloat16")) return SP_DTYPE_BF16;
    if (!strcmp(s, "float16") || !strcmp(s, "half")) return SP_DTYPE_F16;
    return SP_DTYPE_F32;
}

/* v as an int when it is an integer in [1, max], else -1 (a double outside
 * int's range must not be converted). */
static int count_in_range(double v, int max) {
    return v >= 1 && v <= (double)max && v == floor(v) ? (int)v : -1;
}

static int position_count(double v) { return count_in_range(v, 1 << 30); }

/* A quantization setting (bits, group size), or -1. */
static int small_count(const cJSON *v) {
    int n;
    return json_int(v, 1, 1 << 20, &n) ? n : -1;
}

/* longrope's long_factor: one number for every frequency, or a list of
 * rotary_dim / 2, copied to cfg->rope_long_factor. */
static spindle_status parse_long_factor(sp_model_config *cfg, const cJSON *rs,
                                        int half, const char *path,
                                        spindle_error *err) {
    const cJSON *lf = cJSON_GetObjectItemCaseSensitive(rs, "long_factor");
    bool list = cJSON_IsArray(lf);
    if (!(cJSON_IsNumber(lf) || (list && cJSON_GetArraySize(lf) == half)))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: rope_scaling long_factor must be a number or a "
                       "list of %d numbers (rotary dimension / 2)", path,
                       half);
    float *f = malloc((size_t)half * sizeof *f);
    if (!f) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int i = 0; i < half; i++) {
        const cJSON *e = list ? cJSON_GetArrayItem(lf, i) : lf;
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) ||
            !isfinite(e->valuedouble)) {
            free(f);
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: rope_scaling long_factor[%d] must be a "
                           "positive number", path, i);
        }
        f[i] = (float)e->valuedouble;
    }
    free(cfg->rope_long_factor);
    cfg->rope_long_factor = f;
    return SPINDLE_OK;
}

spindle_status sp_config_parse_rope(sp_model_config *cfg, const cJSON *rs,
                                    double theta, const char *path,
                                    sp_rope_config *r, spindle_error *err) {
    memset(r, 0, sizeof *r);
    r->type = SP_ROPE_DEFAULT;
    r->theta = theta;
    r->factor = 1.0;
    double partial = sp_config_num(cfg, "partial_rotary_factor", 1.0);
    /* Checked as a double first: converting an out-of-range one to int is
     * undefined. */
    if (!(partial > 0 && partial <= 1))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: partial_rotary_factor must be in (0, 1]", path);
    r->rotary_dim = (int)(cfg->head_dim * partial);
    if (r->rotary_dim < 2 || r->rotary_dim > cfg->head_dim ||
        r->rotary_dim % 2)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: partial_rotary_factor gives an invalid rotary "
                       "dimension %d", path, r->rotary_dim);
    r->original_max_position = cfg->max_position;

    if (!rs) return SPINDLE_OK;
    if (!cJSON_IsObject(rs))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: 'rope_scaling' must be an object", path);
    /* mlx-lm reads "type" before "rope_type". */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "default";
#define RS_NUM(key, dflt)                                                     \
    (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rs, key))                \
         ? cJSON_GetObjectItemCaseSensitive(rs, key)->valuedouble             \
         : (dflt))
    r->factor = RS_NUM("factor", 1.0);
    if (!strcmp(type, "default")) {
        r->type = SP_ROPE_DEFAULT;
    } else if (!strcmp(type, "linear")) {
        r->type = SP_ROPE_LINEAR;
    } else if (!strcmp(type, "llama3")) {
        r->type = SP_ROPE_LLAMA3;
        r->low_freq_factor = RS_NUM("low_freq_factor", 1.0);
        r->high_freq_factor = RS_NUM("high_freq_factor", 4.0);
        r->original_max_position =
            position_count(RS_NUM("original_max_position_embeddings", 8192));
    } else if (!strcmp(type, "yarn")) {
        r->type = SP_ROPE_YARN;
        r->beta_fast = RS_NUM("beta_fast", 32.0);
        r->beta_slow = RS_NUM("beta_slow", 1.0);
        r->mscale = RS_NUM("mscale", 1.0);
        r->mscale_all_dim = RS_NUM("mscale_all_dim", 0.0);
        /* mlx-lm (the parity reference) derives the attention factor from
         * mscale/mscale_all_dim and ignores an explicit attention_factor. */
        r->attention_factor = 0.0;
        r->original_max_position =
            position_count(RS_NUM("original_max_position_embeddings", 4096));
    } else if (!strcmp(type, "longrope") || !strcmp(type, "su")) {
        r->type = SP_ROPE_LONGROPE;
        spindle_status st = parse_long_factor(cfg, rs, r->rotary_dim / 2,
                                              path, err);
        if (st) return st;
        r->long_factor = cfg->rope_long_factor;
        r->original_max_position = position_count(RS_NUM(
            "original_max_position_embeddings",
            sp_config_num(cfg, "original_max_position_embeddings", 4096)));
        /* The context extension that sizes the attention scale; a config
         * without max_position_embeddings extends nothing. */
        r->factor = r->original_max_position > 0 && cfg->max_position > 0
                        ? (double)cfg->max_position / r->original_max_position
                        : 1.0;
    } else {
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: rope_scaling type '%s' is not supported "
                       "(supported: default, linear, llama3, yarn, longrope)",
                       path, type);
    }
#undef RS_NUM
    if (!(r->factor > 0) || !isfinite(r->factor))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: rope_scaling factor must be positive", path);
    if (r->original_max_position < 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: rope_scaling original_max_position_embeddings "
                       "must be an integer in [1, 2^30]", path);
    return SPINDLE_OK;
}

static spindle_status parse_rope(sp_model_config *cfg, const char *path,
                                 spindle_error *err) {
    return sp_config_parse_rope(cfg, get(cfg, "rope_scaling"),
                                sp_config_num(cfg, "rope_theta", 10000.0),
                                path, &cfg->rope, err);
}

/* A "mode" value: 0 affine, 1 mxfp4, -1 another. */
static int quant_mode(const cJSON *mode) {
    if (!cJSON_IsString(mode)) return -1;
    return !strcmp(mode->valuestring, "affine")  ? 0
           : !strcmp(mode->valuestring, "mxfp4") ? 1
                                                 : -1;
}

static spindle_status parse_quantization(sp_model_config *cfg,
                                         const char *path,
                                         spindle_error *err) {
    const cJSON *q = get(cfg, "quantization");
    if (!q) {
        /* Legacy MLX checkpoints carry the same block under this name; other
         * quantizers (GPTQ, AWQ...) use it with a quant_method we lack, but
         * for Hugging Face's MXFP4 checkpoints (gpt-oss), whose packed
         * modules mlx-lm reads as mxfp4 in groups of 32. */
        const cJSON *qc = get(cfg, "quantization_config");
        const cJSON *method =
            qc ? cJSON_GetObjectItemCaseSensitive(qc, "quant_method") : NULL;
        if (method && cJSON_IsString(method) &&
            !strcmp(method->valuestring, "mxfp4")) {
            cfg->quantized = cfg->quant_mxfp4 = true;
            cfg->quant_bits = 4;
            cfg->quant_group_size = 32;
            return SPINDLE_OK;
        }
        if (method)
            return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                           "%s: quantization_config with quant_method '%s' "
                           "is not supported (only MLX's affine and mxfp4 "
                           "modes, and Hugging Face's mxfp4)", path,
                           cJSON_IsString(method) ? method->valuestring : "?");
        q = qc;
    }
    if (!q) return SPINDLE_OK;
    if (!cJSON_IsObject(q))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: 'quantization' must be an object", path);
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(q, "mode");
    if (mode && quant_mode(mode) < 0)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: quantization mode '%s' is not supported (only "
                       "affine and mxfp4)", path,
                       cJSON_IsString(mode) ? mode->valuestring : "?");
    cfg->quant_mxfp4 = mode && quant_mode(mode) == 1;
    const cJSON *bits = cJSON_GetObjectItemCaseSensitive(q, "bits");
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(q, "group_size");
    if (small_count(bits) < 0 || small_count(gs) < 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: 'quantization' needs positive integer 'bits' and "
                       "'group_size'", path);
    cfg->quantized = true;
    cfg->quant_bits = small_count(bits);
    cfg->quant_group_size = small_count(gs);
    return SPINDLE_OK;
}

sp_quant_rule sp_config_quant_rule(const sp_model_config *cfg,
                                   const char *module_path, int *bits,
                                   int *group_size, bool *mxfp4) {
    *bits = cfg->quant_bits;
    *group_size = cfg->quant_group_size;
    *mxfp4 = cfg->quant_mxfp4;
    const cJSON *q = get(cfg, "quantization");
    if (!q) q = get(cfg, "quantization_config");
    const cJSON *m = q ? cJSON_GetObjectItemCaseSensitive(q, module_path) : NULL;
    if (!m) return SP_QUANT_INFER;
    if (cJSON_IsFalse(m)) return SP_QUANT_FLOAT;
    if (cJSON_IsObject(m)) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(m, "bits");
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(m, "group_size");
        /* An invalid one reads as 0, which the weight binder rejects. */
        if (cJSON_IsNumber(b)) *bits = small_count(b) < 0 ? 0 : small_count(b);
        if (cJSON_IsNumber(g))
            *group_size = small_count(g) < 0 ? 0 : small_count(g);
        const cJSON *mode = cJSON_GetObjectItemCaseSensitive(m, "mode");
        *mxfp4 = mode && quant_mode(mode) == 1;
        if (mode && quant_mode(mode) < 0) *bits = 0;
        return SP_QUANT_EXPLICIT;
    }
    return SP_QUANT_INFER;
}

/* Multimodal configs nest the language model's settings in text_config;
 * use them over the outer keys so the rest of the engine sees one object. */
static cJSON *effective_config(const cJSON *root) {
    cJSON *eff = cJSON_Duplicate(root, 1);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!eff || !cJSON_IsObject(tc)) return eff;
    const cJSON *item;
    cJSON_ArrayForEach(item, tc) {
        cJSON *copy = cJSON_Duplicate(item, 1);
        if (!copy) { cJSON_Delete(eff); return NULL; }
        if (cJSON_GetObjectItemCaseSensitive(eff, item->string))
            cJSON_ReplaceItemInObjectCaseSensitive(eff, item->string, copy);
        else
            cJSON_AddItemToObject(eff, item->string, copy);
    }
    return eff;
}

static spindle_status load_json(const char *path, cJSON **out,
                                spindle_error *err) {
    char *text = NULL;
    size_t len = 0;
    spindle_status st = sp_read_text_file(path, &text, &len, err);
    if (st) return st;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0;
        free(text);
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: invalid JSON near byte %zu", path, off);
    }
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: not a JSON object", path);
    }
    *out = j;
    return SPINDLE_OK;
}

/* The key of the dense MLP's width. Configs without intermediate_size
 * name it otherwise: LFM2's block_ff_dim (which its family adjusts), or,
 * where every layer is routed experts (Qwen3.5 MoE), only the experts'
 * moe_intermediate_size, which then sizes the MLP scratch. */
static const char *ffn_width_key(const sp_model_config *cfg) {
    static const char *const keys[] = {"intermediate_size", "block_ff_dim",
                                       "moe_intermediate_size"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (get(cfg, keys[i])) return keys[i];
    return keys[0];
}

static spindle_status parse_fields(sp_model_config *cfg, const char *path,
                                   spindle_error *err) {
    const cJSON *mt = get(cfg, "model_type");
    if (!cJSON_IsString(mt))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: missing 'model_type'",
                       path);
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt->valuestring);

    spindle_status st;
    if ((st = need_int(cfg, path, "hidden_size", 1 << 20, &cfg->hidden_size, err)) ||
        (st = need_int(cfg, path, "num_hidden_layers", 4096, &cfg->n_layers, err)) ||
        (st = need_int(cfg, path, ffn_width_key(cfg), 1 << 22, &cfg->intermediate_size, err)) ||
        (st = need_int(cfg, path, "num_attention_heads", 4096, &cfg->n_heads, err)) ||
        (st = need_int(cfg, path, "vocab_size", 1 << 24, &cfg->vocab_size, err)))
        return st;
    cfg->n_kv_heads = cfg->n_heads;
    if (get(cfg, "num_key_value_heads") &&
        (st = need_int(cfg, path, "num_key_value_heads", 4096, &cfg->n_kv_heads, err)))
        return st;
    if (cfg->n_heads % cfg->n_kv_heads)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: num_attention_heads (%d) is not a multiple of "
                       "num_key_value_heads (%d)", path, cfg->n_heads,
                       cfg->n_kv_heads);
    cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    if (get(cfg, "head_dim") &&
        (st = need_int(cfg, path, "head_dim", 1 << 14, &cfg->head_dim, err)))
        return st;
    if (cfg->head_dim < 1)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: num_attention_heads (%d) exceeds hidden_size (%d) "
                       "and no 'head_dim' gives the head size", path,
                       cfg->n_heads, cfg->hidden_size);
    if (cfg->head_dim % 2)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: head_dim %d is odd",
                       path, cfg->head_dim);
    cfg->max_position = sp_config_int(cfg, "max_position_embeddings", 0);
    cfg->rms_norm_eps = (float)sp_config_num(cfg, "rms_norm_eps", 1e-6);
    cfg->rope_traditional = sp_config_bool(cfg, "rope_traditional", false);
    const cJSON *tie = get(cfg, "tie_word_embeddings");
    cfg->tie_word_embeddings = cJSON_IsBool(tie) ? cJSON_IsTrue(tie) : -1;
    cfg->attention_bias = sp_config_bool(cfg, "attention_bias", false);
    cfg->mlp_bias = sp_config_bool(cfg, "mlp_bias", false);
    const cJSON *dt = get(cfg, "torch_dtype");
    if (!dt) dt = get(cfg, "dtype");
    cfg->torch_dtype = parse_dtype_name(cJSON_IsString(dt) ? dt->valuestring : NULL);
    cfg->bos_id = sp_config_int(cfg, "bos_token_id", -1);
    add_eos(cfg, get(cfg, "eos_token_id"));
    if ((st = parse_rope(cfg, path, err))) return st;
    return parse_quantization(cfg, path, err);
}

spindle_status sp_config_from_json(cJSON *root, const char *label,
                                   sp_model_config *cfg, spindle_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg->root = root;
    cfg->json = effective_config(root);
    spindle_status st = cfg->json ? parse_fields(cfg, label, err)
                                  : sp_fail(err, SPINDLE_ERR_MEMORY,
                                            "out of memory");
    if (st) sp_config_free(cfg);
    return st;
}

spindle_status sp_config_load(const char *dir, sp_model_config *cfg,
                              spindle_error *err) {
    memset(cfg, 0, sizeof *cfg);
    char *path = sp_path_join(dir, "config.json");
    if (!path) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!sp_file_exists(path)) {
        spindle_status st = sp_fail(err, SPINDLE_ERR_IO,
                                    "%s: no config.json in this directory", dir);
        free(path);
        return st;
    }
    cJSON *root = NULL;
    spindle_status st = load_json(path, &root, err);
    if (!st) st = sp_config_from_json(root, path, cfg, err);
    free(path);
    if (st) return st;

    /* generation_config.json's eos ids are the ones generation stops on. */
    char *gpath = sp_path_join(dir, "generation_config.json");
    if (gpath && sp_file_exists(gpath)) {
        cJSON *gen = NULL;
        st = load_json(gpath, &gen, err);
        if (!st) {
            add_eos(cfg, cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id"));
            cJSON_Delete(gen);
        }
    }
    free(gpath);
    if (st) sp_config_free(cfg);
    return st;
}

void sp_config_free(sp_model_config *cfg) {
    if (!cfg) return;
    free(cfg->rope_long_factor);
    cfg->rope_long_factor = NULL;
    cfg->rope.long_factor = NULL;
    cJSON_Delete(cfg->json);
    cJSON_Delete(cfg->root);
    cfg->json = cfg->root = NULL;
}
