/* GGUF -> Hugging Face directory: the tensor pass and the driver (see
 * convert.h).
 *
 * Every tensor is handled row by row (a GGUF row is a whole number of
 * blocks), so Q/K un-permutation moves quantized rows as they are and no
 * tensor is ever materialized in full. A quantized module is written as
 * three tensors (.weight, .scales, .biases), one pass over the rows each.
 *
 * Names: llama.cpp's tensor names (gguf-py TENSOR_NAMES) map to the
 * Hugging Face names by sp_gguf_translate_name, the loader's mapping. */
#include "convert/convert.h"
#include "convert/convert_internal.h"
#include "artifacts/gguf_model.h"
#include "artifacts/safetensors_write.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "compute/ggml/ggml_quants.h"
#include "models/registry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GROUP 32 /* ggml block size of Q4_1 and Q8_0 = MLX group size */

typedef enum conv_kind { K_COPY, K_FLOAT, K_Q4_1, K_Q8_0 } conv_kind;

typedef struct conv_tensor {
    const sp_gguf_tensor *t;
    char name[200];      /* Hugging Face name */
    conv_kind kind;
    sp_dtype out;        /* K_COPY/K_FLOAT: output type; quant: scales type */
    int perm_heads;      /* > 0: un-permute rows in this many heads */
    bool sub_one;        /* Gemma 3 norm: remove llama.cpp's +1 */
    int64_t rows, cols;  /* the tensor as a [rows, cols] matrix */
    size_t src_row;      /* bytes of a source row */
} conv_tensor;

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

bool sp_conv_arch_int(const sp_gguf *g, const char *arch, const char *key,
                      int64_t *out) {
    const sp_gguf_value *v = sp_gguf_arch_value(g, arch, key);
    return v && sp_gguf_value_i64(v, out);
}

/* ------------------------------------------------------------------ plan */

/* Scales/biases type of a Q8_0 tensor: f16 when -128*d is exact in f16 for
 * every block (it is unless it overflows), else f32. */
static sp_dtype q8_param_type(const conv_tensor *c) {
    const sp_block_q8_0 *b = c->t->data;
    int64_t n = c->rows * (c->cols / GROUP);
    for (int64_t i = 0; i < n; i++) {
        uint16_t d;
        memcpy(&d, &b[i].d, 2);
        float bias = -128.0f * sp_f16_to_f32(d);
        if (sp_f16_to_f32(sp_f32_to_f16(bias)) != bias) return SP_DTYPE_F32;
    }
    return SP_DTYPE_F16;
}

static spindle_status plan_tensor(const sp_gguf *g,
                                  const sp_gguf_family *family,
                                  const sp_gguf_tensor *t, sp_dtype dtype,
                                  conv_tensor *c, spindle_error *err) {
    const char *arch = family->arch;
    const char *path = sp_gguf_path(g);
    memset(c, 0, sizeof *c);
    c->t = t;
    /* Only weights and biases: a converted checkpoint has no other kind. */
    const char *dot = strrchr(t->name, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")) ||
        !sp_gguf_translate_name(t->name, family, c->name, sizeof c->name))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has no Hugging Face counterpart",
                       path, t->name);
    const sp_ggml_type_traits *tr = sp_ggml_traits(t->type);
    if (!tr || !tr->to_f32)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has unsupported ggml type %u", path,
                       t->name, t->type);
    c->cols = t->ne[0];
    c->rows = 1;
    for (int d = 1; d < t->n_dims; d++) c->rows *= t->ne[d];
    c->src_row = sp_ggml_row_size(t->type, c->cols);
    if (!c->src_row || (size_t)c->rows * c->src_row != t->nbytes)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: tensor '%s' has an "
                       "inconsistent size", path, t->name);
    bool matrix = t->n_dims == 2 && ends_with(c->name, ".weight");
    c->sub_one = family->norm_plus_one && ends_with(c->name, "norm.weight");
    if (t->type == SP_GGML_Q4_1 && matrix) {
        c->kind = K_Q4_1;
        c->out = SP_DTYPE_F16;
    } else if (t->type == SP_GGML_Q8_0 && matrix) {
        c->kind = K_Q8_0;
        c->out = q8_param_type(c);
    } else if (c->sub_one) {
        c->kind = K_FLOAT;
        c->out = SP_DTYPE_F32;
    } else if (t->type == SP_GGML_F32 || t->type == SP_GGML_F16 ||
               t->type == SP_GGML_BF16) {
        c->kind = K_COPY;
        c->out = t->type == SP_GGML_F32 ? SP_DTYPE_F32
               : t->type == SP_GGML_F16 ? SP_DTYPE_F16 : SP_DTYPE_BF16;
    } else {
        c->kind = K_FLOAT;
        c->out = dtype;
    }
    /* llama.cpp's LlamaModel.permute interleaved the two rotary halves of
     * every head's q/k rows; undo it for rotate-half checkpoints. */
    if (family->rope_interleaved) {
        int64_t heads = 0;
        bool q = strstr(c->name, ".self_attn.q_proj.") != NULL;
        bool k = strstr(c->name, ".self_attn.k_proj.") != NULL;
        if ((q || k) &&
            !((k && sp_conv_arch_int(g, arch, "attention.head_count_kv", &heads)) ||
              sp_conv_arch_int(g, arch, "attention.head_count", &heads)))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: attention.head_count missing", path);
        int64_t out_rows = t->n_dims == 1 ? c->cols : c->rows;
        if ((q || k) && (heads < 1 || out_rows % (2 * heads)))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: '%s' rows do not split into %lld heads", path,
                           t->name, (long long)heads);
        if (q || k) c->perm_heads = (int)heads;
    }
    return SPINDLE_OK;
}

