/* OLMo 2 and OLMo 3, as mlx-lm's olmo2.py / olmo3.py compute them:
 *  - no pre-norms: each block reads the residual stream as it is, and its
 *    output is normalized (post_attention_layernorm,
 *    post_feedforward_layernorm) before it joins the stream;
 *  - q_norm / k_norm: RMSNorm over the whole q / k projection, before RoPE;
 *  - OLMo 3 adds sliding-window layers: `layer_types`, else every layer but
 *    each 4th slides, through `sliding_window`; those layers rotate with
 *    plain RoPE (rope_theta, no rope_scaling), the full ones with the
 *    scaled one. OLMo 3 ignores rope_traditional and MLP biases.
 *
 * GGUF: llama.cpp writes both as "olmo2" (rotate-half RoPE, no
 * permutation), an OLMo 3 file with attention.sliding_window and its
 * sliding_window_pattern (a flag per layer, or llama.cpp's default of
 * every 4th layer full); so an "olmo2" GGUF with a window is OLMo 3. */
#include "models/blocks.h"
#include "base/error.h"

#include <math.h>
#include <stdlib.h>

/* What spindle_model.family holds: the sliding layers' RoPE. */
typedef struct olmo {
    sp_rope rope_sliding;
} olmo;

static void olmo_free(void *family) {
    olmo *o = family;
    sp_rope_free(&o->rope_sliding);
    free(o);
}

static spindle_status olmo_load(spindle_model *m, bool olmo3,
                                spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    sp_decoder_options opt = {.qkv_bias = c->attention_bias,
                              .o_bias = c->attention_bias,
                              .qk_norm_full = true,
                              .norms = SP_NORMS_POST};
    spindle_status st = sp_bind_decoder_layers(m, &opt, err);
    if (st) return st;
    bool gguf_windows =
        m->gguf && cJSON_GetObjectItemCaseSensitive(c->json, "sliding_window");
    if (!olmo3 && !gguf_windows) return SPINDLE_OK;
    if (olmo3 && !m->gguf) m->rope_interleaved = false;

    olmo *o = calloc(1, sizeof *o);
    if (!o) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    m->family = o;
    sp_rope_config plain = c->rope;
    plain.type = SP_ROPE_DEFAULT;
    plain.factor = 1.0;
    if (sp_rope_init(&o->rope_sliding, &plain))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return sp_model_sliding_layers(m, 4, NAN, &o->rope_sliding, err);
}

static spindle_status olmo2_load(spindle_model *m, spindle_error *err) {
    return olmo_load(m, false, err);
}

static spindle_status olmo3_load(spindle_model *m, spindle_error *err) {
    return olmo_load(m, true, err);
}

static const sp_gguf_name_map olmo2_gguf_layers[] = {
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
    {NULL, NULL},
};

static const sp_gguf_key_map olmo2_gguf_keys[] = {
    {"attention.sliding_window", "sliding_window", SP_GGUF_KEY_COUNT},
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

static const sp_gguf_family olmo2_gguf = {
    .arch = "olmo2",
    .model_type = "olmo2",
    .hf_class = "Olmo2ForCausalLM",
    .layer_names = olmo2_gguf_layers,
    .keys = olmo2_gguf_keys,
};

/* The standard layer follows each layer's own norms: post-norms here. */
const sp_arch sp_arch_olmo2 = {.model_type = "olmo2",
                               .gguf = &olmo2_gguf,
                               .load = olmo2_load,
                               .layer = sp_prenorm_decoder_layer,
                               .free_family = olmo_free};
const sp_arch sp_arch_olmo3 = {.model_type = "olmo3",
                               .load = olmo3_load,
                               .layer = sp_prenorm_decoder_layer,
                               .free_family = olmo_free};
