/* Gemma 3's multimodal projector (vision/gemma3_projector.c): the vision
 * tower's patch grid average-pooled to mm_tokens_per_image soft tokens,
 * the soft-embedding RMSNorm (1 + w), and the linear map to the language
 * model's width. */
#ifndef SP_VISION_GEMMA3_PROJECTOR_H
#define SP_VISION_GEMMA3_PROJECTOR_H

#include "vision/siglip.h"

typedef struct sp_gemma3_projector {
    int vision_hidden, text_hidden;
    int side, tokens_side, kernel;   /* patches per side, tokens per side,
                                        side / tokens_side */
    float eps;
    float *norm;                     /* 1 + w, rounded to the weight dtype */
    sp_weight proj;                  /* [text_hidden][vision_hidden] f32 */
    float *proj_t;                   /* its data (the file's [vision][text]
                                        transposed) */
    /* Each output row times this: mlx-vlm divides the features by
     * sqrt(hidden_size) and the language model multiplies every input row
     * by the bf16-rounded sqrt(hidden_size) (the family's embedding factor,
     * which Spindle does not apply to embeddings spans). */
    float row_scale_div, row_scale_mul;
} sp_gemma3_projector;

/* tokens: mm_tokens_per_image (a square whose side divides the tower's);
 * embed_scale: the language model's embedding factor. */
spindle_status sp_gemma3_projector_load(sp_gemma3_projector *p,
                                        sp_vision_weights *vw,
                                        const sp_siglip *tower, int text_hidden,
                                        int tokens, float embed_scale,
                                        spindle_error *err);
void sp_gemma3_projector_free(sp_gemma3_projector *p);

/* patches [side * side][vision_hidden] -> out [tokens][text_hidden]. */
spindle_status sp_gemma3_projector_forward(const sp_gemma3_projector *p,
                                           sp_pool *pool, const float *patches,
                                           float *out, spindle_error *err);

#endif
