/* The SigLIP vision tower (vision/siglip.c): patch embedding, learned
 * position embeddings, pre-norm encoder layers with bidirectional
 * attention and a tanh-GELU MLP, the post-layernorm. As mlx-vlm's
 * SigLipVisionModel and transformers' SiglipVisionTransformer compute it
 * (without the pooling head, which Gemma 3 does not use). */
#ifndef SP_VISION_SIGLIP_H
#define SP_VISION_SIGLIP_H

#include "vision/vision_weights.h"

#include <cjson/cJSON.h>

typedef struct sp_siglip_layer {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    sp_linear q, k, v, o, fc1, fc2;
} sp_siglip_layer;

typedef struct sp_siglip {
    int hidden, intermediate, n_heads, n_layers;
    int patch, image_size, side;   /* side = image_size / patch */
    float eps;
    /* The patch convolution as a [hidden][patch * patch * 3] matrix whose
     * columns run channels-last (mlx-vlm's [out, kh, kw, in]) or
     * channels-first (transformers' [out, in, kh, kw]). */
    sp_linear patch_embed;
    bool channels_last;
    const float *position;         /* [side * side][hidden] */
    sp_siglip_layer *layers;
    const float *post_w, *post_b;
} sp_siglip;

/* Reads vision_config (hidden_size, intermediate_size, num_attention_heads,
 * num_hidden_layers, patch_size, image_size, layer_norm_eps) and binds
 * "vision_tower.vision_model.*". */
spindle_status sp_siglip_load(sp_siglip *s, sp_vision_weights *vw,
                              const cJSON *vision_config, spindle_error *err);
void sp_siglip_free(sp_siglip *s);

/* pixels [3][image_size][image_size] -> out [side * side][hidden], the
 * post-layernormed patch rows in raster order, on the pool. */
spindle_status sp_siglip_forward(const sp_siglip *s, sp_pool *pool,
                                 const float *pixels, float *out,
                                 spindle_error *err);

#endif
