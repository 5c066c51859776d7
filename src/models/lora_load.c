/* spindle_adapter_load: a PEFT or mlx-lm adapter directory, or a
 * llama.cpp LoRA GGUF file, checked against the model's projections and
 * copied to f32 [rank][in] / [out][rank] matrices. */
#include "models/lora.h"
#include "artifacts/gguf.h"
#include "artifacts/gguf_model.h"
#include "artifacts/safetensors.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "compute/ggml/ggml_quants.h"
#include "models/moe.h"
#include "models/registry.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where an adapter tensor goes. */
typedef struct lora_key {
    sp_lora_target t;
    bool is_b;
} lora_key;

static bool skip(const char **s, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(*s, prefix, n)) return false;
    *s += n;
    return true;
}

/* The module named by s up to its next dot (*dot), or -1. */
static int module_at(const char *s, const char **dot) {
    char part[24];  /* "shared_expert_gate" fits */
    *dot = strchr(s, '.');
    size_t len = *dot ? (size_t)(*dot - s) : 0;
    if (!*dot || len >= sizeof part) return -1;
    memcpy(part, s, len);
    part[len] = 0;
    return sp_lora_module_from_name(part);
}

/* Whether module m may be named with group glen long at its place:
 * attention's q..o alone; under mlp the MLP's, router's and shared gate
 * (groups for gate/up/down only); beside the MLP grouped experts only. */
static bool fits_place(int m, size_t glen, bool attn, bool beside) {
    if (attn) return m <= SP_LORA_O && !glen;
    if (beside) return glen && m >= SP_LORA_GATE && m <= SP_LORA_DOWN;
    return m >= SP_LORA_GATE && m < SP_LORA_LINEAR_FIRST &&
           (!glen || m <= SP_LORA_DOWN);
}

bool sp_lora_parse_target(const char **sp, sp_lora_target *t) {
    const char *s = *sp, *dot;
    if (!skip(&s, "model.layers.")) return false;
    char *end;
    long layer = strtol(s, &end, 10);
    if (end == s || *end != '.' || layer < 0 || layer > 1000000) return false;
    s = end + 1;
    t->layer = (int)layer;
    t->expert = SP_LORA_OWN;
    t->group[0] = 0;
    t->beside = false;
    int m;
    if (skip(&s, "linear_attn.")) {
        if ((m = module_at(s, &dot)) < SP_LORA_LINEAR_FIRST) return false;
        t->module = (sp_lora_module)m;
        *sp = dot + 1;
        return true;
    }
    if (skip(&s, "router.proj.")) {   /* Gemma 4's, beside the MLP */
        t->module = SP_LORA_ROUTER;
        t->beside = true;
        snprintf(t->router, sizeof t->router, "router.proj");
        *sp = s;
        return true;
    }
    bool attn = skip(&s, "self_attn.");
    t->beside = !attn && !skip(&s, "mlp.");
    /* The group is every dotted part before the first module name. */
    const char *group = s;
    for (;; s = dot + 1) {
        m = module_at(s, &dot);
        if (!dot) return false;
        if (m < 0) continue;
        size_t glen = s > group ? (size_t)(s - group) - 1 : 0;
        if (!fits_place(m, glen, attn, t->beside) || glen >= sizeof t->group)
            return false;
        memcpy(t->group, group, glen);
        t->group[glen] = 0;
        if (m == SP_LORA_ROUTER) /* "gate" or "router": resolve checks it */
            snprintf(t->router, sizeof t->router, "%.*s", (int)(dot - s), s);
        t->module = (sp_lora_module)m;
        *sp = dot + 1;
        return true;
    }
}

const struct sp_moe *sp_lora_moe(const spindle_model *m, int l) {
    if (l < 0 || l >= m->cfg.n_layers) return NULL;
    return m->layers[l].moe ? m->layers[l].moe : m->layers[l].moe_beside;
}

