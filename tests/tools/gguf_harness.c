/* Test harness for the GGUF reader and ggml dequantization, driven by
 * tests/unit_py/test_gguf_dequant.py:
 *   gguf_harness meta FILE            metadata + tensor directory as JSON
 *   gguf_harness dequant FILE NAME OUT   tensor NAME as raw float32 to OUT
 *   gguf_harness traits               ggml type traits as JSON
 * Integers are printed exactly (JSON numbers), f32 with 9 and f64 with 17
 * significant digits so that they round-trip. Exit status 1 on any error,
 * with the one-line message on stderr. */
#include "artifacts/gguf.h"
#include "compute/ggml/ggml_quants.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A JSON number printed by us, so that 64-bit integers stay exact. */
static cJSON *raw_number(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cJSON *raw_number(const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return cJSON_CreateRaw(buf);
}

static cJSON *string_json(sp_gguf_str s) {
    char *tmp = malloc(s.len + 1);
    if (!tmp) return NULL;
    memcpy(tmp, s.ptr, s.len);
    tmp[s.len] = 0;
    cJSON *j = cJSON_CreateString(tmp);
    free(tmp);
    return j;
}

static cJSON *value_json(const sp_gguf_value *v) {
    switch (v->type) {
    case SP_GGUF_U8: case SP_GGUF_U16: case SP_GGUF_U32: case SP_GGUF_U64:
        return raw_number("%" PRIu64, v->as.u);
    case SP_GGUF_I8: case SP_GGUF_I16: case SP_GGUF_I32: case SP_GGUF_I64:
        return raw_number("%" PRId64, v->as.i);
    case SP_GGUF_F32: case SP_GGUF_F64:
        if (!isfinite(v->as.f)) return cJSON_CreateString("non-finite");
        return raw_number(v->type == SP_GGUF_F32 ? "%.9g" : "%.17g", v->as.f);
    case SP_GGUF_BOOL: return cJSON_CreateBool(v->as.u != 0);
    case SP_GGUF_STRING: return string_json(v->as.s);
    case SP_GGUF_ARRAY: {
        cJSON *arr = cJSON_CreateArray();
        for (uint64_t i = 0; i < sp_gguf_array_count(v); i++) {
            sp_gguf_value e;
            if (!sp_gguf_array_at(v, i, &e)) return arr;
            cJSON_AddItemToArray(arr, value_json(&e));
        }
        return arr;
    }
    default: return cJSON_CreateNull();
    }
}

/* Element type chain of nested arrays: "array", "u8" -> ["array", "u8"]. */
static cJSON *types_json(const sp_gguf_value *v) {
    cJSON *types = cJSON_CreateArray();
    cJSON_AddItemToArray(types, cJSON_CreateString(sp_gguf_type_name(v->type)));
    sp_gguf_value cur = *v;
    while (cur.type == SP_GGUF_ARRAY) {
        sp_gguf_type et = sp_gguf_array_type(&cur);
        cJSON_AddItemToArray(types, cJSON_CreateString(sp_gguf_type_name(et)));
        if (et != SP_GGUF_ARRAY || !sp_gguf_array_at(&cur, 0, &cur)) break;
    }
    return types;
}

static int cmd_meta(const char *path) {
    sp_gguf *g;
    spindle_error err;
    if (sp_gguf_open(path, &g, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "version", raw_number("%u", sp_gguf_version(g)));
    cJSON_AddItemToObject(root, "alignment", raw_number("%zu", sp_gguf_alignment(g)));
    cJSON_AddItemToObject(root, "data_offset", raw_number("%zu", sp_gguf_data_offset(g)));
    cJSON *kvs = cJSON_AddArrayToObject(root, "kv");
    for (size_t i = 0; i < sp_gguf_kv_count(g); i++) {
        const char *key;
        const sp_gguf_value *v = sp_gguf_kv_at(g, i, &key);
        cJSON *kv = cJSON_CreateObject();
        cJSON_AddStringToObject(kv, "key", key);
        cJSON_AddItemToObject(kv, "types", types_json(v));
        cJSON_AddItemToObject(kv, "value", value_json(v));
        cJSON_AddItemToArray(kvs, kv);
    }
    cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
    for (size_t i = 0; i < sp_gguf_tensor_count(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        cJSON *tj = cJSON_CreateObject();
        cJSON_AddStringToObject(tj, "name", t->name);
        cJSON_AddItemToObject(tj, "type", raw_number("%u", t->type));
        cJSON_AddStringToObject(tj, "type_name", sp_ggml_type_name(t->type));
        cJSON *ne = cJSON_AddArrayToObject(tj, "ne");
        for (int d = 0; d < t->n_dims; d++)
            cJSON_AddItemToArray(ne, raw_number("%" PRId64, t->ne[d]));
        cJSON_AddItemToObject(tj, "offset", raw_number("%" PRIu64, t->offset));
        cJSON_AddItemToObject(tj, "nbytes", raw_number("%zu", t->nbytes));
        cJSON_AddItemToArray(ts, tj);
    }
    char *s = cJSON_PrintUnformatted(root);
    puts(s);
    free(s);
    cJSON_Delete(root);
    sp_gguf_close(g);
    return 0;
}

static int cmd_dequant(const char *path, const char *name, const char *out) {
    sp_gguf *g;
    spindle_error err;
    if (sp_gguf_open(path, &g, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    int rc = 1;
    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, name);
    const sp_ggml_type_traits *tr = t ? sp_ggml_traits(t->type) : NULL;
    float *buf = NULL;
    FILE *f = NULL;
    if (!t || !tr) {
        fprintf(stderr, "%s: no tensor '%s'\n", path, name);
        goto done;
    }
    int64_t n = sp_gguf_tensor_nelements(t);
    buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    f = fopen(out, "wb");
    if (!buf || !f) {
        fprintf(stderr, "%s: cannot write\n", out);
        goto done;
    }
    /* Row by row, as a model loader would. */
    int64_t rows = n / (t->ne[0] ? t->ne[0] : 1);
    size_t row_bytes = sp_ggml_row_size(t->type, t->ne[0]);
    for (int64_t r = 0; r < rows && t->ne[0]; r++)
        tr->to_f32((const unsigned char *)t->data + (size_t)r * row_bytes,
                   buf + r * t->ne[0], t->ne[0]);
    if (fwrite(buf, sizeof(float), (size_t)n, f) != (size_t)n) goto done;
    rc = 0;
done:
    if (f && fclose(f) != 0) rc = 1;
    free(buf);
    sp_gguf_close(g);
    return rc;
}

static int cmd_traits(void) {
    cJSON *root = cJSON_CreateArray();
    for (uint32_t t = 0; t < SP_GGML_TYPE_LIMIT; t++) {
        const sp_ggml_type_traits *tr = sp_ggml_traits(t);
        if (!tr) continue;
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "type", raw_number("%u", t));
        cJSON_AddStringToObject(j, "name", tr->name);
        cJSON_AddItemToObject(j, "block_size", raw_number("%" PRId64, tr->block_size));
        cJSON_AddItemToObject(j, "type_size", raw_number("%zu", tr->type_size));
        cJSON_AddBoolToObject(j, "supported", tr->to_f32 != NULL);
        cJSON_AddItemToArray(root, j);
    }
    char *s = cJSON_PrintUnformatted(root);
    puts(s);
    free(s);
    cJSON_Delete(root);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "meta") == 0) return cmd_meta(argv[2]);
    if (argc == 5 && strcmp(argv[1], "dequant") == 0)
        return cmd_dequant(argv[2], argv[3], argv[4]);
    if (argc == 2 && strcmp(argv[1], "traits") == 0) return cmd_traits();
    fprintf(stderr, "usage: gguf_harness meta FILE | dequant FILE NAME OUT | traits\n");
    return 2;
}