/* Source index of output row r (or element, for 1-D biases). */
static int64_t src_index(const conv_tensor *c, int64_t r, int64_t n) {
    if (!c->perm_heads) return r;
    int64_t hd = n / c->perm_heads, half = hd / 2;
    int64_t h = r / hd, rem = r % hd;
    return h * hd + 2 * (rem % half) + rem / half;
}

/* ----------------------------------------------------------------- write */

typedef struct out_spec {
    char name[220];
    sp_dtype dtype;
    int ndim;
    int64_t shape[SP_GGUF_MAX_DIMS];
} out_spec;

/* The output tensors of c (1, or 3 for a quantized module). */
static int out_specs(const conv_tensor *c, out_spec o[3]) {
    if (c->kind == K_COPY || c->kind == K_FLOAT) {
        snprintf(o[0].name, sizeof o[0].name, "%s", c->name);
        o[0].dtype = c->out;
        o[0].ndim = c->t->n_dims;
        for (int d = 0; d < c->t->n_dims; d++)
            o[0].shape[d] = c->t->ne[c->t->n_dims - 1 - d];
        return 1;
    }
    int bits = c->kind == K_Q4_1 ? 4 : 8;
    size_t stem = strlen(c->name) - strlen(".weight");
    static const char *const suffix[3] = {"weight", "scales", "biases"};
    for (int i = 0; i < 3; i++) {
        snprintf(o[i].name, sizeof o[i].name, "%.*s.%s", (int)stem, c->name,
                 suffix[i]);
        o[i].ndim = 2;
        o[i].shape[0] = c->rows;
        o[i].shape[1] = i == 0 ? c->cols * bits / 32 : c->cols / GROUP;
        o[i].dtype = i == 0 ? SP_DTYPE_U32 : c->out;
    }
    return 3;
}

static void put_param(uint8_t *dst, size_t i, sp_dtype t, float f16_value,
                      uint16_t f16_bits) {
    if (t == SP_DTYPE_F16) memcpy(dst + 2 * i, &f16_bits, 2);
    else memcpy(dst + 4 * i, &f16_value, 4);
}

/* Component `part` (0 weight, 1 scales, 2 biases) of one output row from
 * source row `src` into buf; returns its byte count. */