const sp_linear *sp_lora_base(const spindle_model *m, int l, sp_lora_module mod,
                              int e) {
    if (l < 0 || l >= m->cfg.n_layers) return NULL;
    const sp_layer *L = &m->layers[l];
    const sp_moe *moe = sp_lora_moe(m, l);
    const sp_linear *lin = NULL;
    if (e == SP_LORA_OWN && mod >= SP_LORA_LINEAR_FIRST) {
        lin = m->arch->lora_linear ? m->arch->lora_linear(m, l, mod) : NULL;
    } else if (e == SP_LORA_OWN && mod == SP_LORA_ROUTER) {
        lin = moe ? &moe->router : NULL;
    } else if (e == SP_LORA_OWN && mod == SP_LORA_SHARED_GATE) {
        lin = moe ? &moe->shared_expert_gate : NULL;
    } else if (e == SP_LORA_OWN) {
        const sp_linear *own[SP_LORA_ROUTER] = {&L->q, &L->k, &L->v, &L->o,
                                                &L->gate, &L->up, &L->down};
        lin = own[mod];
    } else if (moe && e == SP_LORA_SHARED && mod >= SP_LORA_GATE &&
               mod <= SP_LORA_DOWN) {
        const sp_linear *shared[3] = {&moe->shared_gate_proj, &moe->shared_up,
                                      &moe->shared_down};
        lin = shared[mod - SP_LORA_GATE];
    } else if (moe && e >= 0 && e < moe->spec.n_experts &&
               (mod == SP_LORA_DOWN ||
                (!moe->fused && mod >= SP_LORA_GATE && mod <= SP_LORA_UP))) {
        const sp_linear *experts[3] = {moe->gate, moe->up, moe->down};
        lin = &experts[mod - SP_LORA_GATE][e];
    }
    return lin && lin->w.rows > 0 ? lin : NULL;
}

/* Group "<per_expert>.E" of spec: E into *e. */
static bool per_expert_group(const sp_moe_spec *sp, const char *group, int *e) {
    size_t n = sp->per_expert ? strlen(sp->per_expert) : 0;
    if (!n || strncmp(group, sp->per_expert, n) || group[n] != '.') return false;
    char *end;
    long v = strtol(group + n + 1, &end, 10);
    if (end == group + n + 1 || *end || v < 0 || v > 1000000) return false;
    *e = (int)v;
    return true;
}

/* The [rows][cols] an expert's pair of module mod adapts when the
 * model's gate and up of that expert are one fused matrix (gpt-oss's
 * Hugging Face gate_up_proj, rows interleaved): each is half of it, and
 * models/moe.c splits the fused product into gate and up outputs before
 * the LoRA terms join them. */
static bool fused_half(const sp_moe *moe, sp_lora_module mod, int e,
                       int64_t *rows, int64_t *cols) {
    if (!moe || !moe->fused || (e < 0 && e != SP_LORA_STACKED) ||
        (mod != SP_LORA_GATE && mod != SP_LORA_UP))
        return false;
    *rows = moe->spec.inter;
    *cols = moe->hidden;
    return true;
}

/* The expert group t->group of moe names (SP_LORA_STACKED,
 * SP_LORA_SHARED or an index) into *e; false with a one-line reason. */
static bool group_expert(const sp_moe *moe, const sp_lora_target *t, int *e,
                         char *why, size_t n) {
    const sp_moe_spec *sp = &moe->spec;
    const char *under = t->beside ? "" : "mlp.";
    const char *stacked = sp->adapter_stacked ? sp->adapter_stacked : sp->stacked;
    if ((sp->stacked && !strcmp(t->group, sp->stacked)) ||
        (stacked && !strcmp(t->group, stacked))) {
        *e = SP_LORA_STACKED;
    } else if (sp->shared && !strcmp(t->group, sp->shared)) {
        *e = SP_LORA_SHARED;
    } else if (!per_expert_group(sp, t->group, e)) {
        snprintf(why, n, "layer %d's routed experts are %s%s%s%s%s%s, not "
                 "%s%s", t->layer, under, stacked ? stacked : "?",
                 sp->per_expert ? " or " : "", sp->per_expert ? under : "",
                 sp->per_expert ? sp->per_expert : "",
                 sp->per_expert ? ".E" : "", under, t->group);
        return false;
    } else if (*e >= sp->n_experts) {
        snprintf(why, n, "layer %d has %d experts, not expert %d", t->layer,
                 sp->n_experts, *e);
        return false;
    }
    return true;
}

