/* SmolLM3: the Llama layer with RoPE switched off in some layers (NoPE).
 *
 * mlx-lm (smollm3.py): `no_rope_layers` lists one flag per layer, 1 for a
 * layer that rotates and 0 for one that does not; without it every
 * no_rope_layer_interval-th layer (default 4) goes without.
 *
 * GGUF (llama.cpp's "smollm3"): Llama's tensors with q/k permuted for the
 * interleaved RoPE; llama.cpp fixes the interval at 4 and stores no flags,
 * so a GGUF file takes the default. */
#include "models/blocks.h"
#include "base/error.h"

#include <math.h>
#include <stdlib.h>

/* Whether layer l rotates its queries and keys, per the config. */
static spindle_status rope_layers(spindle_model *m, bool *uses_rope,
                                  spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    const cJSON *list =
        cJSON_GetObjectItemCaseSensitive(c->json, "no_rope_layers");
    if (list && !cJSON_IsNull(list)) {
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != c->n_layers)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: 'no_rope_layers' must list %d "
                           "flags (one per layer)", m->dir, c->n_layers);
        for (int l = 0; l < c->n_layers; l++) {
            const cJSON *v = cJSON_GetArrayItem(list, l);
            if (cJSON_IsBool(v)) {
                uses_rope[l] = cJSON_IsTrue(v);
                continue;
            }
            if (!cJSON_IsNumber(v) ||
                (v->valuedouble != 0 && v->valuedouble != 1))
                return sp_fail(err, SPINDLE_ERR_FORMAT,
                               "%s/config.json: no_rope_layers[%d] must be "
                               "0 or 1", m->dir, l);
            uses_rope[l] = v->valuedouble == 1;
        }
        return SPINDLE_OK;
    }
    const cJSON *iv =
        cJSON_GetObjectItemCaseSensitive(c->json, "no_rope_layer_interval");
    int interval = 4;
    if (iv && !cJSON_IsNull(iv)) {
        if (!cJSON_IsNumber(iv) || iv->valuedouble < 1 ||
            iv->valuedouble > 4096 || iv->valuedouble != floor(iv->valuedouble))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: 'no_rope_layer_interval' must be "
                           "an integer in [1, 4096]", m->dir);
        interval = (int)iv->valuedouble;
    }
    for (int l = 0; l < c->n_layers; l++)
        uses_rope[l] = (l + 1) % interval != 0;
    return SPINDLE_OK;
}

static spindle_status smollm3_load(spindle_model *m, spindle_error *err) {
    sp_decoder_options opt = {.qkv_bias = m->cfg.attention_bias,
                              .o_bias = m->cfg.attention_bias};
    spindle_status st = sp_bind_decoder_layers(m, &opt, err);
    if (st) return st;
    bool *uses_rope = calloc((size_t)m->cfg.n_layers, sizeof *uses_rope);
    if (!uses_rope) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    st = rope_layers(m, uses_rope, err);
    for (int l = 0; l < m->cfg.n_layers && !st; l++)
        if (!uses_rope[l]) m->layers[l].rope = NULL;
    free(uses_rope);
    return st;
}

static const sp_gguf_family smollm3_gguf = {
    .arch = "smollm3",
    .model_type = "smollm3",
    .hf_class = "SmolLM3ForCausalLM",
    .rope_interleaved = true,
};

const sp_arch sp_arch_smollm3 = {.model_type = "smollm3",
                                 .gguf = &smollm3_gguf,
                                 .load = smollm3_load,
                                 .layer = sp_prenorm_decoder_layer};
