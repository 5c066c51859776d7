/* Parsing of a LoRA adapter's adapter_config.json (PEFT or mlx-lm).
 * Pure, fuzzed by tests/fuzz/fuzz_adapter_config.c. */
#include "artifacts/adapter_config.h"
#include "base/error.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

static const char *const module_names[SP_LORA_N_MODULES] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
    "gate", "shared_expert_gate",
    "in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_b",
    "in_proj_a", "out_proj",
};

int sp_lora_module_from_name(const char *name) {
    const char *dot = strrchr(name, '.');
    const char *last = dot ? dot + 1 : name;
    for (int i = 0; i < SP_LORA_N_MODULES; i++)
        if (!strcmp(last, module_names[i])) return i;
    /* gpt-oss names its router mlp.router, Gemma 4 router.proj */
    return strcmp(last, "router") && strcmp(last, "proj") ? -1 : SP_LORA_ROUTER;
}

const char *sp_lora_module_name(sp_lora_module m) {
    return (int)m >= 0 && m < SP_LORA_N_MODULES ? module_names[m] : "?";
}

static const cJSON *item(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A present key that is true, a non-empty object/array, or a string
 * other than `off`: a feature we refuse. */
static bool feature_on(const cJSON *obj, const char *key, const char *off) {
    const cJSON *v = item(obj, key);
    if (!v || cJSON_IsFalse(v)) return false;
    if (cJSON_IsString(v)) return !off || strcmp(v->valuestring, off);
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) return cJSON_GetArraySize(v) > 0;
    return true;
}

static spindle_status read_rank(const cJSON *v, const char *what,
                                const char *key, int dflt, int *out,
                                spindle_error *err) {
    if (!v) {
        if (dflt > 0) {
            *out = dflt;
            return SPINDLE_OK;
        }
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: missing %s", what, key);
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < 1 || v->valuedouble > SP_LORA_MAX_RANK)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: %s must be an integer in 1..%d", what, key,
                       SP_LORA_MAX_RANK);
    *out = (int)v->valuedouble;
    return SPINDLE_OK;
}

static spindle_status read_number(const cJSON *v, const char *what,
                                  const char *key, double *out,
                                  spindle_error *err) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        fabs(v->valuedouble) > 1e6)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: %s must be a finite number", what, key);
    *out = v->valuedouble;
    return SPINDLE_OK;
}

/* A list of module names (PEFT target_modules, mlx-lm keys) -> bits. */
static spindle_status read_targets(const cJSON *list, const char *what,
                                   const char *key, unsigned *out,
                                   spindle_error *err) {
    *out = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        if (!cJSON_IsString(e))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: %s must hold strings", what, key);
        int m = sp_lora_module_from_name(e->valuestring);
        if (m < 0)
            return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                           "%s: unknown target module '%.64s' in %s "
                           "(supported: q/k/v/o/gate/up/down_proj, the router gate "
                           "or router, shared_expert_gate)",
                           what, e->valuestring, key);
        *out |= 1u << m;
    }
    if (!*out)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: %s is empty", what, key);
    return SPINDLE_OK;
}

static spindle_status parse_peft(const cJSON *root, const char *what,
                                 sp_adapter_config *out, spindle_error *err) {
    const cJSON *type = item(root, "peft_type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "LORA")))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: peft_type must be \"LORA\"", what);
    static const struct { const char *key, *off; } refused[] = {
        {"use_dora", NULL},      {"rank_pattern", NULL},
        {"alpha_pattern", NULL}, {"modules_to_save", NULL},
        {"fan_in_fan_out", NULL}, {"bias", "none"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (feature_on(root, refused[i].key, refused[i].off))
            return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                           "%s: %s is not supported", what, refused[i].key);
    out->format = SP_ADAPTER_PEFT;
    /* PEFT's LoraConfig defaults: r 8, lora_alpha 8. */
    spindle_status st = read_rank(item(root, "r"), what, "r", 8, &out->rank, err);
    double alpha = 8;
    const cJSON *a = item(root, "lora_alpha");
    if (!st && a) st = read_number(a, what, "lora_alpha", &alpha, err);
    if (st) return st;
    const cJSON *rs = item(root, "use_rslora");
    if (rs && !cJSON_IsBool(rs))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: use_rslora must be a "
                       "boolean", what);
    out->scale = alpha / (cJSON_IsTrue(rs) ? sqrt(out->rank) : out->rank);
    const cJSON *t = item(root, "target_modules");
    out->targets = SP_LORA_ALL_MODULES;
    if (cJSON_IsArray(t))
        return read_targets(t, what, "target_modules", &out->targets, err);
    /* A string is "all-linear" or a regular expression over module paths:
     * the tensors present then decide. */
    if (t && !cJSON_IsString(t))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: target_modules must be "
                       "a list or a string", what);
    return SPINDLE_OK;
}

static spindle_status parse_mlx(const cJSON *root, const cJSON *params,
                                const char *what, sp_adapter_config *out,
                                spindle_error *err) {
    const cJSON *type = item(root, "fine_tune_type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "lora")))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: fine_tune_type must be \"lora\" (DoRA and full "
                       "fine-tunes are not adapters Spindle applies)", what);
    if (!cJSON_IsObject(params))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: lora_parameters must be an object", what);
    out->format = SP_ADAPTER_MLX;
    spindle_status st = read_rank(item(params, "rank"), what,
                                  "lora_parameters.rank", 0, &out->rank, err);
    if (st) return st;
    const cJSON *s = item(params, "scale");
    if (!s)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: lora_parameters has no scale%s", what,
                       item(params, "alpha") ? " (mlx-lm uses scale, not "
                                               "alpha)" : "");
    st = read_number(s, what, "lora_parameters.scale", &out->scale, err);
    if (st) return st;
    const cJSON *keys = item(params, "keys");
    out->targets = SP_LORA_ALL_MODULES;
    if (keys && !cJSON_IsArray(keys))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: lora_parameters.keys must be a list", what);
    if (keys)
        return read_targets(keys, what, "lora_parameters.keys", &out->targets,
                            err);
    return SPINDLE_OK;
}

spindle_status sp_adapter_config_parse(const char *json, size_t len,
                                       const char *what,
                                       sp_adapter_config *out,
                                       spindle_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: not a JSON object", what);
    }
    const cJSON *params = item(root, "lora_parameters");
    spindle_status st = params ? parse_mlx(root, params, what, out, err)
                               : parse_peft(root, what, out, err);
    cJSON_Delete(root);
    return st;
}