bool sp_lora_resolve(const spindle_model *m, sp_lora_target *t, char *why,
                     size_t n) {
    const char *name = sp_lora_module_name(t->module);
    const sp_layer *L = t->layer < m->cfg.n_layers ? &m->layers[t->layer] : NULL;
    /* experts under mlp. are sp_layer.moe, those named at the layer the
     * ones beside its MLP */
    const sp_moe *moe = !L ? NULL : t->beside ? L->moe_beside : L->moe;
    int e = SP_LORA_OWN;
    if ((t->group[0] || t->beside) && !moe) {
        snprintf(why, n, "layer %d has no routed experts%s", t->layer,
                 t->beside ? " beside its MLP" : "");
        return false;
    }
    if (t->group[0] && !group_expert(moe, t, &e, why, n)) return false;
    if (t->module == SP_LORA_ROUTER && moe && strcmp(t->router, moe->spec.router)) {
        const char *under = t->beside ? "" : "mlp.";
        snprintf(why, n, "layer %d's router is %s%s, not %s%s", t->layer,
                 under, moe->spec.router, under, t->router);
        return false;
    }
    t->expert = e;
    const sp_linear *lin = t->module == SP_LORA_ROUTER && !moe ? NULL
        : sp_lora_base(m, t->layer, t->module, e == SP_LORA_STACKED ? 0 : e);
    if (lin) {
        t->rows = lin->w.rows;
        t->cols = lin->w.cols;
        return true;
    }
    if (fused_half(moe, t->module, e, &t->rows, &t->cols)) return true;
    if (e >= 0 || e == SP_LORA_STACKED)
        snprintf(why, n, "layer %d's experts have no %s", t->layer, name);
    else if (e == SP_LORA_SHARED)
        snprintf(why, n, "layer %d's shared expert has no %s", t->layer, name);
    else if (t->module >= SP_LORA_LINEAR_FIRST)
        snprintf(why, n, "layer %d has no linear_attn.%s", t->layer, name);
    else
        snprintf(why, n, "layer %d has no %s%s", t->layer,
                 t->module == SP_LORA_ROUTER ? "router "
                 : t->module == SP_LORA_SHARED_GATE ? "" : "dense ", name);
    return false;
}

/* PEFT: [base_model.model.]model.layers.N.<projection>.lora_{A,B}
 * [.default].weight; mlx-lm: model.layers.N.<projection>.lora_{a,b};
 * GGUF (translated to Hugging Face names by the caller): ...X.weight.
 * lora_{a,b} (<projection> as sp_lora_parse_target reads it). Multimodal
 * checkpoints put the layers under language_model.model.layers (mlx-lm)
 * or model.language_model.layers (transformers). */
static bool parse_key(const char *name, sp_adapter_format fmt, lora_key *k) {
    const char *s = name;
    char text_model[320];
    skip(&s, "base_model.model.");
    skip(&s, "language_model.");
    if (skip(&s, "model.language_model.")) {
        if ((size_t)snprintf(text_model, sizeof text_model, "model.%s", s) >=
            sizeof text_model)
            return false;
        s = text_model;
    }
    if (!sp_lora_parse_target(&s, &k->t)) return false;
    if (fmt == SP_ADAPTER_PEFT) {
        if (!skip(&s, "lora_A.") && !(k->is_b = skip(&s, "lora_B.")))
            return false;
        skip(&s, "default.");
        return !strcmp(s, "weight");
    }
    if (fmt == SP_ADAPTER_GGUF && !skip(&s, "weight.")) return false;
    k->is_b = !strcmp(s, "lora_b");
    return k->is_b || !strcmp(s, "lora_a");
}

/* t's elements as f32, row-major, into dst[n]: GGUF block formats through
 * their dequantizer (a llama.cpp adapter may be q8_0). */
static spindle_status load_elements(const sp_tensor_info *t, const char *what,
                                    size_t n, float *dst, spindle_error *err) {
    if (t->ggml_quant) {
        const sp_ggml_type_traits *tr = sp_ggml_traits(t->ggml_type);
        if (!tr || !tr->to_f32)
            return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                           "%s: tensor %s has ggml type %u, which Spindle "
                           "cannot read", what, t->name, t->ggml_type);
        tr->to_f32(t->data, dst, (int64_t)n);
        return SPINDLE_OK;
    }
    if (t->dtype != SP_DTYPE_F32 && t->dtype != SP_DTYPE_F16 &&
        t->dtype != SP_DTYPE_BF16)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor %s is %s (expected f32, f16 or bf16)", what,
                       t->name, sp_dtype_name(t->dtype));
    for (size_t i = 0; i < n; i++) dst[i] = sp_load_float(t->data, t->dtype, i);
    return SPINDLE_OK;
}

