/* Safetensors reader: one file, or a model directory's shards, mmapped and
 * validated as a whole before any tensor is handed out.
 *
 * File layout: u64 little-endian header length N, N bytes of UTF-8 JSON, then
 * the data area. Every offset and size read from the file is checked against
 * the mapping, so a malformed file yields an error, never an out-of-bounds
 * read. Tensor data pointers point straight into the mapping and carry no
 * alignment guarantee (offsets are arbitrary byte counts): readers must use
 * memcpy or unaligned loads. */
#include "artifacts/safetensors.h"
#include "base/error.h"
#include "base/mapped_file.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* The reference implementation's bound; real headers are well under 10 MB. */
#define SP_ST_MAX_HEADER 100000000ull
/* cJSON stores numbers as doubles: integers above 2^53 are not exact. No
 * real file or shape gets near it, so anything larger is rejected. */
#define SP_ST_MAX_EXACT 9007199254740992.0

typedef struct sp_st_meta {
    char *key;
    char *value;
} sp_st_meta;

struct sp_tensor_set {
    sp_mapped_file *files; /* each shard's mapping; paths name the shards */
    size_t n_files;
    sp_tensor_info *tensors; /* sorted by name once the set is complete */
    size_t n_tensors;
    sp_st_meta *meta; /* in file order; the first shard's key wins */
    size_t n_meta;
};

static const char *const INDEX_NAME = "model.safetensors.index.json";

/* ------------------------------------------------------------------ basics */

static spindle_status oom(spindle_error *err, const char *path) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "%s: out of memory", path);
}

void sp_tensor_set_free(sp_tensor_set *set) {
    if (!set) return;
    for (size_t i = 0; i < set->n_tensors; i++)
        free((char *)set->tensors[i].name);
    for (size_t i = 0; i < set->n_meta; i++) {
        free(set->meta[i].key);
        free(set->meta[i].value);
    }
    for (size_t i = 0; i < set->n_files; i++) sp_unmap_file(&set->files[i]);
    free(set->tensors);
    free(set->meta);
    free(set->files);
    free(set);
}

static int cmp_info_name(const void *a, const void *b) {
    return strcmp(((const sp_tensor_info *)a)->name,
                  ((const sp_tensor_info *)b)->name);
}

/* Sort by name and reject a name seen twice: within one header (JSON with a
 * repeated key) or across shards. */
static spindle_status sort_and_check_unique(sp_tensor_set *set,
                                            spindle_error *err) {
    if (set->n_tensors > 1)
        qsort(set->tensors, set->n_tensors, sizeof *set->tensors,
              cmp_info_name);
    for (size_t i = 1; i < set->n_tensors; i++) {
        const sp_tensor_info *a = &set->tensors[i - 1], *b = &set->tensors[i];
        if (strcmp(a->name, b->name) != 0) continue;
        if (a->file == b->file)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: tensor '%s' appears twice in the header",
                           a->file, a->name);
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "tensor '%s' appears in both %s and %s", a->name,
                       a->file, b->file);
    }
    return SPINDLE_OK;
}

const sp_tensor_info *sp_tensor_set_find(const sp_tensor_set *set,
                                         const char *name) {
    if (!set || !name) return NULL;
    size_t lo = 0, hi = set->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, set->tensors[mid].name);
        if (c == 0) return &set->tensors[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

size_t sp_tensor_set_count(const sp_tensor_set *set) {
    return set ? set->n_tensors : 0;
}

const sp_tensor_info *sp_tensor_set_at(const sp_tensor_set *set, size_t i) {
    return set && i < set->n_tensors ? &set->tensors[i] : NULL;
}

const char *sp_tensor_set_metadata(const sp_tensor_set *set, const char *key) {
    if (!set || !key) return NULL;
    for (size_t i = 0; i < set->n_meta; i++)
        if (strcmp(set->meta[i].key, key) == 0) return set->meta[i].value;
    return NULL;
}

/* ------------------------------------------------------------ JSON checks */

/* True when [p, p+n) is UTF-8 without NUL bytes (cJSON checks neither, and
 * a NUL would silently cut a name short). */
static bool valid_utf8(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (p[i] >= 0x01 && p[i] < 0x80) { i++; continue; }
        if (p[i] == 0) return false;
        utf8proc_int32_t cp;
        size_t left = n - i;
        utf8proc_ssize_t step =
            utf8proc_iterate(p + i, left > 4 ? 4 : (utf8proc_ssize_t)left, &cp);
        if (step <= 0) return false;
        i += (size_t)step;
    }
    return true;
}

