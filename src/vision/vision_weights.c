/* The encoders' float tensors by file name (vision_weights.h). */
#include "vision/vision_weights.h"
#include "artifacts/safetensors.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sp_tensor_info *find(const sp_vision_weights *vw,
                                  const char *name) {
    char full[320];
    if ((size_t)snprintf(full, sizeof full, "%s%s", vw->prefix, name) >=
        sizeof full)
        return NULL;
    return sp_tensor_set_find(vw->m->tensors, full);
}

spindle_status sp_vision_weights_init(sp_vision_weights *vw, spindle_model *m,
                                      const char *probe, spindle_error *err) {
    memset(vw, 0, sizeof *vw);
    vw->m = m;
    if (!m->tensors)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: images need the model's safetensors directory "
                       "(a GGUF's mmproj is not supported yet)", m->dir);
    static const char *const prefixes[] = {"", "model."};
    for (size_t i = 0; i < 2; i++) {
        snprintf(vw->prefix, sizeof vw->prefix, "%s", prefixes[i]);
        if (find(vw, probe)) return SPINDLE_OK;
    }
    return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                   "%s: the model has no vision tower (no tensor '%s')",
                   m->dir, probe);
}

void sp_vision_weights_free(sp_vision_weights *vw) {
    for (int i = 0; i < vw->n_owned; i++) free(vw->owned[i]);
    free(vw->owned);
    vw->owned = NULL;
    vw->n_owned = vw->cap_owned = 0;
}

static bool is_float(sp_dtype t) {
    return t == SP_DTYPE_F32 || t == SP_DTYPE_F16 || t == SP_DTYPE_BF16;
}

spindle_status sp_vision_tensor(sp_vision_weights *vw, const char *name, int nd,
                                const int64_t *dims,
                                const sp_tensor_info **out, spindle_error *err) {
    const sp_tensor_info *t = find(vw, name);
    if (!t)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: missing tensor '%s%s'",
                       vw->m->dir, vw->prefix, name);
    bool ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == dims[i];
    if (!ok)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s' does not have the shape the config "
                       "implies", t->file, t->name);
    if (!is_float(t->dtype))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has dtype %s; encoders need float "
                       "weights", t->file, t->name, sp_dtype_name(t->dtype));
    *out = t;
    return SPINDLE_OK;
}

sp_weight sp_vision_view(const sp_tensor_info *t, int64_t rows, int64_t cols) {
    sp_weight w = {.rows = rows, .cols = cols, .data = t->data};
    w.type = t->dtype == SP_DTYPE_F32   ? SP_W_F32
             : t->dtype == SP_DTYPE_F16 ? SP_W_F16
                                        : SP_W_BF16;
    return w;
}

spindle_status sp_vision_floats(sp_vision_weights *vw, const char *name,
                                int64_t n, const float **out,
                                spindle_error *err) {
    const sp_tensor_info *t = find(vw, name);
    if (!t)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: missing tensor '%s%s'",
                       vw->m->dir, vw->prefix, name);
    if (!is_float(t->dtype) || t->nbytes != (size_t)n * sp_dtype_size(t->dtype))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s' is not %lld floats", t->file, t->name,
                       (long long)n);
    if (vw->n_owned == vw->cap_owned) {
        int cap = vw->cap_owned ? 2 * vw->cap_owned : 32;
        float **o = realloc(vw->owned, (size_t)cap * sizeof *o);
        if (!o) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        vw->owned = o;
        vw->cap_owned = cap;
    }
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++) v[i] = sp_load_float(t->data, t->dtype, (size_t)i);
    vw->owned[vw->n_owned++] = v;
    *out = v;
    return SPINDLE_OK;
}

spindle_status sp_vision_linear(sp_vision_weights *vw, const char *prefix,
                                int64_t rows, int64_t cols, bool need_bias,
                                sp_linear *out, spindle_error *err) {
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const int64_t dims[2] = {rows, cols};
    const sp_tensor_info *t = NULL;
    spindle_status st = sp_vision_tensor(vw, name, 2, dims, &t, err);
    if (st) return st;
    out->w = sp_vision_view(t, rows, cols);
    out->bias = NULL;
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (!need_bias && !find(vw, name)) return SPINDLE_OK;
    return sp_vision_floats(vw, name, rows, &out->bias, err);
}
