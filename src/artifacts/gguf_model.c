/* GGUF files as models: locating the file, the tensor index under Hugging
 * Face names, and the metadata translated to config.json keys. */
#include "artifacts/gguf_model.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "compute/ggml/ggml_quants.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct sp_gguf_weights {
    sp_gguf *g;
    sp_tensor_info *infos;   /* sorted by (translated) name */
    size_t n;
    char arch[64];
};

/* ---------------------------------------------------------------- locate */

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

spindle_status sp_gguf_model_locate(const char *arg, char **file,
                                    spindle_error *err) {
    *file = NULL;
    struct stat sb;
    if (!arg || stat(arg, &sb) != 0) {
        if (arg && ends_with(arg, ".gguf"))
            return sp_fail(err, SPINDLE_ERR_IO, "%s: no such file", arg);
        return SPINDLE_OK; /* maybe a repo id */
    }
    if (S_ISREG(sb.st_mode)) {
        /* A model file can only be GGUF; sp_gguf_open checks the magic. */
        *file = strdup(arg);
        return *file ? SPINDLE_OK
                     : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    if (!S_ISDIR(sb.st_mode)) return SPINDLE_OK;
    char *cfg = sp_path_join(arg, "config.json");
    if (!cfg) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    bool hf = sp_file_exists(cfg);
    free(cfg);
    if (hf) return SPINDLE_OK;
    DIR *d = opendir(arg);
    if (!d) return SPINDLE_OK; /* the directory path reports the problem */
    char *found = NULL;
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".gguf")) continue;
        if (++count == 1) found = sp_path_join(arg, e->d_name);
    }
    closedir(d);
    if (count > 1) {
        free(found);
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s: %d .gguf files and no config.json; name the file",
                       arg, count);
    }
    if (count == 1 && !found)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    *file = found;
    return SPINDLE_OK;
}

/* ----------------------------------------------------------------- names */

/* llama.cpp's per-layer names (gguf-py TENSOR_NAMES) and the Hugging Face
 * module names the families bind. ffn_norm depends on the architecture. */
static const struct {
    const char *gguf, *hf;
} layer_names[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
};

static const struct {
    const char *gguf, *hf;
} global_names[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};

/* Gemma's sandwich layers have a norm before the MLP that is not the
 * norm after attention; Llama-style layers call that one ffn_norm. */
static const char *ffn_norm_name(const char *arch) {
    return !strcmp(arch, "gemma3") ? "pre_feedforward_layernorm"
                                   : "post_attention_layernorm";
}

bool sp_gguf_translate_name(const char *name, const char *arch, char *out,
                            size_t cap) {
    const char *dot = strrchr(name, '.');
    if (!dot) return false;
    if (!strncmp(name, "blk.", 4)) {
        char *end;
        long layer = strtol(name + 4, &end, 10);
        if (end == name + 4 || *end != '.' || layer < 0 || end >= dot)
            return false;
        size_t len = (size_t)(dot - end - 1);
        const char *module = end + 1, *hf = NULL;
        if (len == 8 && !strncmp(module, "ffn_norm", len))
            hf = ffn_norm_name(arch);
        for (size_t i = 0; !hf && i < sizeof layer_names / sizeof *layer_names; i++)
            if (strlen(layer_names[i].gguf) == len &&
                !strncmp(module, layer_names[i].gguf, len))
                hf = layer_names[i].hf;
        return hf && (size_t)snprintf(out, cap, "model.layers.%ld.%s%s",
                                      layer, hf, dot) < cap;
    }
    size_t stem = (size_t)(dot - name);
    for (size_t i = 0; i < sizeof global_names / sizeof *global_names; i++)
        if (strlen(global_names[i].gguf) == stem &&
            !strncmp(name, global_names[i].gguf, stem))
            return (size_t)snprintf(out, cap, "%s%s", global_names[i].hf,
                                    dot) < cap;
    return false;
}

