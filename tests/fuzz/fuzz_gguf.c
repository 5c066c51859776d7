/* GGUF files: the reader (sp_gguf_open), then what is built on it: the
 * weights under Hugging Face names with the config.json translation, and
 * the llama.cpp tokenizer from tokenizer.ggml.* metadata.
 *
 * Invariants: every tensor view is the file's own bytes at data_offset +
 * offset and lies inside the file, tensors do not overlap, lookups find
 * what iteration lists, every metadata value can be walked; a tokenizer
 * that loads round-trips its ids through the streaming detokenizer. */
#include "fuzz_tokenizer.h"

#include "artifacts/gguf_model.h"
#include "compute/ggml/ggml_quants.h"
#include "models/registry.h"

static unsigned fuzz_sink;

static void touch(const void *p, size_t n) {
    const volatile unsigned char *b = p;
    for (size_t i = 0; i < n; i++) fuzz_sink += b[i];
}

static void walk_value(const sp_gguf_value *v, int depth) {
    FUZZ_CHECK(v->type < SP_GGUF_TYPE_COUNT, "type %d", (int)v->type);
    FUZZ_CHECK(depth <= SP_GGUF_MAX_NESTING + 1, "nesting %d", depth);
    sp_gguf_str s;
    if (sp_gguf_value_str(v, &s)) touch(s.ptr, s.len);
    if (v->type != SP_GGUF_ARRAY) return;
    const uint64_t n = sp_gguf_array_count(v);
    for (uint64_t i = 0; i < n; i++) {
        sp_gguf_value e;
        FUZZ_CHECK(sp_gguf_array_at(v, i, &e), "element %llu of %llu", (unsigned long long)i,
                   (unsigned long long)n);
        FUZZ_CHECK(e.type == sp_gguf_array_type(v), "element type");
        walk_value(&e, depth + 1);
    }
    sp_gguf_value past;
    FUZZ_CHECK(!sp_gguf_array_at(v, n, &past), "element past the end");
}

