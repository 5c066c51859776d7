/* spindle_adapter_load: a PEFT or mlx-lm adapter directory checked against
 * the model's projections and copied to f32 [rank][in] / [out][rank]
 * matrices. */
#include "models/lora.h"
#include "artifacts/safetensors.h"
#include "base/error.h"
#include "base/mapped_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where an adapter tensor goes. */
typedef struct lora_key {
    int layer;
    sp_lora_module module;
    bool is_b;
} lora_key;

static bool skip(const char **s, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(*s, prefix, n)) return false;
    *s += n;
    return true;
}

/* PEFT: [base_model.model.]model.layers.N.{self_attn,mlp}.X.lora_{A,B}
 * [.default].weight; mlx-lm: model.layers.N.{self_attn,mlp}.X.lora_{a,b};
 * either under language_model. (multimodal checkpoints). */
static bool parse_key(const char *name, sp_adapter_format fmt, lora_key *k) {
    const char *s = name;
    skip(&s, "base_model.model.");
    skip(&s, "language_model.");
    if (!skip(&s, "model.layers.")) return false;
    char *end;
    long layer = strtol(s, &end, 10);
    if (end == s || *end != '.' || layer < 0 || layer > 1000000) return false;
    s = end + 1;
    bool attn = skip(&s, "self_attn.");
    if (!attn && !skip(&s, "mlp.")) return false;
    const char *dot = strchr(s, '.');
    if (!dot || dot - s >= 16) return false;
    char module[16];
    memcpy(module, s, (size_t)(dot - s));
    module[dot - s] = 0;
    int m = sp_lora_module_from_name(module);
    if (m < 0 || attn != (m <= SP_LORA_O)) return false;
    s = dot + 1;
    if (fmt == SP_ADAPTER_PEFT) {
        if (!skip(&s, "lora_A.") && !(k->is_b = skip(&s, "lora_B.")))
            return false;
        skip(&s, "default.");
        if (strcmp(s, "weight")) return false;
    } else {
        k->is_b = !strcmp(s, "lora_b");
        if (!k->is_b && strcmp(s, "lora_a")) return false;
    }
    k->layer = (int)layer;
    k->module = (sp_lora_module)m;
    return true;
}

static const sp_linear *target(const spindle_model *m, const lora_key *k) {
    const sp_layer *L = &m->layers[k->layer];
    const sp_linear *all[SP_LORA_N_MODULES] = {&L->q, &L->k, &L->v, &L->o,
                                               &L->gate, &L->up, &L->down};
    const sp_linear *lin = all[k->module];
    return lin->w.rows > 0 ? lin : NULL;
}

/* The tensor's shape must be [rank][in] (A) / [out][rank] (B) for PEFT,
 * transposed for mlx-lm; copy it to f32 in the first layout. */
static spindle_status copy_matrix(const sp_tensor_info *t, const char *what,
                                  sp_adapter_format fmt, int64_t rows,
                                  int64_t cols, sp_weight *out,
                                  spindle_error *err) {
    bool transposed = fmt == SP_ADAPTER_MLX;
    int64_t want0 = transposed ? cols : rows, want1 = transposed ? rows : cols;
    if (t->ndim != 2 || t->shape[0] != want0 || t->shape[1] != want1)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor %s has shape [%lld%s%lld], expected "
                       "[%lld, %lld] (rank or shape mismatch)", what, t->name,
                       (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                       t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                       (long long)want0, (long long)want1);
    if (t->ggml_quant || (t->dtype != SP_DTYPE_F32 && t->dtype != SP_DTYPE_F16 &&
                          t->dtype != SP_DTYPE_BF16))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor %s is %s (expected f32, f16 or bf16)", what,
                       t->name, sp_dtype_name(t->dtype));
    float *dst = malloc((size_t)(rows * cols) * sizeof *dst);
    if (!dst) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * cols + c] = sp_load_float(
                t->data, t->dtype, (size_t)(transposed ? c * rows + r : r * cols + c));
    *out = (sp_weight){.type = SP_W_F32, .rows = rows, .cols = cols, .data = dst};
    return SPINDLE_OK;
}

/* GGUF files of the families llama.cpp converts with permuted q/k rows
 * (rope_traditional in their config) hold row h*hd + 2j + s where Hugging
 * Face has h*hd + s*hd/2 + j; an adapter's B rows, written against Hugging
 * Face's order, follow them. */
static spindle_status permute_like_gguf(const spindle_model *m, sp_lora_module mod,
                                        sp_weight *b, spindle_error *err) {
    if (!m->gguf || !m->cfg.rope_traditional || (mod != SP_LORA_Q && mod != SP_LORA_K))
        return SPINDLE_OK;
    int64_t heads = mod == SP_LORA_Q ? m->cfg.n_heads : m->cfg.n_kv_heads;
    int64_t rows = b->rows, cols = b->cols, hd = rows / heads;
    if (heads < 1 || rows % heads || hd % 2) return SPINDLE_OK;
    float *src = (float *)b->data, *dst = malloc((size_t)(rows * cols) * sizeof *dst);
    if (!dst) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int64_t h = 0; h < heads; h++)
        for (int64_t j = 0; j < hd / 2; j++)
            for (int64_t s = 0; s < 2; s++)
                memcpy(dst + (h * hd + 2 * j + s) * cols,
                       src + (h * hd + s * (hd / 2) + j) * cols,
                       (size_t)cols * sizeof *dst);
    free(src);
    b->data = dst;
    return SPINDLE_OK;
}

