/* Binding tensors from the safetensors set to the model's weight views,
 * with the shape and quantization checks that make a bad file fail at load
 * with a message naming the tensor, instead of producing garbage later. */
#include "models/model.h"
#include "base/error.h"
#include "compute/ggml/ggml_quants.h"
#include "compute/matmul/matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sp_model_file_name(const spindle_model *m, const char *name, char *buf,
                        size_t n) {
    const size_t from = strlen(m->tensor_prefix_from);
    const bool moved = !strncmp(name, m->tensor_prefix_from, from);
    return (size_t)snprintf(buf, n, "%s%s", moved ? m->tensor_prefix : "",
                            moved ? name + from : name) < n;
}

bool sp_model_own_name(const spindle_model *m, const char *file_name,
                       char *buf, size_t n) {
    const size_t to = strlen(m->tensor_prefix);
    if (strncmp(file_name, m->tensor_prefix, to)) return false;
    return (size_t)snprintf(buf, n, "%s%s", m->tensor_prefix_from,
                            file_name + to) < n;
}

const sp_tensor_info *sp_model_find_tensor(const spindle_model *m,
                                           const char *name) {
    if (m->gguf) return sp_gguf_weights_find(m->gguf, name);
    if (!m->tensor_prefix[0] && !m->tensor_prefix_from[0])
        return sp_tensor_set_find(m->tensors, name);
    char full[400];
    if (!sp_model_file_name(m, name, full, sizeof full)) return NULL;
    return sp_tensor_set_find(m->tensors, full);
}

size_t sp_model_tensor_count(const spindle_model *m) {
    return m->gguf ? sp_gguf_weights_count(m->gguf)
                   : sp_tensor_set_count(m->tensors);
}

static const sp_tensor_info *find(spindle_model *m, const char *name) {
    return sp_model_find_tensor(m, name);
}

/* Named as the files would name it (tensor_prefix applied). */
static spindle_status missing(spindle_model *m, const char *name,
                              spindle_error *err) {
    char file_name[400];
    if (m->gguf || !sp_model_file_name(m, name, file_name, sizeof file_name))
        snprintf(file_name, sizeof file_name, "%s", name);
    return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: missing tensor '%s'", m->dir,
                   file_name);
}

static bool is_float(sp_dtype t) {
    return t == SP_DTYPE_F32 || t == SP_DTYPE_F16 || t == SP_DTYPE_BF16;
}

static void shape_text(int nd, const int64_t *d, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld",
                                 (long long)d[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* t has exactly the nd dimensions d[]. */
static spindle_status expect_dims(const sp_tensor_info *t, int nd,
                                  const int64_t *d, spindle_error *err) {
    bool ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == d[i];
    if (ok) return SPINDLE_OK;
    char got[128], want[128];
    shape_text(t->ndim, t->shape, got, sizeof got);
    shape_text(nd, d, want, sizeof want);
    return sp_fail(err, SPINDLE_ERR_FORMAT,
                   "%s: tensor '%s' has shape %s, expected %s", t->file,
                   t->name, got, want);
}

/* [rows, cols], or [stack, rows, cols] when stack > 0 (a stacked tensor of
 * `stack` matrices, one per expert), or [cols] for one row. */
static spindle_status expect_matrix(const sp_tensor_info *t, int64_t stack,
                                    int64_t rows, int64_t cols,
                                    spindle_error *err) {
    const int64_t d[3] = {stack, rows, cols};
    /* A one-row matrix may be stored as a vector (llama.cpp's
     * ffn_gate_inp_shexp, Qwen3-Next's shared-expert gate). */
    if (stack == 0 && rows == 1 && t->ndim == 1)
        return expect_dims(t, 1, d + 2, err);
    return stack > 0 ? expect_dims(t, 3, d, err)
                     : expect_dims(t, 2, d + 1, err);
}

static spindle_status track(spindle_model *m, float *p, spindle_error *err) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        float **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) { free(p); return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory"); }
        m->owned = o;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return SPINDLE_OK;
}

/* A float tensor of the nd dimensions d[] copied to an owned f32 array;
 * *out = NULL when it is absent. */
static spindle_status bind_floats(spindle_model *m, const char *name, int nd,
                                  const int64_t *d, const float **out,
                                  spindle_error *err) {
    *out = NULL;
    const sp_tensor_info *t = find(m, name);
    if (!t) return SPINDLE_OK;
    spindle_status st = expect_dims(t, nd, d, err);
    if (st) return st;
    if (t->ggml_quant || !is_float(t->dtype))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s' has dtype %s, expected a float type",
                       t->file, name,
                       t->ggml_quant ? sp_ggml_type_name(t->ggml_type)
                                     : sp_dtype_name(t->dtype));
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)d[i];
    float *v = malloc(n * sizeof(float));
    if (!v) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) v[i] = sp_load_float(t->data, t->dtype, i);
    if ((st = track(m, v, err))) return st;
    *out = v;
    return SPINDLE_OK;
}