/* The tensor's shape must be [rows][cols] ([cols][rows] when
 * `transposed`: mlx-lm's LoRALinear); copy it to f32 [rows][cols]. */
static spindle_status copy_matrix(const sp_tensor_info *t, const char *what,
                                  bool transposed, int64_t rows, int64_t cols,
                                  sp_weight *out, spindle_error *err) {
    int64_t want0 = transposed ? cols : rows, want1 = transposed ? rows : cols;
    if (t->ndim != 2 || t->shape[0] != want0 || t->shape[1] != want1)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor %s has shape [%lld%s%lld], expected "
                       "[%lld, %lld] (rank or shape mismatch)", what, t->name,
                       (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                       t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                       (long long)want0, (long long)want1);
    size_t n = (size_t)(rows * cols);
    float *dst = malloc(n * sizeof *dst);
    float *src = transposed ? malloc(n * sizeof *src) : dst;
    spindle_status st = dst && src ? load_elements(t, what, n, src, err)
                                   : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st && transposed)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                dst[r * cols + c] = src[c * rows + r];
    if (transposed) free(src);
    if (st) {
        free(dst);
        return st;
    }
    *out = (sp_weight){.type = SP_W_F32, .rows = rows, .cols = cols, .data = dst};
    return SPINDLE_OK;
}

/* GGUF files of the families llama.cpp converts with permuted q/k rows
 * (sp_gguf_family.rope_interleaved) hold row h*hd + 2j + s where Hugging
 * Face has h*hd + s*hd/2 + j. An adapter's B rows follow the order it was
 * written against: a PEFT / mlx-lm one on a GGUF base is permuted to the
 * file's order (to_gguf), a GGUF one on a Hugging Face base back. */
static spindle_status permute_qk_rows(const spindle_model *m, sp_lora_module mod,
                                      bool to_gguf, sp_weight *b,
                                      spindle_error *err) {
    int64_t heads = mod == SP_LORA_Q ? m->cfg.n_heads : m->cfg.n_kv_heads;
    int64_t rows = b->rows, cols = b->cols, hd = heads > 0 ? rows / heads : 0;
    if (heads < 1 || rows % heads || hd % 2) return SPINDLE_OK;
    float *src = (float *)b->data, *dst = malloc((size_t)(rows * cols) * sizeof *dst);
    if (!dst) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int64_t h = 0; h < heads; h++)
        for (int64_t j = 0; j < hd / 2; j++)
            for (int64_t s = 0; s < 2; s++) {
                int64_t g = h * hd + 2 * j + s, hf = h * hd + s * (hd / 2) + j;
                memcpy(dst + (to_gguf ? g : hf) * cols,
                       src + (to_gguf ? hf : g) * cols,
                       (size_t)cols * sizeof *dst);
            }
    free(src);
    b->data = dst;
    return SPINDLE_OK;
}

/* Whether B of module mod needs permute_qk_rows, and in which direction. */
static bool qk_rows_differ(const spindle_model *m, sp_adapter_format fmt,
                           sp_lora_module mod, bool *to_gguf) {
    if (mod != SP_LORA_Q && mod != SP_LORA_K) return false;
    *to_gguf = fmt != SP_ADAPTER_GGUF;
    if (*to_gguf) return m->gguf && m->cfg.rope_traditional;
    return !m->gguf && m->arch->gguf && m->arch->gguf->rope_interleaved;
}

/* Tensor t ([rank][in] or [out][rank], mlx-lm's own projections
 * transposed) as the A or B of expert e's pair (SP_LORA_OWN: the layer's
 * own) over a projection of k->t's resolved [rows][cols]. */