static int by_offset(const void *a, const void *b) {
    const sp_gguf_tensor *x = *(const sp_gguf_tensor *const *)a;
    const sp_gguf_tensor *y = *(const sp_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void check_tensors(const sp_gguf *g, const uint8_t *file, size_t size) {
    const size_t n = sp_gguf_tensor_count(g), align = sp_gguf_alignment(g);
    const size_t data = sp_gguf_data_offset(g);
    FUZZ_CHECK(align && !(align & (align - 1)), "alignment %zu", align);
    FUZZ_CHECK(n == 0 || (data <= size && data % align == 0), "data offset %zu", data);
    const sp_gguf_tensor **order = malloc((n + 1) * sizeof *order);
    if (!order) abort();
    for (size_t i = 0; i < n; i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        FUZZ_CHECK(t && t->name && sp_gguf_find_tensor(g, t->name) == t, "tensor %zu", i);
        FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= SP_GGUF_MAX_DIMS, "dims %d", t->n_dims);
        const sp_ggml_type_traits *tr = sp_ggml_traits(t->type);
        FUZZ_CHECK(tr && tr->to_f32, "tensor '%s': type %u", t->name, t->type);
        const int64_t nel = sp_gguf_tensor_nelements(t);
        FUZZ_CHECK(nel >= 0 && nel % tr->block_size == 0, "elements %lld", (long long)nel);
        FUZZ_CHECK(t->nbytes == (size_t)(nel / tr->block_size) * tr->type_size,
                   "tensor '%s': %zu bytes for %lld elements", t->name, t->nbytes, (long long)nel);
        FUZZ_CHECK(t->offset % align == 0 && t->offset <= size - data &&
                       t->nbytes <= size - data - t->offset,
                   "tensor '%s' (offset %llu, %zu bytes) is not inside the %zu-byte file", t->name,
                   (unsigned long long)t->offset, t->nbytes, size);
        FUZZ_CHECK(fuzz_same_bytes(t->data, file + data + t->offset, t->nbytes),
                   "tensor '%s': the view is not the file's bytes", t->name);
        order[i] = t;
    }
    qsort(order, n, sizeof *order, by_offset);
    for (size_t i = 1; i < n; i++)
        FUZZ_CHECK(!order[i - 1]->nbytes || !order[i]->nbytes ||
                       order[i - 1]->offset + order[i - 1]->nbytes <= order[i]->offset,
                   "tensors '%s' and '%s' overlap", order[i - 1]->name, order[i]->name);
    free(order);
    FUZZ_CHECK(!sp_gguf_tensor_at(g, n), "tensor past the end");
}

/* What the LoRA GGUF loader (models/lora_load.c) takes of each tensor: its
 * row-major view, and the Hugging Face name of blk.N.<module>.weight under
 * a .lora_a / .lora_b suffix in every family's spelling. */
static void check_adapter_view(const sp_gguf *g) {
    for (size_t i = 0; i < sp_gguf_tensor_count(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        sp_tensor_info info;
        spindle_error err = {0};
        spindle_status st = sp_gguf_tensor_info(g, t, &info, &err);
        if (st != SPINDLE_OK) {
            fuzz_check_error(st, &err);
            continue;
        }
        FUZZ_CHECK(info.ndim == t->n_dims && info.data == t->data &&
                       info.nbytes == t->nbytes,
                   "tensor '%s': info differs from the directory", t->name);
        for (int d = 0; d < t->n_dims; d++)
            FUZZ_CHECK(info.shape[d] == t->ne[t->n_dims - 1 - d], "tensor '%s' dim %d",
                       t->name, d);
        size_t len = strlen(t->name);
        char base[256], out[256];
        if (len < 8 || len - 7 >= sizeof base ||
            (strcmp(t->name + len - 7, ".lora_a") && strcmp(t->name + len - 7, ".lora_b")))
            continue;
        memcpy(base, t->name, len - 7);
        base[len - 7] = 0;
        for (const sp_gguf_family *const *f = sp_gguf_families(); *f; f++)
            if (sp_gguf_translate_name(base, *f, out, sizeof out))
                FUZZ_CHECK(strncmp(base, "blk.", 4) || !strncmp(out, "model.layers.", 13),
                           "'%s' translated to '%s'", base, out);
    }
}

static void check_reader(const char *path, const uint8_t *data, size_t size) {
    sp_gguf *g = NULL;
    spindle_error err = {0};
    spindle_status st = sp_gguf_open(path, &g, &err);
    if (st != SPINDLE_OK) {
        fuzz_check_error(st, &err);
        FUZZ_CHECK(!g, "handle returned with an error");
        return;
    }
    for (size_t i = 0; i < sp_gguf_kv_count(g); i++) {
        const char *key = NULL;
        const sp_gguf_value *v = sp_gguf_kv_at(g, i, &key);
        FUZZ_CHECK(v && key && sp_gguf_find(g, key) == v, "key %zu", i);
        walk_value(v, 0);
    }
    check_tensors(g, data, size);
    check_adapter_view(g);
    sp_gguf_close(g);
}

static void check_model(const char *path) {
    sp_gguf_weights *w = NULL;
    spindle_error err = {0};
    spindle_status st = sp_gguf_weights_open(path, sp_gguf_families(), &w, &err);
    if (st != SPINDLE_OK) {
        fuzz_check_error(st, &err);
        return;
    }
    sp_model_config cfg;
    st = sp_gguf_model_config(w, &cfg, &err);
    if (st == SPINDLE_OK) {
        FUZZ_CHECK(cfg.hidden_size > 0 && cfg.n_heads > 0 && cfg.n_kv_heads > 0 &&
                       cfg.head_dim > 0 && cfg.n_layers > 0,
                   "config with hidden %d heads %d/%d head_dim %d layers %d", cfg.hidden_size,
                   cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.n_layers);
        sp_config_free(&cfg);
    } else {
        fuzz_check_error(st, &err);
    }
    sp_gguf_weights_free(w);
}

static void check_tokenizer(const char *path) {
    spindle_tokenizer *tok = NULL;
    spindle_error err = {0};
    spindle_status st = spindle_tokenizer_load(path, &tok, &err);
    if (st != SPINDLE_OK) {
        fuzz_check_error(st, &err);
        return;
    }
    static const char sample[] = "Hello world! 123 caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd  <s>\n\t";
    fuzz_exercise_tokenizer(tok, sample, sizeof sample - 1);
    spindle_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char *path;
    if (!path) path = fuzz_path("model.gguf");
    fuzz_write(path, data, size);
    check_reader(path, data, size);
    check_model(path);
    check_tokenizer(path);
    return 0;
}
