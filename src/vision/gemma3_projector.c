/* Gemma 3's multimodal projector (gemma3_projector.h), as mlx-vlm's
 * Gemma3MultiModalProjector: AvgPool2d(kernel = stride = side /
 * tokens_side) over the patch grid, RMSNorm with (1 + w), then the
 * [vision][text] projection as one GEMM. */
#include "vision/gemma3_projector.h"
#include "base/error.h"
#include "compute/matmul/matmul.h"
#include "compute/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NORM "multi_modal_projector.mm_soft_emb_norm.weight"
#define PROJ "multi_modal_projector.mm_input_projection_weight"

static spindle_status bind_norm(sp_gemma3_projector *p, sp_vision_weights *vw,
                                spindle_error *err) {
    const int64_t dims[1] = {p->vision_hidden};
    const sp_tensor_info *t = NULL;
    spindle_status st = sp_vision_tensor(vw, NORM, 1, dims, &t, err);
    if (st) return st;
    p->norm = malloc((size_t)p->vision_hidden * sizeof *p->norm);
    if (!p->norm) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int i = 0; i < p->vision_hidden; i++) {
        float v = 1.0f + sp_load_float(t->data, t->dtype, (size_t)i);
        /* mlx computes 1 + w in the weight's dtype. */
        if (t->dtype == SP_DTYPE_BF16) v = sp_bf16_to_f32(sp_f32_to_bf16(v));
        if (t->dtype == SP_DTYPE_F16) v = sp_f16_to_f32(sp_f32_to_f16(v));
        p->norm[i] = v;
    }
    return SPINDLE_OK;
}

static spindle_status bind_projection(sp_gemma3_projector *p,
                                      sp_vision_weights *vw,
                                      spindle_error *err) {
    const int64_t dv = p->vision_hidden, dt = p->text_hidden;
    const int64_t dims[2] = {dv, dt};
    const sp_tensor_info *t = NULL;
    spindle_status st = sp_vision_tensor(vw, PROJ, 2, dims, &t, err);
    if (st) return st;
    p->proj_t = malloc((size_t)dv * dt * sizeof *p->proj_t);
    if (!p->proj_t) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int64_t i = 0; i < dv; i++)
        for (int64_t j = 0; j < dt; j++)
            p->proj_t[j * dv + i] = sp_load_float(t->data, t->dtype, (size_t)(i * dt + j));
    p->proj = (sp_weight){.type = SP_W_F32, .rows = dt, .cols = dv,
                          .data = p->proj_t};
    return SPINDLE_OK;
}

spindle_status sp_gemma3_projector_load(sp_gemma3_projector *p,
                                        sp_vision_weights *vw,
                                        const sp_siglip *tower, int text_hidden,
                                        int tokens, float embed_scale,
                                        spindle_error *err) {
    memset(p, 0, sizeof *p);
    p->vision_hidden = tower->hidden;
    p->text_hidden = text_hidden;
    p->side = tower->side;
    p->eps = tower->eps;
    p->tokens_side = (int)lround(sqrt((double)tokens));
    if (tokens < 1 || p->tokens_side * p->tokens_side != tokens ||
        p->side % p->tokens_side)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "config.json: mm_tokens_per_image %d is not a square "
                       "whose side divides the %d patches per side", tokens,
                       p->side);
    p->kernel = p->side / p->tokens_side;
    p->row_scale_div = sqrtf((float)text_hidden);
    p->row_scale_mul = embed_scale;
    spindle_status st = bind_norm(p, vw, err);
    if (!st) st = bind_projection(p, vw, err);
    return st;
}

void sp_gemma3_projector_free(sp_gemma3_projector *p) {
    free(p->norm);
    free(p->proj_t);
    p->norm = p->proj_t = NULL;
}

spindle_status sp_gemma3_projector_forward(const sp_gemma3_projector *p,
                                           sp_pool *pool, const float *patches,
                                           float *out, spindle_error *err) {
    const int dv = p->vision_hidden, ts = p->tokens_side, k = p->kernel;
    const int tokens = ts * ts;
    float *pooled = calloc((size_t)tokens * dv, sizeof *pooled);
    if (!pooled) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int ty = 0; ty < ts; ty++)
        for (int tx = 0; tx < ts; tx++) {
            float *row = pooled + (size_t)(ty * ts + tx) * dv;
            for (int y = ty * k; y < (ty + 1) * k; y++)
                for (int x = tx * k; x < (tx + 1) * k; x++) {
                    const float *src = patches + (size_t)(y * p->side + x) * dv;
                    for (int i = 0; i < dv; i++) row[i] += src[i];
                }
            for (int i = 0; i < dv; i++) row[i] /= (float)(k * k);
            sp_rmsnorm(row, row, p->norm, dv, p->eps, 0.0f);
        }
    sp_matmul(pool, &p->proj, pooled, tokens, out);
    for (size_t i = 0; i < (size_t)tokens * p->text_hidden; i++)
        out[i] = out[i] / p->row_scale_div * p->row_scale_mul;
    free(pooled);
    return SPINDLE_OK;
}