static size_t emit_row(const conv_tensor *c, const uint8_t *src, int part,
                       uint8_t *buf, float *tmp) {
    int64_t nb = c->cols / GROUP;
    switch (c->kind) {
    case K_COPY:
        memcpy(buf, src, c->src_row);
        return c->src_row;
    case K_FLOAT:
        sp_ggml_traits(c->t->type)->to_f32(src, tmp, c->cols);
        for (int64_t i = 0; i < c->cols; i++) {
            float v = c->sub_one ? tmp[i] - 1.0f : tmp[i];
            if (c->out == SP_DTYPE_F32) {
                memcpy(buf + 4 * i, &v, 4);
            } else {
                uint16_t h = sp_f32_to_bf16(v);
                memcpy(buf + 2 * i, &h, 2);
            }
        }
        return (size_t)c->cols * sp_dtype_size(c->out);
    case K_Q4_1:
        for (int64_t b = 0; b < nb; b++) {
            sp_block_q4_1 blk;
            memcpy(&blk, src + b * sizeof blk, sizeof blk);
            if (part == 0) {
                /* ggml: element j in the low nibble of qs[j], j+16 in the
                 * high one; MLX: code k at bits 4k of the little-endian
                 * stream, i.e. elements 2k and 2k+1 share byte k. */
                uint8_t *o = buf + b * 16;
                for (int k = 0; k < 16; k++) {
                    int e0 = 2 * k, e1 = 2 * k + 1;
                    uint8_t q0 = e0 < 16 ? blk.qs[e0] & 15 : blk.qs[e0 - 16] >> 4;
                    uint8_t q1 = e1 < 16 ? blk.qs[e1] & 15 : blk.qs[e1 - 16] >> 4;
                    o[k] = (uint8_t)(q0 | q1 << 4);
                }
            } else {
                uint16_t h = part == 1 ? blk.d : blk.m;
                put_param(buf, (size_t)b, c->out, sp_f16_to_f32(h), h);
            }
        }
        return part == 0 ? (size_t)nb * 16 : (size_t)nb * sp_dtype_size(c->out);
    case K_Q8_0:
        for (int64_t b = 0; b < nb; b++) {
            sp_block_q8_0 blk;
            memcpy(&blk, src + b * sizeof blk, sizeof blk);
            if (part == 0) {
                /* w = d*q = d*(q+128) + (-128 d), with q+128 as an 8-bit code. */
                for (int k = 0; k < GROUP; k++)
                    buf[b * GROUP + k] = (uint8_t)((uint8_t)blk.qs[k] ^ 0x80u);
            } else {
                float d = sp_f16_to_f32(blk.d);
                float v = part == 1 ? d : -128.0f * d;
                put_param(buf, (size_t)b, c->out, v,
                          part == 1 ? blk.d : sp_f32_to_f16(v));
            }
        }
        return part == 0 ? (size_t)nb * GROUP : (size_t)nb * sp_dtype_size(c->out);
    }
    return 0;
}

static spindle_status write_tensor(sp_st_writer *w, const conv_tensor *c,
                                   uint8_t *buf, float *tmp,
                                   spindle_error *err) {
    int parts = c->kind == K_Q4_1 || c->kind == K_Q8_0 ? 3 : 1;
    const uint8_t *data = c->t->data;
    /* A permuted 1-D tensor (a bias) is permuted element-wise. */
    if (c->perm_heads && c->t->n_dims == 1) {
        size_t es = c->src_row / (size_t)c->cols;
        for (int64_t i = 0; i < c->cols; i++) {
            spindle_status st = sp_st_writer_write(
                w, data + es * (size_t)src_index(c, i, c->cols), es, err);
            if (st) return st;
        }
        return SPINDLE_OK;
    }
    for (int part = 0; part < parts; part++)
        for (int64_t r = 0; r < c->rows; r++) {
            const uint8_t *src = data + c->src_row * (size_t)src_index(c, r, c->rows);
            size_t n = emit_row(c, src, part, buf, tmp);
            spindle_status st = sp_st_writer_write(w, buf, n, err);
            if (st) return st;
        }
    return SPINDLE_OK;
}

/* --------------------------------------------------------------- driver */

static spindle_status make_dir(const char *dir, spindle_error *err) {
    char *p = strdup(dir);
    if (!p) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c == '/' || c == '\0') {
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                spindle_status st = sp_fail(err, SPINDLE_ERR_IO,
                                            "%s: cannot create directory: %s",
                                            p, strerror(errno));
                free(p);
                return st;
            }
            *s = c;
        }
        if (c == '\0') break;
    }
    free(p);
    return sp_dir_exists(dir) ? SPINDLE_OK
                              : sp_fail(err, SPINDLE_ERR_IO,
                                        "%s: not a directory", dir);
}

