/* `spindle convert --merge-lora`: a model with a LoRA adapter merged into
 * its weights (see convert.h).
 *
 * The model and the adapter are loaded as `spindle run` loads them, so the
 * adapter is checked against the model exactly as when applied unmerged;
 * each adapted projection's rows are the base rows (dequantized when
 * quantized) plus scale * B A, computed row by row (a stacked experts
 * tensor expert by expert, each with its own pair); every other tensor is
 * copied byte for byte. */
#include "convert/convert.h"
#include "convert/convert_internal.h"
#include "artifacts/safetensors.h"
#include "artifacts/safetensors_write.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "compute/matmul/matmul.h"
#include "models/lora.h"
#include "models/model.h"
#include "models/moe.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum merge_kind { M_COPY, M_MERGE, M_DROP } merge_kind;

typedef struct merge_tensor {
    const sp_tensor_info *t;
    merge_kind kind;
    sp_lora_target tgt;       /* M_MERGE: the projection (of every expert
                                 when stacked) */
    int n_parts;              /* M_MERGE: experts stacked in t, else 1 */
    sp_dtype out;             /* M_MERGE: the merged matrix's type */
} merge_tensor;

/* <prefix>model.layers.N.<projection>.{weight,scales,biases}
 * (sp_lora_parse_target's syntax): the projection, resolved against the
 * model, and whether it is .weight. */
static bool projection_of(const spindle_model *m, const char *name,
                          sp_lora_target *tgt, bool *is_weight) {
    char own[400], why[192];
    if (!sp_model_own_name(m, name, own, sizeof own)) return false;
    const char *s = own;
    if (!sp_lora_parse_target(&s, tgt) ||
        tgt->layer >= m->cfg.n_layers)
        return false;
    *is_weight = !strcmp(s, "weight");
    if (!*is_weight && strcmp(s, "scales") && strcmp(s, "biases")) return false;
    /* (a fused gate_up expert's halves resolve, but have no matrix here) */
    return sp_lora_resolve(m, tgt, why, sizeof why) &&
           sp_lora_base(m, tgt->layer, tgt->module,
                        tgt->expert == SP_LORA_STACKED ? 0 : tgt->expert);
}

/* Part p's expert (the whole projection's, when it is not stacked). */
static int part_expert(const sp_lora_target *tgt, int p) {
    return tgt->expert == SP_LORA_STACKED ? p : tgt->expert;
}

static bool is_float(sp_dtype t) {
    return t == SP_DTYPE_F32 || t == SP_DTYPE_F16 || t == SP_DTYPE_BF16;
}

/* The tensor's parts (experts, or just itself) and whether the adapter
 * has a pair for any; a pair of another shape than its base fails. */
static spindle_status adapted(const spindle_model *m, const spindle_adapter *a,
                              merge_tensor *mt, bool *any, spindle_error *err) {
    const sp_lora_target *tgt = &mt->tgt;
    mt->n_parts = tgt->expert == SP_LORA_STACKED
                      ? sp_lora_moe(m, tgt->layer)->spec.n_experts : 1;
    *any = false;
    for (int p = 0; p < mt->n_parts; p++) {
        int e = part_expert(tgt, p);
        const sp_lora_pair *pr = sp_adapter_pair(a, tgt->layer, tgt->module, e);
        const sp_linear *lin = sp_lora_base(m, tgt->layer, tgt->module, e);
        if (!pr) continue;
        *any = true;
        if (lin->w.rows != pr->b.rows || lin->w.cols != pr->a.cols)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "merge: %s is [%lld, %lld], the adapter's product "
                           "[%lld, %lld]", mt->t->name, (long long)lin->w.rows,
                           (long long)lin->w.cols, (long long)pr->b.rows,
                           (long long)pr->a.cols);
    }
    return SPINDLE_OK;
}

/* What happens to each tensor of the model's files; the quantized modules
 * that become float are added to `quant_off` as "<path>": false. */