static spindle_status place_pair(spindle_adapter *a, const sp_tensor_info *t,
                                 const lora_key *k, int e, int64_t rank,
                                 const char *shown, const char *what,
                                 spindle_error *err) {
    sp_lora_pair *p = &a->pairs[sp_lora_slot(a, k->t.layer, k->t.module, e)];
    sp_weight *dst = k->is_b ? &p->b : &p->a;
    if (dst->data)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: tensor %s appears twice%s",
                       what, shown, e >= 0 ? " (or its experts are also "
                                             "stacked in one tensor)" : "");
    sp_adapter_format fmt = a->cfg.format;
    /* mlx-lm's LoRALinear (a layer's own projections, the shared expert's:
     * plain nn.Linear) is transposed; its LoRASwitchLinear keeps PEFT's
     * orientation per expert */
    bool transposed = fmt == SP_ADAPTER_MLX &&
                      (e == SP_LORA_OWN || e == SP_LORA_SHARED);
    if (!k->is_b)
        return copy_matrix(t, what, transposed, rank, k->t.cols, dst, err);
    spindle_status st = copy_matrix(t, what, transposed, k->t.rows, rank,
                                    dst, err);
    bool to_gguf;
    if (!st && e == SP_LORA_OWN && qk_rows_differ(a->model, fmt, k->t.module, &to_gguf))
        st = permute_qk_rows(a->model, k->t.module, to_gguf, dst, err);
    return st;
}

/* A stacked tensor [n_experts][rows][cols] (mlx-lm's LoRASwitchLinear,
 * llama.cpp's *_exps) cut into one pair per expert. */
static spindle_status place_stacked(spindle_adapter *a, const sp_tensor_info *t,
                                    const lora_key *k, int64_t rank,
                                    const char *shown, const char *what,
                                    spindle_error *err) {
    const spindle_model *m = a->model;
    const int n = sp_lora_moe(m, k->t.layer)->spec.n_experts;
    if (t->ndim != 3 || t->shape[0] != n || t->nbytes % (size_t)n)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor %s has %d dimensions and %lld experts, "
                       "expected 3 and %d (expert count mismatch)", what, shown,
                       t->ndim, (long long)t->shape[0], n);
    sp_tensor_info slice = *t;
    slice.ndim = 2;
    slice.shape[0] = t->shape[1];
    slice.shape[1] = t->shape[2];
    slice.nbytes = t->nbytes / (size_t)n;
    spindle_status st = SPINDLE_OK;
    for (int e = 0; e < n && !st; e++) {
        slice.data = (const char *)t->data + (size_t)e * slice.nbytes;
        st = place_pair(a, &slice, k, e, rank, shown, what, err);
    }
    return st;
}

/* Tensor t, at place k, into the adapter. `rank` is the config's, or the
 * tensor's own for a GGUF file (which has no config; check_pairs then
 * matches A's and B's). `shown` names the tensor in errors. */
static spindle_status place_tensor(spindle_adapter *a, const sp_tensor_info *t,
                                   lora_key *k, int64_t rank,
                                   const char *shown, const char *what,
                                   spindle_error *err) {
    const spindle_model *m = a->model;
    if (k->t.layer >= m->cfg.n_layers)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor %s targets layer %d; the model has %d", what,
                       shown, k->t.layer, m->cfg.n_layers);
    if (!(a->cfg.targets & (1u << k->t.module)))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor %s targets %s, which the config's target "
                       "modules leave out", what, shown,
                       sp_lora_module_name(k->t.module));
    /* llama.cpp's converter regroups these rows (value heads, the fused
     * qkvz split), so neither side's order can be assumed */
    if (k->t.module >= SP_LORA_LINEAR_FIRST &&
        (m->gguf || a->cfg.format == SP_ADAPTER_GGUF))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor %s: LoRA on the linear attention's %s "
                       "needs a safetensors base and a PEFT or mlx-lm "
                       "adapter, not GGUF", what, shown,
                       sp_lora_module_name(k->t.module));
    char why[192];
    if (!sp_lora_resolve(m, &k->t, why, sizeof why))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "%s: tensor %s: %s", what,
                       shown, why);
    if (rank < 1 || rank > SP_LORA_MAX_RANK)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor %s has rank %lld (1..%d)", what, shown,
                       (long long)rank, SP_LORA_MAX_RANK);
    if (k->t.expert == SP_LORA_STACKED)
        return place_stacked(a, t, k, rank, shown, what, err);
    return place_pair(a, t, k, k->t.expert, rank, shown, what, err);
}

