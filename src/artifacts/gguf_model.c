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
    const sp_gguf_family *family;
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

/* llama.cpp's per-layer names (gguf-py TENSOR_NAMES) common to the
 * Llama-style families, and the Hugging Face module names they bind; a
 * family's own table (sp_gguf_family.layer_names) comes first. */
static const sp_gguf_name_map common_layer_names[] = {
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
    {"ffn_norm", "post_attention_layernorm"},
    {NULL, NULL},
};

static const sp_gguf_name_map global_names[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
    {NULL, NULL},
};

/* The hf of the entry whose gguf is exactly module[len], or NULL. */
static const char *lookup_name(const sp_gguf_name_map *map, const char *module,
                               size_t len) {
    for (; map && map->gguf; map++)
        if (strlen(map->gguf) == len && !strncmp(module, map->gguf, len))
            return map->hf;
    return NULL;
}

const sp_gguf_family *sp_gguf_family_find(const sp_gguf_family *const *families,
                                          const char *arch) {
    for (; families && *families; families++)
        if (!strcmp((*families)->arch, arch)) return *families;
    return NULL;
}

spindle_status sp_gguf_family_of(const sp_gguf *g,
                                 const sp_gguf_family *const *families,
                                 char *out, size_t cap,
                                 const sp_gguf_family **family,
                                 spindle_error *err) {
    const char *path = sp_gguf_path(g);
    sp_gguf_str arch = {0};
    spindle_status st = sp_gguf_get_string(g, "general.architecture", &arch, err);
    if (st) return st;
    if (arch.len == 0 || arch.len >= cap || memchr(arch.ptr, '\0', arch.len))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: general.architecture is not a valid name", path);
    memcpy(out, arch.ptr, arch.len);
    out[arch.len] = '\0';
    *family = sp_gguf_family_find(families, out);
    if (*family) return SPINDLE_OK;
    char list[256] = "";
    size_t used = 0;
    for (; families && *families && used < sizeof list; families++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                 used ? ", " : "", (*families)->arch);
    return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                   "%s: GGUF architecture '%s' is not supported (supported: "
                   "%s)", path, out, list);
}

bool sp_gguf_translate_name(const char *name, const sp_gguf_family *family,
                            char *out, size_t cap) {
    const char *dot = strrchr(name, '.');
    if (!dot) return false;
    if (!strncmp(name, "blk.", 4)) {
        char *end;
        long layer = strtol(name + 4, &end, 10);
        if (end == name + 4 || *end != '.' || layer < 0 || end >= dot)
            return false;
        size_t len = (size_t)(dot - end - 1);
        const char *module = end + 1;
        const char *hf = lookup_name(family->layer_names, module, len);
        if (!hf) hf = lookup_name(common_layer_names, module, len);
        return hf && (size_t)snprintf(out, cap, "model.layers.%ld.%s%s",
                                      layer, hf, dot) < cap;
    }
    const char *hf = lookup_name(family->global_names, name,
                                 (size_t)(dot - name));
    if (!hf) hf = lookup_name(global_names, name, (size_t)(dot - name));
    return hf && (size_t)snprintf(out, cap, "%s%s", hf, dot) < cap;
}

/* malloc'd Hugging Face name of GGUF tensor `name`, or a copy of `name`
 * when it has none (the families then simply do not find it). */
static char *translate(const char *name, const sp_gguf_family *family) {
    char out[512];
    return strdup(sp_gguf_translate_name(name, family, out, sizeof out) ? out
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

spindle_status sp_gguf_tensor_info(const sp_gguf *g, const sp_gguf_tensor *t,
                                   sp_tensor_info *info, spindle_error *err) {
    const char *path = sp_gguf_path(g);
    *info = (sp_tensor_info){.name = t->name, .ndim = t->n_dims,
                             .data = t->data, .nbytes = t->nbytes,
                             .file = path};
    for (int d = 0; d < t->n_dims; d++)
        info->shape[d] = t->ne[t->n_dims - 1 - d];
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

static spindle_status fill_info(sp_gguf_weights *w, const sp_gguf_tensor *t,
                                sp_tensor_info *info, spindle_error *err) {
    spindle_status st = sp_gguf_tensor_info(w->g, t, info, err);
    info->name = translate(t->name, w->family);
    if (!info->name) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return st;
}

spindle_status sp_gguf_weights_open(const char *path,
                                    const sp_gguf_family *const *families,
                                    sp_gguf_weights **out,
                                    spindle_error *err) {
    *out = NULL;
    sp_gguf_weights *w = calloc(1, sizeof *w);
    if (!w) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = sp_gguf_open(path, &w->g, err);
    if (!st)
        st = sp_gguf_family_of(w->g, families, w->arch, sizeof w->arch,
                               &w->family, err);
    if (!st) {
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

const sp_gguf_family *sp_gguf_weights_family(const sp_gguf_weights *w) {
    return w->family;
}