spindle_status sp_bind_vector_opt(spindle_model *m, const char *name,
                                  int64_t n, const float **out,
                                  spindle_error *err) {
    return bind_floats(m, name, 1, &n, out, err);
}

spindle_status sp_bind_vector(spindle_model *m, const char *name, int64_t n,
                              const float **out, spindle_error *err) {
    spindle_status st = sp_bind_vector_opt(m, name, n, out, err);
    if (!st && !*out) return missing(m, name, err);
    return st;
}

spindle_status sp_bind_float_matrix(spindle_model *m, const char *name,
                                    int64_t rows, int64_t cols,
                                    const float **out, spindle_error *err) {
    const sp_tensor_info *t = find(m, name);
    if (!t) return missing(m, name, err);
    /* The dimensions other than 1, in order, must be those of [rows, cols]. */
    int64_t want[2], got[SP_MAX_DIMS];
    int nw = 0, ng = 0;
    if (rows != 1) want[nw++] = rows;
    if (cols != 1) want[nw++] = cols;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1) got[ng++] = t->shape[d];
    bool ok = ng == nw;
    for (int i = 0; ok && i < nw; i++) ok = got[i] == want[i];
    if (!ok) {
        char shape[128];
        shape_text(t->ndim, t->shape, shape, sizeof shape);
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s' has shape %s, expected [%lld, %lld] "
                       "(with any dimensions of 1)", t->file, name, shape,
                       (long long)rows, (long long)cols);
    }
    return bind_floats(m, name, t->ndim, t->shape, out, err);
}

void sp_fold_norm_plus_one(spindle_model *m, const char *name, const float *w,
                           int n) {
    if (m->gguf) return;
    const sp_tensor_info *t = sp_model_find_tensor(m, name);
    float *v = (float *)w; /* an owned copy made by sp_bind_vector */
    for (int i = 0; i < n; i++) {
        float s = 1.0f + v[i];
        if (t && t->dtype == SP_DTYPE_BF16)
            s = sp_bf16_to_f32(sp_f32_to_bf16(s));
        else if (t && t->dtype == SP_DTYPE_F16)
            s = sp_f16_to_f32(sp_f32_to_f16(s));
        v[i] = s;
    }
}

static bool valid_bits(int b) {
    return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8;
}

/* The matrix (or stack of matrices) a binder expects: `stack` > 0 for a
 * 3-D tensor of that many [rows, cols] matrices, bound as one view of
 * stack * rows rows. */
typedef struct matrix_shape {
    int64_t stack, rows, cols;
} matrix_shape;

/* MLX affine: <prefix>.weight U32 [rows, cols*bits/32], .scales and .biases
 * [rows, cols/group_size] in one float type (each with the leading stack
 * dimension when stacked, as mlx-lm's QuantizedSwitchLinear stores them). */
static spindle_status bind_affine(spindle_model *m, const char *prefix,
                                  const sp_tensor_info *w,
                                  const sp_tensor_info *scales, int bits,
                                  int group, bool explicit_params,
                                  matrix_shape s, sp_weight *out,
                                  spindle_error *err) {
    char name[300];
    snprintf(name, sizeof name, "%s.biases", prefix);
    const sp_tensor_info *biases = find(m, name);
    if (!biases) return missing(m, name, err);
    if (w->dtype != SP_DTYPE_U32)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: quantized tensor '%s' has dtype %s, expected U32",
                       w->file, w->name, sp_dtype_name(w->dtype));
    const int nd = s.stack > 0 ? 3 : 2;
    if (!explicit_params) {
        /* mlx-lm infers the packing of a module from its shapes. */
        if (scales->ndim == nd && scales->shape[nd - 1] > 0 && w->ndim == nd &&
            s.cols > 0) {
            group = (int)(s.cols / scales->shape[nd - 1]);
            bits = (int)(w->shape[nd - 1] * 32 / s.cols);
        }
    }
    if (!valid_bits(bits) || !(group == 32 || group == 64 || group == 128))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%s': %d-bit quantization with group size "
                       "%d is not supported (bits 2,3,4,5,6,8; groups "
                       "32,64,128)", w->file, w->name, bits, group);
    if (s.cols % group)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': %lld input features are not a "
                       "multiple of the group size %d", w->file, w->name,
                       (long long)s.cols, group);
    spindle_status st;
    if ((st = expect_matrix(w, s.stack, s.rows, s.cols * bits / 32, err)) ||
        (st = expect_matrix(scales, s.stack, s.rows, s.cols / group, err)) ||
        (st = expect_matrix(biases, s.stack, s.rows, s.cols / group, err)))
        return st;
    if (!is_float(scales->dtype) || scales->dtype != biases->dtype)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': scales and biases must share one "
                       "float dtype", scales->file, scales->name);
    out->type = SP_W_AFFINE;
    out->data = w->data;
    out->bits = bits;
    out->group_size = group;
    out->qparam_dtype = scales->dtype;
    out->scales = scales->data;
    out->biases = biases->data;
    return SPINDLE_OK;
}