static spindle_status add_tensor(spindle_adapter *a, const sp_tensor_info *t,
                                 const char *what, spindle_error *err) {
    lora_key k = {0};
    if (!parse_key(t->name, a->cfg.format, &k))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor %s is not a %s of a supported projection "
                       "(q/k/v/o/gate/up/down_proj of model.layers.N, an MoE "
                       "layer's router gate, router or router.proj, experts' or "
                       "shared expert's gate/up/down_proj, shared_expert_gate, "
                       "linear_attn.in_proj_*/out_proj)", what,
                       t->name, a->cfg.format == SP_ADAPTER_PEFT
                                    ? "lora_A/lora_B weight" : "lora_a/lora_b");
    return place_tensor(a, t, &k, a->cfg.rank, t->name, what, err);
}

/* "layer 3 q_proj", "layer 3 expert 5 gate_proj": slot i, for errors. */
static const char *slot_name(const spindle_adapter *a, int i, char *buf,
                             size_t n) {
    int l, e;
    sp_lora_module m;
    sp_lora_slot_place(a, i, &l, &m, &e);
    if (e >= 0) snprintf(buf, n, "layer %d expert %d %s", l, e, sp_lora_module_name(m));
    else if (e == SP_LORA_SHARED)
        snprintf(buf, n, "layer %d shared expert %s", l, sp_lora_module_name(m));
    else snprintf(buf, n, "layer %d %s", l, sp_lora_module_name(m));
    return buf;
}

static spindle_status check_pairs(spindle_adapter *a, const char *what,
                                  spindle_error *err) {
    char name[64];
    for (int i = 0; i < a->n_slots; i++) {
        const sp_lora_pair *p = &a->pairs[i];
        if (!p->a.data != !p->b.data)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: %s has lora_%s but no lora_%s", what,
                           slot_name(a, i, name, sizeof name),
                           p->a.data ? "A" : "B", p->a.data ? "B" : "A");
        if (p->a.data && p->a.rows != p->b.cols)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: %s has lora_a of rank %lld and lora_b of rank "
                           "%lld (rank or shape mismatch)", what,
                           slot_name(a, i, name, sizeof name),
                           (long long)p->a.rows, (long long)p->b.cols);
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

/* ------------------------------------------------- llama.cpp's LoRA GGUF
 * convert_lora_to_gguf.py's file: general.type "adapter", adapter.type
 * "lora", adapter.lora.alpha, general.architecture the base's, and per
 * target blk.N.<module>.weight.lora_a (ggml ne [in, r]: row-major [r][in],
 * PEFT's A) and .lora_b ([out][r]), q/k rows in the GGUF base's order.
 * llama.cpp scales each pair by alpha / its rank (alpha 0: 1) and skips
 * *_norm.weight tensors (mergekit's); so does this. */

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* blk.N.<module>.weight.lora_{a,b}: its place, through the Hugging Face
 * name of blk.N.<module>.weight in the family's spelling. */
static bool parse_gguf_key(const char *name, const sp_gguf_family *fam,
                           lora_key *k) {
    const char *suffix = ends_with(name, ".lora_a") ? ".lora_a"
                       : ends_with(name, ".lora_b") ? ".lora_b" : NULL;
    size_t len = strlen(name) - (suffix ? strlen(suffix) : 0);
    char base[256], hf[256];
    if (!suffix || len >= sizeof base) return false;
    memcpy(base, name, len);
    base[len] = 0;
    if (!sp_gguf_translate_name(base, fam, hf, sizeof hf - strlen(suffix)))
        return false;
    strcat(hf, suffix);
    return parse_key(hf, SP_ADAPTER_GGUF, k);
}

static bool gguf_str_is(const sp_gguf *g, const char *key, const char *want) {
    const sp_gguf_value *v = sp_gguf_find(g, key);
    sp_gguf_str s;
    return v && sp_gguf_value_str(v, &s) && s.len == strlen(want) &&
           !memcmp(s.ptr, want, s.len);
}

/* The metadata llama.cpp checks before it reads the tensors; alpha into
 * *alpha (0 when absent). */
static spindle_status gguf_header(const spindle_model *m, const sp_gguf *g,
                                  const sp_gguf_family *fam, double *alpha,
                                  spindle_error *err) {
    const char *path = sp_gguf_path(g);
    if (!gguf_str_is(g, "general.type", "adapter") ||
        !gguf_str_is(g, "adapter.type", "lora"))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: not a LoRA adapter (general.type must be "
                       "\"adapter\" and adapter.type \"lora\")", path);
    if (fam != m->arch->gguf)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: an adapter for architecture '%s'; the model is "
                       "'%s'", path, fam->arch,
                       m->arch->gguf ? m->arch->gguf->arch : m->arch->model_type);
    if (sp_gguf_find(g, "adapter.alora.invocation_tokens"))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: activated LoRA (adapter.alora.invocation_tokens) "
                       "is not supported", path);
    const sp_gguf_value *v = sp_gguf_find(g, "adapter.lora.alpha");
    *alpha = 0;
    if (v && (!sp_gguf_value_number(v, alpha) || !isfinite(*alpha)))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: adapter.lora.alpha is not a finite number", path);
    return SPINDLE_OK;
}