static spindle_status plan(const spindle_model *m, const spindle_adapter *a,
                           const sp_convert_options *opt, merge_tensor *ts,
                           size_t n, cJSON *quant_off, spindle_error *err) {
    for (size_t i = 0; i < n; i++) {
        const sp_tensor_info *t = sp_tensor_set_at(m->tensors, i);
        merge_tensor mt = {.t = t, .kind = M_COPY};
        ts[i] = mt;
        bool is_weight, any;
        if (!projection_of(m, t->name, &mt.tgt, &is_weight)) continue;
        spindle_status st = adapted(m, a, &mt, &any, err);
        if (st) return st;
        if (!any) continue;
        bool quantized = !is_float(t->dtype) || t->ggml_quant;
        if (!is_weight) {
            ts[i].kind = M_DROP;   /* the scales / biases of a merged module */
            continue;
        }
        mt.kind = M_MERGE;
        mt.out = quantized || opt->dtype_given ? opt->dtype : t->dtype;
        ts[i] = mt;
        if (quantized) {
            char path[256];
            snprintf(path, sizeof path, "%s", t->name);
            *strrchr(path, '.') = 0;
            if (!cJSON_AddFalseToObject(quant_off, path))
                return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        }
    }
    return SPINDLE_OK;
}

/* Every pair of the adapter lands in some tensor of the files: one that
 * none holds (a fused gate_up expert's gate or up, experts packed under
 * names merging does not read, as gpt-oss's Hugging Face *_blocks) fails
 * rather than being left out of the merged model unsaid. */
static spindle_status check_all_merged(const spindle_adapter *a,
                                       const merge_tensor *ts, size_t n,
                                       spindle_error *err) {
    bool *merged = calloc((size_t)a->n_slots, sizeof *merged);
    if (!merged) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++)
        for (int p = 0; ts[i].kind == M_MERGE && p < ts[i].n_parts; p++) {
            const sp_lora_target *tgt = &ts[i].tgt;
            int slot = sp_lora_slot(a, tgt->layer, tgt->module,
                                    part_expert(tgt, p));
            if (slot >= 0) merged[slot] = true;
        }
    spindle_status st = SPINDLE_OK;
    for (int i = 0; i < a->n_slots && !st; i++) {
        if (!a->pairs[i].a.data || merged[i]) continue;
        int l, e;
        sp_lora_module mod;
        sp_lora_slot_place(a, i, &l, &mod, &e);
        char expert[32] = "";
        if (e >= 0) snprintf(expert, sizeof expert, "expert %d ", e);
        else if (e == SP_LORA_SHARED) snprintf(expert, sizeof expert, "shared expert ");
        st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                     "merge: the adapter's layer %d %s%s has no tensor of its "
                     "own in the model's files (a fused gate_up or packed "
                     "expert tensor), so it cannot be merged", l, expert,
                     sp_lora_module_name(mod));
    }
    free(merged);
    return st;
}

static void store_row(const float *row, int64_t n, sp_dtype t, void *dst) {
    for (int64_t c = 0; c < n; c++) {
        if (t == SP_DTYPE_F32) {
            memcpy((float *)dst + c, &row[c], 4);
        } else {
            uint16_t h = t == SP_DTYPE_BF16 ? sp_f32_to_bf16(row[c])
                                            : sp_f32_to_f16(row[c]);
            memcpy((uint16_t *)dst + c, &h, 2);
        }
    }
}

/* W + scale B A, row by row, part (expert) after part; a part without a
 * pair as it is, decoded. */