static spindle_status mxfp4_cols(const sp_tensor_info *codes,
                                 matrix_shape s, spindle_error *err) {
    if (s.cols % 32 == 0) return SPINDLE_OK;
    return sp_fail(err, SPINDLE_ERR_FORMAT,
                   "%s: tensor '%s': %lld input features are not a multiple "
                   "of the mxfp4 group size 32", codes->file, codes->name,
                   (long long)s.cols);
}

/* An MXFP4 view of `codes` (MLX's U32 words or Hugging Face's U8 blocks,
 * the same bytes) with its E8M0 `scales`, once their shapes are checked. */
static spindle_status mxfp4_view(const sp_tensor_info *codes,
                                 const sp_tensor_info *scales, sp_weight *out) {
    out->type = SP_W_MXFP4;
    out->data = codes->data;
    out->bits = 4;
    out->group_size = 32;
    out->qparam_dtype = SP_DTYPE_U8;
    out->scales = scales->data;
    return SPINDLE_OK;
}

/* MLX mxfp4: <prefix>.weight U32 [rows, cols/8] (4-bit E2M1 codes), .scales
 * U8 [rows, cols/32] (E8M0 exponents), no biases (each with the leading
 * stack dimension when stacked, as mlx-lm's QuantizedSwitchLinear stores
 * them). */
static spindle_status bind_mxfp4(const sp_tensor_info *w,
                                 const sp_tensor_info *scales, int bits,
                                 int group, bool explicit_params,
                                 matrix_shape s, sp_weight *out,
                                 spindle_error *err) {
    if (w->dtype != SP_DTYPE_U32)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: quantized tensor '%s' has dtype %s, expected U32",
                       w->file, w->name, sp_dtype_name(w->dtype));
    if (explicit_params && (bits != 4 || group != 32))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%s': mxfp4 with %d bits and group size %d "
                       "(mxfp4 is 4 bits in groups of 32)", w->file, w->name,
                       bits, group);
    spindle_status st;
    if ((st = mxfp4_cols(w, s, err)) ||
        (st = expect_matrix(w, s.stack, s.rows, s.cols / 8, err)) ||
        (st = expect_matrix(scales, s.stack, s.rows, s.cols / 32, err)))
        return st;
    return mxfp4_view(w, scales, out);
}

/* Hugging Face's MXFP4 checkpoints (gpt-oss, transformers' Mxfp4 format):
 * <prefix>_blocks U8 [.., rows, cols/32, 16], two E2M1 codes a byte, low
 * nibble first, which are MLX's uint32 words byte for byte, and
 * <prefix>_scales U8 [.., rows, cols/32]. */
static spindle_status bind_hf_mxfp4(spindle_model *m, const char *prefix,
                                    const sp_tensor_info *blocks,
                                    matrix_shape s, sp_weight *out,
                                    spindle_error *err) {
    char name[300];
    snprintf(name, sizeof name, "%s_scales", prefix);
    const sp_tensor_info *scales = find(m, name);
    if (!scales) return missing(m, name, err);
    const int64_t d[4] = {s.stack, s.rows, s.cols / 32, 16};
    const int lead = s.stack > 0 ? 0 : 1, nd = 4 - lead;
    spindle_status st;
    if ((st = mxfp4_cols(blocks, s, err)) ||
        (st = expect_dims(blocks, nd, d + lead, err)) ||
        (st = expect_dims(scales, nd - 1, d + lead, err)))
        return st;
    if (blocks->dtype != SP_DTYPE_U8 || scales->dtype != SP_DTYPE_U8)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: MXFP4 tensors '%s' and '%s' must be U8",
                       blocks->file, blocks->name, scales->name);
    return mxfp4_view(blocks, scales, out);
}

