/* The encoders' tensors, read from the model's safetensors files beside
 * the language model (vision_weights.c). The vision tower and projector
 * sit outside the language model's name prefix (mlx-vlm writes
 * "vision_tower.", transformers "model.vision_tower."), so they are found
 * by their file names. Float tensors only: the converters leave encoders
 * unquantized. */
#ifndef SP_VISION_WEIGHTS_H
#define SP_VISION_WEIGHTS_H

#include "models/model.h"

/* Where the files put the encoder's tensors, and the vectors copied out of
 * them (freed by sp_vision_weights_free). */
typedef struct sp_vision_weights {
    spindle_model *m;
    char prefix[32];      /* "" or "model." */
    float **owned;
    int n_owned, cap_owned;
} sp_vision_weights;

/* Finds `probe` (a tensor name without the prefix) under "" or "model.";
 * SPINDLE_ERR_UNSUPPORTED naming it when the model has neither. */
spindle_status sp_vision_weights_init(sp_vision_weights *vw, spindle_model *m,
                                      const char *probe, spindle_error *err);
void sp_vision_weights_free(sp_vision_weights *vw);

/* The tensor `name`, which must have the nd dimensions dims[] and a float
 * dtype (one line naming it otherwise). */
spindle_status sp_vision_tensor(sp_vision_weights *vw, const char *name, int nd,
                                const int64_t *dims,
                                const sp_tensor_info **out, spindle_error *err);
/* `<prefix>.weight` [rows][cols] as a view, `<prefix>.bias` [rows] copied
 * (absent: NULL, unless need_bias). */
spindle_status sp_vision_linear(sp_vision_weights *vw, const char *prefix,
                                int64_t rows, int64_t cols, bool need_bias,
                                sp_linear *out, spindle_error *err);
/* A float tensor of n elements copied to f32 (any shape of that size). */
spindle_status sp_vision_floats(sp_vision_weights *vw, const char *name,
                                int64_t n, const float **out,
                                spindle_error *err);
/* A float tensor's [rows][cols] as a matrix view. */
sp_weight sp_vision_view(const sp_tensor_info *t, int64_t rows, int64_t cols);

#endif