static spindle_status add_tensor(spindle_adapter *a, const sp_tensor_info *t,
                                 const char *what, spindle_error *err) {
    const spindle_model *m = a->model;
    lora_key k = {0};
    if (!parse_key(t->name, a->cfg.format, &k))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor %s is not a %s of a supported projection "
                       "(q/k/v/o/gate/up/down_proj of model.layers.N)", what,
                       t->name, a->cfg.format == SP_ADAPTER_PEFT
                                    ? "lora_A/lora_B weight" : "lora_a/lora_b");
    if (k.layer >= m->cfg.n_layers)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor %s targets layer %d; the model has %d", what,
                       t->name, k.layer, m->cfg.n_layers);
    if (!(a->cfg.targets & (1u << k.module)))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor %s targets %s, which the config's target "
                       "modules leave out", what, t->name,
                       sp_lora_module_name(k.module));
    const sp_linear *lin = target(m, &k);
    if (!lin)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor %s: layer %d has no dense %s (expert "
                       "projections are not adapted)", what, t->name, k.layer,
                       sp_lora_module_name(k.module));
    sp_lora_pair *p = &a->pairs[k.layer * SP_LORA_N_MODULES + k.module];
    sp_weight *dst = k.is_b ? &p->b : &p->a;
    if (dst->data)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: tensor %s appears twice",
                       what, t->name);
    int64_t rank = a->cfg.rank;
    if (!k.is_b) return copy_matrix(t, what, a->cfg.format, rank, lin->w.cols, dst, err);
    spindle_status st = copy_matrix(t, what, a->cfg.format, lin->w.rows, rank, dst, err);
    return st ? st : permute_like_gguf(m, k.module, dst, err);
}

static spindle_status check_pairs(spindle_adapter *a, const char *what,
                                  spindle_error *err) {
    int n = a->model->cfg.n_layers * SP_LORA_N_MODULES;
    for (int i = 0; i < n; i++) {
        const sp_lora_pair *p = &a->pairs[i];
        if (!p->a.data != !p->b.data)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: layer %d %s has lora_%s but no lora_%s", what,
                           i / SP_LORA_N_MODULES,
                           sp_lora_module_name((sp_lora_module)(i % SP_LORA_N_MODULES)),
                           p->a.data ? "A" : "B", p->a.data ? "B" : "A");
        a->n_pairs += p->a.data != NULL;
    }
    if (!a->n_pairs)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: no LoRA tensors", what);
    return SPINDLE_OK;
}

static spindle_status read_config(const char *dir, sp_adapter_config *cfg,
                                  spindle_error *err) {
    char *path = sp_path_join(dir, "adapter_config.json");
    if (!path) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    char *text = NULL;
    size_t len = 0;
    spindle_status st = sp_file_exists(path)
        ? sp_read_text_file(path, &text, &len, err)
        : sp_fail(err, SPINDLE_ERR_IO, "%s: no adapter_config.json", dir);
    if (!st) st = sp_adapter_config_parse(text, len, path, cfg, err);
    free(text);
    free(path);
    return st;
}

static spindle_status load_tensors(spindle_adapter *a, const char *dir,
                                   spindle_error *err) {
    const char *file = a->cfg.format == SP_ADAPTER_PEFT
                           ? "adapter_model.safetensors" : "adapters.safetensors";
    char *path = sp_path_join(dir, file);
    if (!path) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    sp_tensor_set *set = NULL;
    spindle_status st = sp_file_exists(path)
        ? sp_safetensors_open_file(path, &set, err)
        : sp_fail(err, SPINDLE_ERR_IO, "%s: no %s", dir, file);
    size_t n = st ? 0 : sp_tensor_set_count(set);
    for (size_t i = 0; i < n && !st; i++)
        st = add_tensor(a, sp_tensor_set_at(set, i), path, err);
    if (!st) st = check_pairs(a, path, err);
    sp_tensor_set_free(set);
    free(path);
    return st;
}

spindle_status spindle_adapter_load(spindle_model *m, const char *path,
                                    spindle_adapter **out, spindle_error *err) {
    sp_error_clear(err);
    if (!m || !path || !out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    if (!sp_dir_exists(path))
        return sp_fail(err, SPINDLE_ERR_IO, "%s: no such adapter directory",
                       path);
    spindle_adapter *a = calloc(1, sizeof *a);
    if (!a) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    a->model = m;
    atomic_init(&a->refs, 1);
    static atomic_uint next_serial = 1;
    a->serial = atomic_fetch_add(&next_serial, 1);
    a->pairs = calloc((size_t)m->cfg.n_layers * SP_LORA_N_MODULES,
                      sizeof *a->pairs);
    spindle_status st = a->pairs ? read_config(path, &a->cfg, err)
                                 : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = load_tensors(a, path, err);
    if (st) {
        sp_adapter_release(a);
        return st;
    }
    a->scale = (float)a->cfg.scale;
    *out = a;
    return SPINDLE_OK;
}