static spindle_status bind_matrix_view(spindle_model *m, const char *prefix,
                                       matrix_shape s, sp_weight *out,
                                       spindle_error *err) {
    char name[300];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const sp_tensor_info *w = find(m, name);
    if (!w) {
        snprintf(name, sizeof name, "%s_blocks", prefix);
        const sp_tensor_info *blocks = find(m, name);
        *out = (sp_weight){.rows = (s.stack > 0 ? s.stack : 1) * s.rows,
                           .cols = s.cols};
        if (blocks) return bind_hf_mxfp4(m, prefix, blocks, s, out, err);
        /* transformers' fused experts are bare 3-D parameters, no .weight
         * (Gemma 4's experts.gate_up_proj [E][2 inter][hidden], out x in
         * as every matrix here: the shape check catches a transposed one
         * unless it is square) */
        if (!(w = find(m, prefix))) {
            snprintf(name, sizeof name, "%s.weight", prefix);
            return missing(m, name, err);
        }
    }
    *out = (sp_weight){.rows = (s.stack > 0 ? s.stack : 1) * s.rows,
                       .cols = s.cols, .data = w->data};
    spindle_status st;
    if (w->ggml_quant) {
        /* A GGUF block-quantized matrix, used in place (matmul_ggml.c);
         * bind_matrix checks that a kernel can use it. */
        out->type = SP_W_GGML;
        out->ggml_type = w->ggml_type;
        return expect_matrix(w, s.stack, s.rows, s.cols, err);
    }

    int bits, group;
    bool mxfp4;
    char path[300];
    sp_model_file_name(m, prefix, path, sizeof path);
    sp_quant_rule rule =
        sp_config_quant_rule(&m->cfg, path, &bits, &group, &mxfp4);
    snprintf(name, sizeof name, "%s.scales", prefix);
    const sp_tensor_info *scales = find(m, name);
    if (rule != SP_QUANT_FLOAT && scales) {
        /* mlx-lm tells the modes apart by the scales: uint8 exponents for
         * mxfp4, floats for affine; a module's own entry must agree. */
        const bool u8 = scales->dtype == SP_DTYPE_U8;
        const bool explicit_params = rule == SP_QUANT_EXPLICIT;
        if (explicit_params && u8 != mxfp4)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: tensor '%s' has %s scales, but the config "
                           "quantizes '%s' in %s mode", scales->file,
                           scales->name, sp_dtype_name(scales->dtype), prefix,
                           mxfp4 ? "mxfp4" : "affine");
        if (u8)
            return bind_mxfp4(w, scales, bits, group, explicit_params, s, out,
                              err);
        return bind_affine(m, prefix, w, scales, bits, group, explicit_params,
                           s, out, err);
    }

    if ((st = expect_matrix(w, s.stack, s.rows, s.cols, err))) return st;
    switch (w->dtype) {
    case SP_DTYPE_F32: out->type = SP_W_F32; return SPINDLE_OK;
    case SP_DTYPE_F16: out->type = SP_W_F16; return SPINDLE_OK;
    case SP_DTYPE_BF16: out->type = SP_W_BF16; return SPINDLE_OK;
    default:
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has dtype %s, which is not a weight "
                       "type Spindle reads (F32, F16, BF16, MLX affine U32)",
                       w->file, w->name, sp_dtype_name(w->dtype));
    }
}

/* A view the kernels cannot multiply would give NaNs at run time: refuse it
 * here, naming the tensor. */
static spindle_status bind_matrix(spindle_model *m, const char *prefix,
                                  matrix_shape s, sp_weight *out,
                                  spindle_error *err) {
    spindle_status st = bind_matrix_view(m, prefix, s, out, err);
    const char *why = st ? NULL : sp_matmul_check(out);
    if (!why) return st;
    char name[300];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const sp_tensor_info *t = find(m, name);
    return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "%s: tensor '%s': %s",
                   t ? t->file : m->dir, name, why);
}

/* `<prefix>.bias` of the given dimensions, required if need_bias. */
static spindle_status bind_bias(spindle_model *m, const char *prefix, int nd,
                                const int64_t *d, bool need_bias,
                                const float **out, spindle_error *err) {
    char name[300];
    snprintf(name, sizeof name, "%s_bias", prefix);
    /* (Hugging Face's name beside MXFP4 blocks) */
    if (!find(m, name)) snprintf(name, sizeof name, "%s.bias", prefix);
    spindle_status st = bind_floats(m, name, nd, d, out, err);
    if (!st && need_bias && !*out) return missing(m, name, err);
    return st;
}