/* Parse a NUL-free UTF-8 buffer as one JSON document with nothing after it
 * but whitespace. The copy adds the terminator cJSON needs for that check. */
static cJSON *parse_json(const unsigned char *p, size_t n) {
    char *buf = malloc(n + 1);
    if (!buf) return NULL;
    memcpy(buf, p, n);
    buf[n] = '\0';
    cJSON *doc = cJSON_ParseWithLengthOpts(buf, n + 1, NULL, true);
    free(buf);
    return doc;
}

/* A JSON number that is a non-negative integer exactly representable. */
static bool json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!isfinite(v) || v < 0 || v > SP_ST_MAX_EXACT || floor(v) != v)
        return false;
    *out = (uint64_t)v;
    return true;
}

/* ------------------------------------------------------------ dtypes */

typedef struct sp_st_dtype {
    const char *name;
    int dtype; /* sp_dtype, or -1: a safetensors dtype Spindle cannot use */
} sp_st_dtype;

static const sp_st_dtype ST_DTYPES[] = {
    {"F64", SP_DTYPE_F64},   {"F32", SP_DTYPE_F32},   {"F16", SP_DTYPE_F16},
    {"BF16", SP_DTYPE_BF16}, {"I64", SP_DTYPE_I64},   {"I32", SP_DTYPE_I32},
    {"I16", SP_DTYPE_I16},   {"I8", SP_DTYPE_I8},     {"U64", SP_DTYPE_U64},
    {"U32", SP_DTYPE_U32},   {"U16", SP_DTYPE_U16},   {"U8", SP_DTYPE_U8},
    {"BOOL", SP_DTYPE_BOOL}, {"F8_E4M3", -1},         {"F8_E5M2", -1},
    {"F8_E8M0", -1},         {"F6_E2M3", -1},         {"F6_E3M2", -1},
    {"F4", -1},              {"C64", -1},
};

/* ------------------------------------------------------------ one file */

typedef struct sp_st_file_ctx {
    const char *path;
    const unsigned char *data; /* start of the data area */
    uint64_t data_size;
    spindle_error *err;
} sp_st_file_ctx;

static spindle_status parse_shape(const sp_st_file_ctx *c, const char *name,
                                  const cJSON *shape, sp_tensor_info *t,
                                  uint64_t *numel) {
    if (!cJSON_IsArray(shape))
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': shape is not a list", c->path, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > SP_MAX_DIMS)
        return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%s': %d dimensions, at most %d supported",
                       c->path, name, nd, SP_MAX_DIMS);
    uint64_t n = 1;
    bool overflow = false;
    int d = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, d++) {
        uint64_t v;
        if (!json_uint(dim, &v))
            return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                           "%s: tensor '%s': shape must be a list of "
                           "non-negative integers", c->path, name);
        t->shape[d] = (int64_t)v;
        if (v != 0 && n > UINT64_MAX / v) overflow = true;
        else n *= v;
    }
    /* A zero dim makes an empty tensor whatever the others say. */
    for (int i = 0; i < nd; i++)
        if (t->shape[i] == 0) { n = 0; overflow = false; }
    if (overflow || n > (uint64_t)INT64_MAX)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': element count overflows", c->path,
                       name);
    t->ndim = nd;
    *numel = n;
    return SPINDLE_OK;
}