/* One scale for the adapter, alpha / the first pair's rank; the B of a
 * pair of another rank r absorbs rank / r, so that each pair gets
 * llama.cpp's alpha / r. */
static void gguf_scale(spindle_adapter *a, double alpha) {
    int64_t rank = 0;
    for (int i = 0; i < a->n_slots; i++) {
        sp_lora_pair *p = &a->pairs[i];
        if (!p->a.data) continue;
        if (!rank) rank = p->a.rows;
        if (p->a.rows == rank || alpha == 0) continue;
        float f = (float)rank / (float)p->a.rows, *b = (float *)p->b.data;
        for (int64_t j = 0; j < p->b.rows * p->b.cols; j++) b[j] *= f;
    }
    a->cfg.rank = (int)rank;
    a->cfg.scale = alpha != 0 ? alpha / (double)rank : 1.0;
}

static spindle_status load_gguf(spindle_adapter *a, const char *path,
                                spindle_error *err) {
    sp_gguf *g = NULL;
    const sp_gguf_family *fam = NULL;
    char arch[64];
    double alpha = 0;
    a->cfg = (sp_adapter_config){.format = SP_ADAPTER_GGUF,
                                 .targets = SP_LORA_ALL_MODULES};
    spindle_status st = sp_gguf_open(path, &g, err);
    if (!st)
        st = sp_gguf_family_of(g, sp_gguf_families(), arch, sizeof arch, &fam, err);
    if (!st) st = gguf_header(a->model, g, fam, &alpha, err);
    size_t n = st ? 0 : sp_gguf_tensor_count(g);
    for (size_t i = 0; i < n && !st; i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        if (ends_with(t->name, "_norm.weight")) continue;
        lora_key k = {0};
        if (!parse_gguf_key(t->name, fam, &k)) {
            st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                         "%s: tensor %s is not a lora_a/lora_b of a supported "
                         "projection (attn_q/k/v/output, ffn_gate/up/down, "
                         "ffn_gate_inp, ffn_gate/up/down_exps, "
                         "ffn_gate/up/down_shexp, ffn_gate_inp_shexp of blk.N)",
                         path,
                         t->name);
            break;
        }
        sp_tensor_info info;
        st = sp_gguf_tensor_info(g, t, &info, err);
        /* A [..][r][in], B [..][out][r]; stacked over experts when 3-D */
        int64_t rank = info.ndim != 2 && info.ndim != 3 ? 1
                     : info.shape[info.ndim - (k.is_b ? 1 : 2)];
        if (!st) st = place_tensor(a, &info, &k, rank, t->name, path, err);
    }
    if (!st) st = check_pairs(a, path, err);
    if (!st) gguf_scale(a, alpha);
    sp_gguf_close(g);
    return st;
}

spindle_status spindle_adapter_load(spindle_model *m, const char *path,
                                    spindle_adapter **out, spindle_error *err) {
    sp_error_clear(err);
    if (!m || !path || !out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    bool dir = sp_dir_exists(path);
    if (!dir && !sp_file_exists(path))
        return sp_fail(err, SPINDLE_ERR_IO,
                       "%s: no such adapter directory or GGUF file", path);
    spindle_adapter *a = sp_adapter_new(m);
    if (!a) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    static atomic_uint next_serial = 1;
    a->serial = atomic_fetch_add(&next_serial, 1);
    spindle_status st = SPINDLE_OK;
    if (dir) st = read_config(path, &a->cfg, err);
    if (!st) st = dir ? load_tensors(a, path, err) : load_gguf(a, path, err);
    if (st) {
        sp_adapter_release(a);
        return st;
    }
    a->scale = (float)a->cfg.scale;
    sp_adapter_finish(a);
    *out = a;
    return SPINDLE_OK;
}