static spindle_status write_weights(const conv_tensor *cs,
                                    size_t n, const char *dir,
                                    spindle_error *err) {
    char *path = sp_path_join(dir, "model.safetensors");
    sp_st_writer *w = NULL;
    int64_t max_cols = 1;
    for (size_t i = 0; i < n; i++)
        if (cs[i].cols > max_cols) max_cols = cs[i].cols;
    uint8_t *buf = malloc((size_t)max_cols * 4 + 64);
    float *tmp = malloc((size_t)max_cols * sizeof *tmp);
    spindle_status st = path && buf && tmp
                            ? sp_st_writer_new(path, &w, err)
                            : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = sp_st_writer_meta(w, "format", "mlx", err);
    for (size_t i = 0; i < n && !st; i++) {
        out_spec o[3];
        int k = out_specs(&cs[i], o);
        for (int j = 0; j < k && !st; j++)
            st = sp_st_writer_add(w, o[j].name, o[j].dtype, o[j].ndim,
                                  o[j].shape, err);
    }
    if (!st) st = sp_st_writer_begin(w, err);
    for (size_t i = 0; i < n && !st; i++)
        st = write_tensor(w, &cs[i], buf, tmp, err);
    if (!st) {
        st = sp_st_writer_finish(w, err);
        w = NULL;
    }
    sp_st_writer_abort(w);
    free(buf);
    free(tmp);
    free(path);
    return st;
}

/* {"module": bits} of the quantized modules, for config.json. */
static cJSON *quant_modules(const conv_tensor *cs, size_t n) {
    cJSON *q = cJSON_CreateObject();
    for (size_t i = 0; q && i < n; i++) {
        if (cs[i].kind != K_Q4_1 && cs[i].kind != K_Q8_0) continue;
        char mod[200];
        snprintf(mod, sizeof mod, "%.*s",
                 (int)(strlen(cs[i].name) - strlen(".weight")), cs[i].name);
        if (!cJSON_AddNumberToObject(q, mod, cs[i].kind == K_Q4_1 ? 4 : 8)) {
            cJSON_Delete(q);
            return NULL;
        }
    }
    return q;
}

spindle_status sp_convert_gguf(const char *gguf_path, const char *out_dir,
                               const sp_convert_options *opt,
                               spindle_error *err) {
    sp_dtype dtype = opt ? opt->dtype : SP_DTYPE_BF16;
    if (dtype != SP_DTYPE_BF16 && dtype != SP_DTYPE_F32)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "convert: the output dtype must be bf16 or f32");
    sp_gguf *g = NULL;
    spindle_status st = sp_gguf_open(gguf_path, &g, err);
    if (st) return st;
    char arch[64] = "";
    const sp_gguf_family *family = NULL;
    /* The families' GGUF tables decide which architectures convert: a file
     * of another one is refused. */
    st = sp_gguf_family_of(g, sp_gguf_families(), arch, sizeof arch, &family, err);
    if (!st && !family->hf_class)
        st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                     "%s: converting a GGUF '%s' is not supported", gguf_path,
                     arch);
    size_t n = st ? 0 : sp_gguf_tensor_count(g);
    conv_tensor *cs = calloc(n ? n : 1, sizeof *cs);
    if (!st && !cs) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (size_t i = 0; i < n && !st; i++)
        st = plan_tensor(g, family, sp_gguf_tensor_at(g, i), dtype, &cs[i], err);
    const sp_gguf_tensor *emb = st ? NULL : sp_gguf_find_tensor(g, "token_embd.weight");
    if (!st && (!emb || emb->n_dims != 2))
        st = sp_fail(err, SPINDLE_ERR_FORMAT,
                     "%s: missing 2-D tensor 'token_embd.weight'", gguf_path);
    sp_conv_summary sum = {.arch = arch, .family = family, .dtype = dtype};
    cJSON *config = NULL;
    if (!st) {
        sum.vocab_size = emb->ne[1];
        sum.has_output = sp_gguf_find_tensor(g, "output.weight") != NULL;
        sum.attention_bias = sp_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
        sum.quant_modules = quant_modules(cs, n);
        if (!sum.quant_modules) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    /* Config and tokenizer first: they fail fast on unsupported metadata
     * before the long weight pass. */
    if (!st) st = sp_conv_config(g, &sum, &config, err);
    if (!st) st = make_dir(out_dir, err);
    if (!st) st = sp_conv_tokenizer(g, out_dir, err);
    if (!st) st = write_weights(cs, n, out_dir, err);
    /* config.json last: a directory without it is not mistaken for a model. */
    if (!st) st = sp_conv_write_json(config, out_dir, "config.json", err);
    cJSON_Delete(config);
    cJSON_Delete(sum.quant_modules);
    free(cs);
    sp_gguf_close(g);
    return st;
}