static spindle_status parse_tensor(const sp_st_file_ctx *c, const cJSON *entry,
                                   sp_tensor_info *t, uint64_t *begin) {
    const char *name = entry->string;
    if (!cJSON_IsObject(entry))
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': entry is not an object", c->path,
                       name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!cJSON_IsString(dt))
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': missing string \"dtype\"", c->path,
                       name);
    const sp_st_dtype *found = NULL;
    for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
        if (strcmp(ST_DTYPES[i].name, dt->valuestring) == 0)
            found = &ST_DTYPES[i];
    if (!found)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': unknown dtype '%s'", c->path, name,
                       dt->valuestring);
    if (found->dtype < 0)
        return sp_fail(c->err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%s': dtype %s is not supported", c->path,
                       name, found->name);
    t->dtype = (sp_dtype)found->dtype;

    uint64_t numel = 0;
    spindle_status st = parse_shape(
        c, name, cJSON_GetObjectItemCaseSensitive(entry, "shape"), t, &numel);
    if (st != SPINDLE_OK) return st;

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    uint64_t b, e;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        !json_uint(off->child, &b) || !json_uint(off->child->next, &e) ||
        b > e)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets must be [begin, end], "
                       "integers with 0 <= begin <= end < 2^53", c->path,
                       name);
    if (e > c->data_size)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] exceed "
                       "data size %llu", c->path, name, (unsigned long long)b,
                       (unsigned long long)e,
                       (unsigned long long)c->data_size);
    size_t esize = sp_dtype_size(t->dtype);
    /* Check the product before forming it: it must not wrap. */
    if (numel > UINT64_MAX / esize)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': byte size overflows", c->path, name);
    if (numel * esize != e - b)
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%s': %llu elements of %s need %llu bytes "
                       "but data_offsets [%llu, %llu] hold %llu", c->path,
                       name, (unsigned long long)numel, found->name,
                       (unsigned long long)(numel * esize),
                       (unsigned long long)b, (unsigned long long)e,
                       (unsigned long long)(e - b));
    t->data = c->data + b;
    t->nbytes = (size_t)(e - b);
    t->file = c->path;
    *begin = b;
    return SPINDLE_OK;
}

static spindle_status parse_metadata(const sp_st_file_ctx *c,
                                     const cJSON *obj, sp_tensor_set *set) {
    /* null is no metadata (the safetensors crate reads an Option; mlx's
     * save_safetensors writes null when given none). */
    if (cJSON_IsNull(obj)) return SPINDLE_OK;
    if (!cJSON_IsObject(obj))
        return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                       "%s: \"__metadata__\" is not an object", c->path);
    size_t n = (size_t)cJSON_GetArraySize(obj);
    if (n == 0) return SPINDLE_OK;
    sp_st_meta *m = calloc(n, sizeof *m);
    if (!m) return oom(c->err, c->path);
    set->meta = m;
    for (const cJSON *kv = obj->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv))
            return sp_fail(c->err, SPINDLE_ERR_FORMAT,
                           "%s: \"__metadata__\" value of '%s' is not a string",
                           c->path, kv->string);
        sp_st_meta *slot = &m[set->n_meta];
        slot->key = strdup(kv->string);
        slot->value = strdup(kv->valuestring);
        set->n_meta++;
        if (!slot->key || !slot->value) return oom(c->err, c->path);
    }
    return SPINDLE_OK;
}

typedef struct sp_st_range {
    uint64_t begin, end;
    size_t idx;
} sp_st_range;