static spindle_status write_merged(const spindle_model *m,
                                   const spindle_adapter *a, sp_st_writer *w,
                                   const merge_tensor *mt, float scale,
                                   spindle_error *err) {
    const sp_lora_target *tgt = &mt->tgt;
    const int64_t cols = sp_lora_base(m, tgt->layer, tgt->module,
                                      part_expert(tgt, 0))->w.cols;
    float *row = malloc((size_t)cols * sizeof *row);
    void *out = malloc((size_t)cols * 4);
    spindle_status st = row && out ? SPINDLE_OK
        : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    size_t bytes = (size_t)cols * (mt->out == SP_DTYPE_F32 ? 4 : 2);
    for (int p = 0; p < mt->n_parts && !st; p++) {
        int e = part_expert(tgt, p);
        const sp_weight *base = &sp_lora_base(m, tgt->layer, tgt->module, e)->w;
        const sp_lora_pair *pr = sp_adapter_pair(a, tgt->layer, tgt->module, e);
        int64_t rank = pr ? pr->a.rows : 0;
        for (int64_t r = 0; r < base->rows && !st; r++) {
            sp_weight_row(base, r, row);
            for (int64_t k = 0; k < rank; k++) {
                float b = scale * ((const float *)pr->b.data)[r * rank + k];
                const float *ak = (const float *)pr->a.data + k * cols;
                for (int64_t c = 0; c < cols; c++) row[c] += b * ak[c];
            }
            store_row(row, cols, mt->out, out);
            st = sp_st_writer_write(w, out, bytes, err);
        }
    }
    free(row);
    free(out);
    return st;
}

static spindle_status write_weights(const spindle_model *m,
                                    const spindle_adapter *a,
                                    const merge_tensor *ts, size_t n,
                                    float scale, const char *dir,
                                    spindle_error *err) {
    char *path = sp_path_join(dir, "model.safetensors");
    sp_st_writer *w = NULL;
    spindle_status st = path ? sp_st_writer_new(path, &w, err)
                             : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (size_t i = 0; i < n && !st; i++) {
        const sp_tensor_info *t = ts[i].t;
        if (ts[i].kind == M_DROP) continue;
        if (ts[i].kind == M_COPY) {
            st = sp_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, err);
            continue;
        }
        /* [rows][cols], or [experts][rows][cols]: a quantized source is
         * packed narrower */
        const sp_lora_target *tgt = &ts[i].tgt;
        const sp_weight *base =
            &sp_lora_base(m, tgt->layer, tgt->module, part_expert(tgt, 0))->w;
        int stacked = ts[i].n_parts > 1 || t->ndim == 3;
        int64_t shape[3] = {ts[i].n_parts, base->rows, base->cols};
        st = sp_st_writer_add(w, t->name, ts[i].out, 2 + stacked,
                              shape + 1 - stacked, err);
    }
    if (!st) st = sp_st_writer_meta(w, "format", "pt", err);
    if (!st) st = sp_st_writer_begin(w, err);
    for (size_t i = 0; i < n && !st; i++) {
        if (ts[i].kind == M_COPY)
            st = sp_st_writer_write(w, ts[i].t->data, ts[i].t->nbytes, err);
        else if (ts[i].kind == M_MERGE)
            st = write_merged(m, a, w, &ts[i], scale, err);
    }
    if (!st) {
        st = sp_st_writer_finish(w, err);
        w = NULL;
    }
    sp_st_writer_abort(w);
    free(path);
    return st;
}

/* The model directory's other files (tokenizer, templates, generation
 * config), as they are; config.json and the weights are written anew. */
static spindle_status copy_side_files(const char *src, const char *dst,
                                      spindle_error *err) {
    DIR *d = opendir(src);
    if (!d) return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot list", src);
    spindle_status st = SPINDLE_OK;
    for (struct dirent *e; !st && (e = readdir(d));) {
        const char *name = e->d_name;
        size_t len = strlen(name);
        if (name[0] == '.' || !strcmp(name, "config.json") ||
            (len > 12 && !strcmp(name + len - 12, ".safetensors")) ||
            !strcmp(name, "model.safetensors.index.json"))
            continue;
        char *from = sp_path_join(src, name), *to = sp_path_join(dst, name);
        sp_mapped_file f = {0};
        if (!from || !to) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        else if (sp_file_exists(from)) {
            st = sp_map_file(from, &f, err);
            if (!st) st = sp_write_file_atomic(to, f.data ? (const void *)f.data : "",
                                               f.size, err);
            sp_unmap_file(&f);
        }
        free(from);
        free(to);
    }
    closedir(d);
    return st;
}

