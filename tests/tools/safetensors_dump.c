/* Prints what the safetensors reader sees, as one JSON object, for
 * tests/unit_py/test_safetensors_reference.py to compare with the reference
 * `safetensors` package:
 *   safetensors_dump PATH [METADATA_KEY...]
 * PATH is a .safetensors file or a model directory.
 * -> {"tensors":[{"name":..,"dtype":..,"shape":[..],"file":..,"hex":..}, ...],
 *     "metadata":{KEY: value or null, ...}}
 * Tensors come in the reader's iteration order; "file" is the shard's base
 * name. On failure: the error on stderr (one line), exit status 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "artifacts/safetensors.h"

static char *hex(const unsigned char *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    char *s = malloc(2 * n + 1);
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = digits[p[i] >> 4];
        s[2 * i + 1] = digits[p[i] & 15];
    }
    s[2 * n] = '\0';
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: safetensors_dump PATH [METADATA_KEY...]\n");
        return 2;
    }
    size_t len = strlen(argv[1]);
    bool is_file = len > 12 && strcmp(argv[1] + len - 12, ".safetensors") == 0;
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    spindle_status st = is_file ? sp_safetensors_open_file(argv[1], &set, &err)
                                : sp_safetensors_open_dir(argv[1], &set, &err);
    if (st != SPINDLE_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "tensors");
    for (size_t i = 0; i < sp_tensor_set_count(set); i++) {
        const sp_tensor_info *t = sp_tensor_set_at(set, i);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "dtype", sp_dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape,
                                 cJSON_CreateNumber((double)t->shape[d]));
        const char *base = strrchr(t->file, '/');
        cJSON_AddStringToObject(o, "file", base ? base + 1 : t->file);
        char *h = hex(t->data, t->nbytes);
        cJSON_AddStringToObject(o, "hex", h ? h : "");
        free(h);
        cJSON_AddItemToArray(list, o);
    }
    cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
    for (int a = 2; a < argc; a++) {
        const char *v = sp_tensor_set_metadata(set, argv[a]);
        if (v) cJSON_AddStringToObject(meta, argv[a], v);
        else cJSON_AddNullToObject(meta, argv[a]);
    }
    char *out = cJSON_PrintUnformatted(root);
    puts(out ? out : "{}");
    free(out);
    cJSON_Delete(root);
    sp_tensor_set_free(set);
    return 0;
}