static int cmp_range(const void *a, const void *b) {
    const sp_st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Gaps between tensors are allowed (some writers pad), overlaps are not.
 * Empty tensors occupy no bytes and cannot overlap anything. */
static spindle_status check_overlaps(const sp_st_file_ctx *c,
                                     const sp_tensor_set *set,
                                     const uint64_t *begins) {
    size_t n = set->n_tensors;
    if (n < 2) return SPINDLE_OK;
    sp_st_range *r = malloc(n * sizeof *r);
    if (!r) return oom(c->err, c->path);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (set->tensors[i].nbytes > 0)
            r[m++] = (sp_st_range){begins[i],
                                   begins[i] + set->tensors[i].nbytes, i};
    qsort(r, m, sizeof *r, cmp_range);
    spindle_status st = SPINDLE_OK;
    for (size_t i = 1; i < m && st == SPINDLE_OK; i++)
        if (r[i].begin < r[i - 1].end)
            st = sp_fail(c->err, SPINDLE_ERR_FORMAT,
                         "%s: tensor '%s': data_offsets [%llu, %llu] overlap "
                         "tensor '%s' [%llu, %llu]", c->path,
                         set->tensors[r[i].idx].name,
                         (unsigned long long)r[i].begin,
                         (unsigned long long)r[i].end,
                         set->tensors[r[i - 1].idx].name,
                         (unsigned long long)r[i - 1].begin,
                         (unsigned long long)r[i - 1].end);
    free(r);
    return st;
}

/* Fill `set` (which already owns the mapping of c->path) from the header. */
static spindle_status parse_header(sp_st_file_ctx *c, const cJSON *root,
                                   sp_tensor_set *set) {
    size_t n = (size_t)cJSON_GetArraySize(root);
    set->tensors = calloc(n ? n : 1, sizeof *set->tensors);
    uint64_t *begins = calloc(n ? n : 1, sizeof *begins);
    if (!set->tensors || !begins) {
        free(begins);
        return oom(c->err, c->path);
    }
    spindle_status st = SPINDLE_OK;
    bool seen_meta = false;
    for (const cJSON *e = root->child; e && st == SPINDLE_OK; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta)
                st = sp_fail(c->err, SPINDLE_ERR_FORMAT,
                             "%s: \"__metadata__\" appears twice", c->path);
            else
                st = parse_metadata(c, e, set);
            seen_meta = true;
            continue;
        }
        sp_tensor_info *t = &set->tensors[set->n_tensors];
        st = parse_tensor(c, e, t, &begins[set->n_tensors]);
        if (st != SPINDLE_OK) break;
        t->name = strdup(e->string);
        if (!t->name) {
            st = oom(c->err, c->path);
            break;
        }
        set->n_tensors++;
    }
    if (st == SPINDLE_OK) st = check_overlaps(c, set, begins);
    free(begins);
    if (st == SPINDLE_OK) st = sort_and_check_unique(set, c->err);
    return st;
}

/* File offset of the data section (8 + header length) as far as the first
 * 8 bytes tell; 0 when they cannot be read (the header checks report it). */
static size_t sp_st_data_start(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char b[8];
    const bool ok = fread(b, 1, 8, f) == 8;
    fclose(f);
    if (!ok) return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return (size_t)(n % 64) + 8;
}

spindle_status sp_safetensors_open_file(const char *path, sp_tensor_set **out,
                                        spindle_error *err) {
    if (!out || !path)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "sp_safetensors_open_file: NULL argument");
    *out = NULL;
    sp_tensor_set *set = calloc(1, sizeof *set);
    if (set) set->files = calloc(1, sizeof *set->files);
    if (!set || !set->files) {
        sp_tensor_set_free(set);
        return oom(err, path);
    }
    spindle_status st = sp_map_file_at(path, sp_st_data_start(path),
                                       &set->files[0], err);
    if (st != SPINDLE_OK) {
        sp_tensor_set_free(set);
        return st;
    }
    set->n_files = 1;
    const sp_mapped_file *f = &set->files[0];
    /* Name the file by the mapping's own copy: it lives as long as the set. */
    sp_st_file_ctx c = {.path = f->path, .err = err};

    uint64_t hlen = 0;
    if (f->size < 8) {
        st = sp_fail(err, SPINDLE_ERR_FORMAT,
                     "%s: %zu bytes, too short for a safetensors header",
                     f->path, f->size);
    } else {
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->data[i];
        if (hlen > f->size - 8)
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: header length %llu exceeds the file size %zu "
                         "(truncated or not a safetensors file)", f->path,
                         (unsigned long long)hlen, f->size);
        else if (hlen > SP_ST_MAX_HEADER)
            st = sp_fail(err, SPINDLE_ERR_LIMIT,
                         "%s: header length %llu is above the %llu-byte limit",
                         f->path, (unsigned long long)hlen, SP_ST_MAX_HEADER);
    }
    cJSON *root = NULL;
    if (st == SPINDLE_OK) {
        const unsigned char *h = f->data + 8;
        if (!valid_utf8(h, (size_t)hlen))
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: header is not valid UTF-8 text", f->path);
        else if (!(root = parse_json(h, (size_t)hlen)))
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: header is not valid JSON", f->path);
        else if (!cJSON_IsObject(root))
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: header is not a JSON object", f->path);
    }
    if (st == SPINDLE_OK) {
        c.data = f->data + 8 + hlen;
        c.data_size = f->size - 8 - hlen;
        st = parse_header(&c, root, set);
    }
    cJSON_Delete(root);
    if (st != SPINDLE_OK) {
        sp_tensor_set_free(set);
        return st;
    }
    *out = set;
    return SPINDLE_OK;
}