/* malloc'd Hugging Face name of GGUF tensor `name`, or a copy of `name`
 * when it has none (the families then simply do not find it). */
static char *translate(const char *name, const char *arch) {
    char out[512];
    return strdup(sp_gguf_translate_name(name, arch, out, sizeof out) ? out
                                                                      : name);
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const sp_tensor_info *)a)->name,
                  ((const sp_tensor_info *)b)->name);
}

/* --------------------------------------------------------------- weights */

void sp_gguf_weights_free(sp_gguf_weights *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free((char *)w->infos[i].name);
    free(w->infos);
    sp_gguf_close(w->g);
    free(w);
}

static spindle_status fill_info(sp_gguf_weights *w, const sp_gguf_tensor *t,
                                sp_tensor_info *info, spindle_error *err) {
    const char *path = sp_gguf_path(w->g);
    info->name = translate(t->name, w->arch);
    if (!info->name) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    info->ndim = t->n_dims;
    for (int d = 0; d < t->n_dims; d++)
        info->shape[d] = t->ne[t->n_dims - 1 - d];
    info->data = t->data;
    info->nbytes = t->nbytes;
    info->file = path;
    switch (t->type) {
    case SP_GGML_F32: info->dtype = SP_DTYPE_F32; break;
    case SP_GGML_F16: info->dtype = SP_DTYPE_F16; break;
    case SP_GGML_BF16: info->dtype = SP_DTYPE_BF16; break;
    default:
        /* The reader admits only types with a dequantizer. */
        info->dtype = SP_DTYPE_U8;
        info->ggml_quant = true;
        info->ggml_type = t->type;
        if (!sp_ggml_type_supported(t->type))
            return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                           "%s: tensor '%s' has ggml type %u, which Spindle "
                           "cannot read", path, t->name, t->type);
    }
    return SPINDLE_OK;
}

spindle_status sp_gguf_weights_open(const char *path, sp_gguf_weights **out,
                                    spindle_error *err) {
    *out = NULL;
    sp_gguf_weights *w = calloc(1, sizeof *w);
    if (!w) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = sp_gguf_open(path, &w->g, err);
    sp_gguf_str arch = {0};
    if (!st) st = sp_gguf_get_string(w->g, "general.architecture", &arch, err);
    if (!st && (arch.len == 0 || arch.len >= sizeof w->arch ||
                memchr(arch.ptr, '\0', arch.len)))
        st = sp_fail(err, SPINDLE_ERR_FORMAT,
                     "%s: general.architecture is not a valid name", path);
    if (!st) {
        memcpy(w->arch, arch.ptr, arch.len);
        size_t n = sp_gguf_tensor_count(w->g);
        w->infos = calloc(n ? n : 1, sizeof *w->infos);
        if (!w->infos) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        for (size_t i = 0; i < n && !st; i++, w->n++)
            st = fill_info(w, sp_gguf_tensor_at(w->g, i), &w->infos[i], err);
    }
    if (!st) {
        qsort(w->infos, w->n, sizeof *w->infos, by_name);
        for (size_t i = 1; i < w->n && !st; i++)
            if (!strcmp(w->infos[i - 1].name, w->infos[i].name))
                st = sp_fail(err, SPINDLE_ERR_FORMAT,
                             "%s: two tensors map to '%s'", path,
                             w->infos[i].name);
    }
    if (st) {
        sp_gguf_weights_free(w);
        return st;
    }
    *out = w;
    return SPINDLE_OK;
}

const sp_tensor_info *sp_gguf_weights_find(const sp_gguf_weights *w,
                                           const char *hf_name) {
    sp_tensor_info key = {.name = hf_name};
    return bsearch(&key, w->infos, w->n, sizeof *w->infos, by_name);
}

size_t sp_gguf_weights_count(const sp_gguf_weights *w) { return w->n; }

const sp_gguf *sp_gguf_weights_file(const sp_gguf_weights *w) { return w->g; }
