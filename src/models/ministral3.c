/* Ministral 3 (model_type "ministral3"; the text model of "mistral3"
 * configs, whose weights mlx-lm keeps under "language_model.", see
 * spindle_model.tensor_prefix), as mlx-lm's ministral3.py computes it:
 * the Llama layer without biases, plus
 *  - RoPE from `rope_parameters` (rope_theta and the scaling block in one
 *    object, usually yarn), rotate-half;
 *  - Llama 4's attention temperature: queries at position p times
 *    1 + llama_4_scaling_beta * log(1 + floor(p / original_max_position_
 *    embeddings)), both from rope_parameters;
 *  - optional sliding-window layers (`layer_types`, `sliding_window`).
 *
 * GGUF (llama.cpp's "mistral3"): Llama's tensors with q/k permuted for the
 * interleaved RoPE; the temperature is attention.temperature_scale over
 * rope.scaling.original_context_length, RoPE scaling the common keys. */
#include "models/blocks.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>

/* rope_parameters[key] as a number in [lo, hi], else a one-line error. */
static spindle_status rope_param(spindle_model *m, const cJSON *rp,
                                 const char *key, double lo, double hi,
                                 double *out, spindle_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rp, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo) ||
        !(v->valuedouble <= hi))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: ministral3 needs "
                       "rope_parameters.%s, a number in [%g, %g]", m->dir,
                       key, lo, hi);
    *out = v->valuedouble;
    return SPINDLE_OK;
}

/* The RoPE and temperature of a config.json: all in rope_parameters. */
static spindle_status hf_rope(spindle_model *m, double *beta, double *period,
                              spindle_error *err) {
    const cJSON *rp =
        cJSON_GetObjectItemCaseSensitive(m->cfg.json, "rope_parameters");
    if (!cJSON_IsObject(rp))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: ministral3 needs 'rope_parameters'",
                       m->dir);
    double theta = 0;
    spindle_status st;
    if ((st = rope_param(m, rp, "rope_theta", 1e-3, 1e30, &theta, err)) ||
        (st = rope_param(m, rp, "llama_4_scaling_beta", 0, 1e6, beta,
                         err)) ||
        (st = rope_param(m, rp, "original_max_position_embeddings", 1,
                         1 << 30, period, err)))
        return st;
    char label[300];
    snprintf(label, sizeof label, "%s/config.json: rope_parameters", m->dir);
    sp_rope_config r;
    if ((st = sp_config_parse_rope(&m->cfg, rp, theta, label, &r, err)))
        return st;
    m->rope_interleaved = false; /* mlx-lm: traditional off */
    sp_rope_free(&m->rope);
    if (sp_rope_init(&m->rope, &r))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

/* A GGUF file's temperature (the RoPE came from the common keys). */
static spindle_status gguf_temperature(spindle_model *m, double *beta,
                                       double *period, spindle_error *err) {
    *beta = sp_config_num(&m->cfg, "llama_4_scaling_beta", 0.0);
    if (*beta == 0) return SPINDLE_OK;
    return sp_model_positive(m, "original_max_position_embeddings", NAN,
                             period, err);
}

static spindle_status ministral3_load(spindle_model *m, spindle_error *err) {
    double beta = 0, period = 1;
    spindle_status st = m->gguf ? gguf_temperature(m, &beta, &period, err)
                                : hf_rope(m, &beta, &period, err);
    if (st) return st;
    sp_decoder_options opt = {0};
    if ((st = sp_bind_decoder_layers(m, &opt, err))) return st;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        m->layers[l].attn_temp_beta = (float)beta;
        m->layers[l].attn_temp_period = (int)period;
    }
    return sp_model_sliding_layers(m, 0, NAN, NULL, err);
}

static const sp_gguf_key_map ministral3_gguf_keys[] = {
    {"attention.temperature_scale", "llama_4_scaling_beta", SP_GGUF_KEY_REAL},
    {"rope.scaling.original_context_length",
     "original_max_position_embeddings", SP_GGUF_KEY_COUNT},
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

static const sp_gguf_family ministral3_gguf = {
    .arch = "mistral3",
    .model_type = "ministral3",
    .hf_class = "Ministral3ForCausalLM",
    .keys = ministral3_gguf_keys,
    .rope_interleaved = true,
};

const sp_arch sp_arch_ministral3 = {.model_type = "ministral3",
                                    .gguf = &ministral3_gguf,
                                    .load = ministral3_load,
                                    .layer = sp_prenorm_decoder_layer};