/* ------------------------------------------------------------ directories */

/* Move everything `src` holds into `dst`, then free `src`. Tensor `file`
 * pointers stay valid: they point at the mappings' heap-owned paths. */
static spindle_status absorb(sp_tensor_set *dst, sp_tensor_set *src,
                             spindle_error *err) {
    sp_mapped_file *f = realloc(dst->files,
                                (dst->n_files + src->n_files) * sizeof *f);
    if (f) dst->files = f;
    sp_tensor_info *t = realloc(
        dst->tensors, (dst->n_tensors + src->n_tensors + 1) * sizeof *t);
    if (t) dst->tensors = t;
    sp_st_meta *m =
        realloc(dst->meta, (dst->n_meta + src->n_meta + 1) * sizeof *m);
    if (m) dst->meta = m;
    if (!f || !t || !m) {
        spindle_status st = oom(err, src->n_files ? src->files[0].path : "?");
        sp_tensor_set_free(src);
        return st;
    }
    memcpy(dst->files + dst->n_files, src->files, src->n_files * sizeof *f);
    memcpy(dst->tensors + dst->n_tensors, src->tensors,
           src->n_tensors * sizeof *t);
    if (src->n_meta)
        memcpy(dst->meta + dst->n_meta, src->meta, src->n_meta * sizeof *m);
    dst->n_files += src->n_files;
    dst->n_tensors += src->n_tensors;
    dst->n_meta += src->n_meta;
    src->n_files = src->n_tensors = src->n_meta = 0;
    sp_tensor_set_free(src);
    return SPINDLE_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Open `names` (sorted, unique) inside `dir` and merge them into one set.
 * `index_path` is the index that named them, for the missing-shard message. */
static spindle_status open_shards(const char *dir, char **names, size_t n,
                                  const char *index_path, sp_tensor_set **out,
                                  spindle_error *err) {
    sp_tensor_set *set = calloc(1, sizeof *set);
    if (!set) return oom(err, dir);
    spindle_status st = SPINDLE_OK;
    for (size_t i = 0; i < n && st == SPINDLE_OK; i++) {
        char *path = sp_path_join(dir, names[i]);
        if (!path) {
            st = oom(err, dir);
            break;
        }
        if (index_path && !sp_file_exists(path)) {
            st = sp_fail(err, SPINDLE_ERR_IO,
                         "%s: shard named by %s is missing", path, index_path);
            free(path);
            break;
        }
        sp_tensor_set *one = NULL;
        st = sp_safetensors_open_file(path, &one, err);
        free(path);
        if (st == SPINDLE_OK) st = absorb(set, one, err);
    }
    if (st == SPINDLE_OK) st = sort_and_check_unique(set, err);
    if (st != SPINDLE_OK) {
        sp_tensor_set_free(set);
        return st;
    }
    *out = set;
    return SPINDLE_OK;
}

/* A shard name from the index must stay inside the model directory. */
static bool safe_shard_name(const char *s) {
    return s[0] != '\0' && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 &&
           !strchr(s, '/') && !strchr(s, '\\');
}

static spindle_status open_index(const char *dir, const char *index_path,
                                 sp_tensor_set **out, spindle_error *err) {
    char *text = NULL;
    size_t len = 0;
    spindle_status st = sp_read_text_file(index_path, &text, &len, err);
    if (st != SPINDLE_OK) return st;
    cJSON *root = NULL;
    if (!valid_utf8((const unsigned char *)text, len) ||
        !(root = cJSON_ParseWithLengthOpts(text, len + 1, NULL, true)) ||
        !cJSON_IsObject(root)) {
        free(text);
        cJSON_Delete(root);
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: not a valid JSON object", index_path);
    }
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    size_t n = cJSON_IsObject(map) ? (size_t)cJSON_GetArraySize(map) : 0;
    if (n == 0) {
        cJSON_Delete(root);
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: no \"weight_map\" object naming the shards",
                       index_path);
    }
    char **names = malloc(n * sizeof *names);
    if (!names) {
        cJSON_Delete(root);
        return oom(err, index_path);
    }
    size_t k = 0;
    for (const cJSON *e = map->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !safe_shard_name(e->valuestring)) {
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: tensor '%s': shard must be a plain file name in "
                         "the model directory", index_path, e->string);
            break;
        }
        names[k++] = e->valuestring; /* borrowed from the JSON tree */
    }
    size_t u = 0;
    if (st == SPINDLE_OK) {
        qsort(names, k, sizeof *names, cmp_str);
        for (size_t i = 0; i < k; i++)
            if (u == 0 || strcmp(names[u - 1], names[i]) != 0)
                names[u++] = names[i];
    }
    sp_tensor_set *set = NULL;
    if (st == SPINDLE_OK)
        st = open_shards(dir, names, u, index_path, &set, err);
    free(names);
    /* Every tensor the index names must be where the index says. */
    for (const cJSON *e = map->child; e && st == SPINDLE_OK; e = e->next) {
        const sp_tensor_info *t = sp_tensor_set_find(set, e->string);
        const char *base = t ? strrchr(t->file, '/') : NULL;
        base = base ? base + 1 : t ? t->file : NULL;
        if (!t)
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s/%s: tensor '%s' named by %s is missing", dir,
                         e->valuestring, e->string, INDEX_NAME);
        else if (strcmp(base, e->valuestring) != 0)
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: tensor '%s' is in %s, not in %s", index_path,
                         e->string, t->file, e->valuestring);
    }
    cJSON_Delete(root);
    if (st != SPINDLE_OK) {
        sp_tensor_set_free(set);
        return st;
    }
    *out = set;
    return SPINDLE_OK;
}