/* config.json with the merged quantized modules marked float. */
static spindle_status write_config(const char *src, const char *dst,
                                   const cJSON *quant_off, spindle_error *err) {
    char *path = sp_path_join(src, "config.json");
    char *text = NULL;
    size_t n = 0;
    spindle_status st = path ? sp_read_text_file(path, &text, &n, err)
                             : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    cJSON *cfg = st ? NULL : cJSON_ParseWithLength(text, n);
    if (!st && !cJSON_IsObject(cfg))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: not a JSON object", path);
    for (const char *key = "quantization"; !st && key;
         key = strcmp(key, "quantization") ? NULL : "quantization_config") {
        cJSON *q = cJSON_GetObjectItemCaseSensitive(cfg, key);
        const cJSON *off;
        cJSON_ArrayForEach(off, quant_off) {
            if (cJSON_IsObject(q) && !cJSON_AddFalseToObject(q, off->string))
                st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        }
    }
    if (!st) st = sp_conv_write_json(cfg, dst, "config.json", err);
    cJSON_Delete(cfg);
    free(text);
    free(path);
    return st;
}

static spindle_status merge_dir(const char *model_dir, const char *out_dir,
                                const sp_convert_options *opt,
                                spindle_error *err) {
    spindle_load_options lo = {.n_threads = 1, .max_context = 256,
                               .use_mmap = 1};
    spindle_model *m = NULL;
    spindle_adapter *a = NULL;
    merge_tensor *ts = NULL;
    cJSON *quant_off = cJSON_CreateObject();
    spindle_status st = quant_off ? spindle_model_load(model_dir, &lo, &m, err)
                                  : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st && !m->tensors)
        st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                     "merge: %s is not a safetensors model", model_dir);
    if (!st) st = spindle_adapter_load(m, opt->merge_lora, &a, err);
    size_t n = st ? 0 : sp_tensor_set_count(m->tensors);
    if (!st && !(ts = calloc(n ? n : 1, sizeof *ts)))
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = plan(m, a, opt, ts, n, quant_off, err);
    if (!st) st = check_all_merged(a, ts, n, err);
    if (!st && !sp_make_dirs(out_dir))
        st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot create directory", out_dir);
    if (!st) st = copy_side_files(m->dir, out_dir, err);
    float scale = st ? 0 : a->scale * (opt->merge_scale != 0 ? opt->merge_scale : 1);
    if (!st) st = write_weights(m, a, ts, n, scale, out_dir, err);
    /* config.json last: a directory without it is not mistaken for a model. */
    if (!st) st = write_config(m->dir, out_dir, quant_off, err);
    free(ts);
    cJSON_Delete(quant_off);
    spindle_adapter_unload(a);
    spindle_model_free(m);
    return st;
}

/* Remove the files of directory dir (no subdirectories) and dir. */
static void remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = sp_path_join(dir, e->d_name);
        if (p) unlink(p);
        free(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

spindle_status sp_convert_merge_lora(const char *model, const char *out_dir,
                                     const sp_convert_options *opt,
                                     spindle_error *err) {
    if (!opt || !opt->merge_lora)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "merge: no adapter");
    if (opt->dtype != SP_DTYPE_BF16 && opt->dtype != SP_DTYPE_F32)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "convert: the output dtype must be bf16 or f32");
    char *gguf = NULL;
    spindle_status st = sp_gguf_model_locate(model, &gguf, err);
    if (st || !gguf) return st ? st : merge_dir(model, out_dir, opt, err);
    /* A GGUF base: converted to a Hugging Face directory first (q/k rows
     * back in their order, Q8_0 / Q4_1 as MLX affine), merged from there. */
    size_t len = strlen(out_dir) + 16;
    char *tmp = malloc(len);
    if (!tmp) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    else snprintf(tmp, len, "%s.gguf-base", out_dir);
    if (!st && sp_dir_exists(tmp))
        st = sp_fail(err, SPINDLE_ERR_IO, "%s exists; remove it first", tmp);
    if (!st) st = sp_convert_gguf(gguf, tmp, opt, err);
    if (!st) st = merge_dir(tmp, out_dir, opt, err);
    if (tmp) remove_flat_dir(tmp);
    free(tmp);
    free(gguf);
    return st;
}