spindle_status sp_bind_linear(spindle_model *m, const char *prefix,
                              int64_t rows, int64_t cols, bool need_bias,
                              sp_linear *out, spindle_error *err) {
    memset(out, 0, sizeof *out);
    matrix_shape s = {0, rows, cols};
    spindle_status st = bind_matrix(m, prefix, s, &out->w, err);
    if (!st) st = bind_bias(m, prefix, 1, &rows, need_bias, &out->bias, err);
    return st;
}

spindle_status sp_bind_stacked_linear(spindle_model *m, const char *prefix,
                                      int64_t n, int64_t rows, int64_t cols,
                                      bool need_bias, sp_linear *out,
                                      spindle_error *err) {
    memset(out, 0, (size_t)n * sizeof *out);
    matrix_shape s = {n, rows, cols};
    sp_weight all;
    const float *bias;
    const int64_t d[2] = {n, rows};
    spindle_status st = bind_matrix(m, prefix, s, &all, err);
    if (!st) st = bind_bias(m, prefix, 2, d, need_bias, &bias, err);
    for (int64_t i = 0; i < n && !st; i++) {
        out[i].w = sp_weight_row_block(&all, i * rows, rows);
        out[i].bias = bias ? bias + i * rows : NULL;
    }
    return st;
}

spindle_status sp_bind_linear_parts(spindle_model *m, const char *prefix,
                                    int n_parts, const int64_t *rows,
                                    int64_t cols, bool need_bias,
                                    sp_linear *const *out,
                                    spindle_error *err) {
    int64_t total = 0;
    for (int i = 0; i < n_parts; i++) total += rows[i];
    sp_linear whole;
    spindle_status st = sp_bind_linear(m, prefix, total, cols, need_bias,
                                       &whole, err);
    if (st) return st;
    int64_t first = 0;
    for (int i = 0; i < n_parts; first += rows[i++]) {
        out[i]->w = sp_weight_row_block(&whole.w, first, rows[i]);
        out[i]->bias = whole.bias ? whole.bias + first : NULL;
    }
    return SPINDLE_OK;
}

spindle_status sp_bind_embeddings_and_head(spindle_model *m,
                                           spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    /* mlx-lm saves a multimodal model's language model under its
     * attribute name, transformers under the inner model's. */
    if (!m->gguf && !find(m, "model.embed_tokens.weight")) {
        if (sp_tensor_set_find(m->tensors,
                               "language_model.model.embed_tokens.weight"))
            snprintf(m->tensor_prefix, sizeof m->tensor_prefix,
                     "language_model.");
        else if (sp_tensor_set_find(m->tensors, "model.language_model."
                                                "embed_tokens.weight")) {
            snprintf(m->tensor_prefix, sizeof m->tensor_prefix,
                     "model.language_model.");
            snprintf(m->tensor_prefix_from, sizeof m->tensor_prefix_from,
                     "model.");
        }
    }
    matrix_shape s = {0, c->vocab_size, c->hidden_size};
    spindle_status st = bind_matrix(m, "model.embed_tokens", s, &m->embed,
                                    err);
    if (st) return st;
    const char *norm = m->arch->final_norm ? m->arch->final_norm
                                           : "model.norm.weight";
    if ((st = sp_bind_vector(m, norm, c->hidden_size, &m->final_norm, err)))
        return st;
    /* A decoder reranker's GGUF (llama.cpp's rank pooling): its converter
     * stores the lm_head rows of "yes" and "no", in that order, as
     * cls.output. A head of another size is some other classifier, which
     * generation does not need: left unbound. */
    const sp_tensor_info *rank = m->gguf ? find(m, "cls.output.weight") : NULL;
    if (rank && (rank->ndim != 2 || rank->shape[0] != 2)) rank = NULL;
    if (rank && (st = sp_bind_linear(m, "cls.output", 2, c->hidden_size, false,
                                     &m->cls.classifier, err)))
        return st;
    if (rank) m->cls.n_labels = 2;
    /* Configs silent on tying are decided by the files themselves. */
    m->tied = c->tie_word_embeddings == 1 ||
              (c->tie_word_embeddings == -1 &&
               !find(m, "lm_head.weight"));
    if (m->tied) {
        m->lm_head.w = m->embed;
        m->lm_head.bias = NULL;
        return SPINDLE_OK;
    }
    return sp_bind_linear(m, "lm_head", c->vocab_size, c->hidden_size, false,
                          &m->lm_head, err);
}