/* Every regular *.safetensors file in `dir` (not hidden), in name order. */
static spindle_status open_all_in_dir(const char *dir, sp_tensor_set **out,
                                      spindle_error *err) {
    DIR *d = opendir(dir);
    if (!d) return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot list", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    spindle_status st = SPINDLE_OK;
    const char *ext = ".safetensors";
    size_t elen = strlen(ext);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len <= elen ||
            strcmp(de->d_name + len - elen, ext) != 0)
            continue;
        char *path = sp_path_join(dir, de->d_name);
        bool regular = path && sp_file_exists(path);
        free(path);
        if (!regular) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            char **bigger = realloc(names, nc * sizeof *names);
            if (!bigger) { st = oom(err, dir); break; }
            names = bigger;
            cap = nc;
        }
        if (!(names[n] = strdup(de->d_name))) { st = oom(err, dir); break; }
        n++;
    }
    closedir(d);
    if (st == SPINDLE_OK && n == 0)
        st = sp_fail(err, SPINDLE_ERR_IO,
                     "%s: no %s, model.safetensors or *.safetensors file",
                     dir, INDEX_NAME);
    if (st == SPINDLE_OK) {
        qsort(names, n, sizeof *names, cmp_str);
        st = open_shards(dir, names, n, NULL, out, err);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

spindle_status sp_safetensors_open_dir(const char *dir, sp_tensor_set **out,
                                       spindle_error *err) {
    if (!out || !dir)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "sp_safetensors_open_dir: NULL argument");
    *out = NULL;
    if (!sp_dir_exists(dir))
        return sp_fail(err, SPINDLE_ERR_IO, "%s: not a directory", dir);
    char *index = sp_path_join(dir, INDEX_NAME);
    char *single = sp_path_join(dir, "model.safetensors");
    spindle_status st;
    if (!index || !single) st = oom(err, dir);
    else if (sp_file_exists(index)) st = open_index(dir, index, out, err);
    else if (sp_file_exists(single))
        st = sp_safetensors_open_file(single, out, err);
    else st = open_all_in_dir(dir, out, err);
    free(index);
    free(single);
    return st;
}
