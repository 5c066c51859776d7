/* One safetensors file (sp_safetensors_open_file).
 *
 * Invariants, checked against the header as the harness itself reads it:
 * every tensor the set lists is an entry of the header, its view is
 * exactly the file's bytes at 8 + header length + data_offsets[0] and ends
 * inside the file, its byte count is its element count times the dtype
 * size, views do not overlap, and every "__metadata__" key is found. */
#include "fuzz_common.h"

#include <cjson/cJSON.h>

#include "artifacts/safetensors.h"

static int by_data(const void *a, const void *b) {
    const sp_tensor_info *x = *(const sp_tensor_info *const *)a;
    const sp_tensor_info *y = *(const sp_tensor_info *const *)b;
    return (uintptr_t)x->data < (uintptr_t)y->data ? -1 : (uintptr_t)x->data > (uintptr_t)y->data;
}

/* The header as JSON, the way the format defines it. */
static cJSON *read_header(const uint8_t *data, size_t size, size_t *data_start) {
    FUZZ_CHECK(size >= 8, "a %zu-byte file opened", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
    FUZZ_CHECK(hlen <= size - 8, "header length %llu in a %zu-byte file opened",
               (unsigned long long)hlen, size);
    *data_start = 8 + (size_t)hlen;
    cJSON *h = cJSON_ParseWithLength((const char *)data + 8, (size_t)hlen);
    FUZZ_CHECK(cJSON_IsObject(h), "the header is not a JSON object");
    return h;
}

static void check_tensor(const sp_tensor_info *t, const cJSON *header, const uint8_t *data,
                         size_t size, size_t data_start) {
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(header, t->name);
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    FUZZ_CHECK(cJSON_GetArraySize(offs) == 2, "tensor '%s' has no data_offsets pair", t->name);
    const double begin = cJSON_GetArrayItem(offs, 0)->valuedouble;
    const double end = cJSON_GetArrayItem(offs, 1)->valuedouble;
    FUZZ_CHECK(begin >= 0 && begin <= end && end <= (double)(size - data_start),
               "tensor '%s': [%g, %g) is not inside the %zu-byte data area", t->name, begin, end,
               size - data_start);
    FUZZ_CHECK(t->nbytes == (size_t)(end - begin), "tensor '%s': %zu bytes for [%g, %g)",
               t->name, t->nbytes, begin, end);
    FUZZ_CHECK(fuzz_same_bytes(t->data, data + data_start + (size_t)begin, t->nbytes),
               "tensor '%s': the view is not the file's bytes", t->name);
    FUZZ_CHECK(t->ndim >= 0 && t->ndim <= SP_MAX_DIMS, "tensor '%s': %d dims", t->name, t->ndim);
    size_t elements = 1;
    for (int d = 0; d < t->ndim; d++) {
        FUZZ_CHECK(t->shape[d] >= 0, "tensor '%s': dim %d", t->name, d);
        elements *= (size_t)t->shape[d];
    }
    FUZZ_CHECK(elements * sp_dtype_size(t->dtype) == t->nbytes,
               "tensor '%s': %zu elements of %zu bytes in %zu bytes", t->name, elements,
               sp_dtype_size(t->dtype), t->nbytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char *path;
    if (!path) path = fuzz_path("model.safetensors");
    fuzz_write(path, data, size);
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    spindle_status st = sp_safetensors_open_file(path, &set, &err);
    if (st != SPINDLE_OK) {
        fuzz_check_error(st, &err);
        FUZZ_CHECK(!set, "set returned with an error");
        return 0;
    }
    size_t data_start = 0;
    cJSON *header = read_header(data, size, &data_start);
    const size_t n = sp_tensor_set_count(set);
    const sp_tensor_info **order = malloc((n + 1) * sizeof *order);
    if (!order) abort();
    for (size_t i = 0; i < n; i++) {
        const sp_tensor_info *t = sp_tensor_set_at(set, i);
        FUZZ_CHECK(t && t->name && sp_tensor_set_find(set, t->name) == t, "tensor %zu", i);
        check_tensor(t, header, data, size, data_start);
        order[i] = t;
    }
    qsort(order, n, sizeof *order, by_data);
    for (size_t i = 1; i < n; i++)
        FUZZ_CHECK(!order[i - 1]->nbytes || !order[i]->nbytes ||
                       (const uint8_t *)order[i - 1]->data + order[i - 1]->nbytes <=
                           (const uint8_t *)order[i]->data,
                   "tensors '%s' and '%s' overlap", order[i - 1]->name, order[i]->name);
    free(order);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(header, "__metadata__");
    const cJSON *kv;
    cJSON_ArrayForEach(kv, meta)
        FUZZ_CHECK(sp_tensor_set_metadata(set, kv->string), "metadata '%s' lost", kv->string);
    cJSON_Delete(header);
    sp_tensor_set_free(set);
    return 0;
}
