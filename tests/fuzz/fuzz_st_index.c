/* model.safetensors.index.json: sp_safetensors_open_dir on a directory
 * holding two fixed shards and the fuzzed index.
 *
 * Invariants on success: every tensor the index names is in the set, in the
 * shard the index names; every tensor comes from a file directly inside the
 * model directory (no shard name escapes it). */
#include "fuzz_common.h"

#include <cjson/cJSON.h>

#include "artifacts/safetensors.h"

static const char *const shard_names[2] = {"model-00001-of-00002.safetensors",
                                           "model-00002-of-00002.safetensors"};

/* A shard: its header, then `data_len` bytes. */
static void write_shard(const char *name, const char *header, size_t data_len) {
    size_t hlen = strlen(header), padded = (hlen + 7) / 8 * 8;
    size_t total = 8 + padded + data_len;
    unsigned char *buf = calloc(1, total);
    if (!buf) abort();
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memset(buf + 8, ' ', padded);
    memcpy(buf + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) buf[8 + padded + i] = (unsigned char)(i * 37 + 1);
    char *path = fuzz_path(name);
    fuzz_write(path, buf, total);
    free(path);
    free(buf);
}

static void make_shards(void) {
    write_shard(shard_names[0],
                "{\"__metadata__\":{\"format\":\"pt\"},"
                "\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                "\"data_offsets\":[0,16]},"
                "\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[16,20]}}",
                20);
    write_shard(shard_names[1],
                "{\"lm_head.weight\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6);
}

static void check_set(const sp_tensor_set *set, const char *index_text) {
    const char *dir = fuzz_scratch_dir();
    const size_t dlen = strlen(dir);
    for (size_t i = 0; i < sp_tensor_set_count(set); i++) {
        const sp_tensor_info *t = sp_tensor_set_at(set, i);
        FUZZ_CHECK(t && t->file && !strncmp(t->file, dir, dlen) && t->file[dlen] == '/' &&
                       !strchr(t->file + dlen + 1, '/'),
                   "tensor %zu comes from %s, outside %s", i, t ? t->file : "?", dir);
    }
    cJSON *root = cJSON_Parse(index_text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    FUZZ_CHECK(cJSON_IsObject(map), "an index without a weight_map object opened");
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        const sp_tensor_info *t = sp_tensor_set_find(set, e->string);
        FUZZ_CHECK(t, "tensor '%s' of the index is not in the set", e->string);
        FUZZ_CHECK(cJSON_IsString(e) && !strcmp(t->file + dlen + 1, e->valuestring),
                   "tensor '%s' is in %s, the index says %s", e->string, t->file,
                   cJSON_IsString(e) ? e->valuestring : "(not a string)");
    }
    cJSON_Delete(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char *index;
    if (!index) {
        make_shards();
        index = fuzz_path("model.safetensors.index.json");
    }
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    fuzz_write(index, data, size);
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    spindle_status st = sp_safetensors_open_dir(fuzz_scratch_dir(), &set, &err);
    if (st == SPINDLE_OK) {
        check_set(set, text);
        sp_tensor_set_free(set);
    } else {
        fuzz_check_error(st, &err);
    }
    free(text);
    return 0;
}
