/* GGUF reader: parses and validates the header, metadata and tensor
 * directory of an mmapped file (value accessors live in gguf_meta.c).
 *
 * Every count or length read from the file is compared with the bytes left
 * before it sizes an allocation, so a hostile header cannot make us allocate
 * more than a small multiple of the file size. */
#include "artifacts/gguf.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "compute/ggml/ggml_quants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Smallest encodings, used to bound counts by the bytes that remain. */
#define MIN_KV_BYTES 13          /* key length, type, one-byte value */
#define MIN_TENSOR_INFO_BYTES 24 /* name length, n_dims, type, offset */
#define MIN_STRING_BYTES 8
#define MIN_ARRAY_BYTES 12

typedef struct arena_node {
    struct arena_node *next;
    max_align_t payload[];
} arena_node;

/* Open-addressing index from name to position. */
typedef struct name_slot {
    const char *name; /* NULL: empty */
    size_t pos;
} name_slot;

typedef struct name_index {
    name_slot *slots;
    size_t mask;
} name_index;

struct sp_gguf {
    sp_mapped_file map;
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    size_t n_kv;
    char **keys;
    sp_gguf_value *values;
    size_t n_tensors;
    sp_gguf_tensor *tensors;
    name_index kv_index;
    name_index tensor_index;
    arena_node *arena; /* string indexes and nested arrays */
};

/* Cursor over the mapping; `ctx` names what is being read for messages. */
typedef struct reader {
    const unsigned char *p;
    size_t pos, size;
    const char *path;
    char ctx[160];
    spindle_error *err;
} reader;

static void *arena_alloc(sp_gguf *g, size_t n, size_t size) {
    if (n != 0 && size > (SIZE_MAX - sizeof(arena_node)) / n) return NULL;
    arena_node *node = malloc(sizeof(arena_node) + n * size);
    if (!node) return NULL;
    node->next = g->arena;
    g->arena = node;
    return node->payload;
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool index_init(name_index *ix, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots != NULL;
}

/* Slot holding `name`, or the empty slot where it would go. */
static name_slot *index_slot(const name_index *ix, const char *name) {
    size_t i = (size_t)hash_name(name) & ix->mask;
    while (ix->slots[i].name && strcmp(ix->slots[i].name, name) != 0)
        i = (i + 1) & ix->mask;
    return &ix->slots[i];
}

/* False when `name` is already present. */
static bool index_insert(name_index *ix, const char *name, size_t pos) {
    name_slot *s = index_slot(ix, name);
    if (s->name) return false;
    s->name = name;
    s->pos = pos;
    return true;
}

static size_t index_find(const name_index *ix, const char *name) {
    if (!ix->slots) return SIZE_MAX;
    const name_slot *s = index_slot(ix, name);
    return s->name ? s->pos : SIZE_MAX;
}

static spindle_status truncated(reader *r, size_t need) {
    return sp_fail(r->err, SPINDLE_ERR_FORMAT,
                   "%s: %s: truncated (needs %zu bytes at offset %zu, file has %zu)",
                   r->path, r->ctx, need, r->pos, r->size);
}

static spindle_status rd_bytes(reader *r, void *dst, size_t n) {
    if (n > r->size - r->pos) return truncated(r, n);
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return SPINDLE_OK;
}

/* GGUF is little-endian; so are all hosts Spindle targets. */
static spindle_status rd_u32(reader *r, uint32_t *v) { return rd_bytes(r, v, 4); }
static spindle_status rd_u64(reader *r, uint64_t *v) { return rd_bytes(r, v, 8); }

static spindle_status rd_str(reader *r, sp_gguf_str *s) {
    uint64_t len = 0;
    spindle_status st = rd_u64(r, &len);
    if (st) return st;
    if (len > r->size - r->pos)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT,
                       "%s: %s: string length %llu at offset %zu exceeds the file",
                       r->path, r->ctx, (unsigned long long)len, r->pos - 8);
    s->ptr = (const char *)r->p + r->pos;
    s->len = (size_t)len;
    r->pos += (size_t)len;
    return SPINDLE_OK;
}

/* A NUL-terminated copy of a key or tensor name. */
static spindle_status rd_name(reader *r, char **out) {
    sp_gguf_str s = {0};
    spindle_status st = rd_str(r, &s);
    if (st) return st;
    if (memchr(s.ptr, 0, s.len))
        return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: name contains a NUL byte",
                       r->path, r->ctx);
    *out = malloc(s.len + 1);
    if (!*out) return sp_fail(r->err, SPINDLE_ERR_MEMORY, "%s: out of memory", r->path);
    memcpy(*out, s.ptr, s.len);
    (*out)[s.len] = 0;
    return SPINDLE_OK;
}

static spindle_status parse_value(sp_gguf *g, reader *r, uint32_t type,
                                  sp_gguf_value *v, int depth);

static spindle_status parse_array(sp_gguf *g, reader *r, sp_gguf_value *v,
                                  int depth) {
    uint32_t et = 0;
    uint64_t count = 0;
    spindle_status st;
    if ((st = rd_u32(r, &et)) || (st = rd_u64(r, &count))) return st;
    if (et >= SP_GGUF_TYPE_COUNT)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: unknown array element type %u",
                       r->path, r->ctx, et);
    if (depth >= SP_GGUF_MAX_NESTING)
        return sp_fail(r->err, SPINDLE_ERR_LIMIT, "%s: %s: arrays nested deeper than %d",
                       r->path, r->ctx, SP_GGUF_MAX_NESTING);
    size_t min = et == SP_GGUF_STRING ? MIN_STRING_BYTES
               : et == SP_GGUF_ARRAY ? MIN_ARRAY_BYTES : sp_gguf_scalar_size(et);
    size_t left = r->size - r->pos;
    if (count > left / min)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT,
                       "%s: %s: array length %llu exceeds the %zu bytes left in the file",
                       r->path, r->ctx, (unsigned long long)count, left);
    v->type = SP_GGUF_ARRAY;
    v->as.arr.type = (sp_gguf_type)et;
    v->as.arr.count = count;
    v->as.arr.data = NULL;
    v->as.arr.strs = NULL;
    v->as.arr.items = NULL;
    size_t n = (size_t)count;
    if (et == SP_GGUF_STRING) {
        sp_gguf_str *strs = arena_alloc(g, n, sizeof *strs);
        if (!strs) return sp_fail(r->err, SPINDLE_ERR_MEMORY, "%s: out of memory", r->path);
        for (size_t i = 0; i < n; i++)
            if ((st = rd_str(r, &strs[i]))) return st;
        v->as.arr.strs = strs;
    } else if (et == SP_GGUF_ARRAY) {
        sp_gguf_value *items = arena_alloc(g, n, sizeof *items);
        if (!items) return sp_fail(r->err, SPINDLE_ERR_MEMORY, "%s: out of memory", r->path);
        for (size_t i = 0; i < n; i++)
            if ((st = parse_value(g, r, SP_GGUF_ARRAY, &items[i], depth + 1))) return st;
        v->as.arr.items = items;
    } else {
        v->as.arr.data = r->p + r->pos;
        if (et == SP_GGUF_BOOL)
            for (size_t i = 0; i < n; i++)
                if (r->p[r->pos + i] > 1)
                    return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: bool element %zu is %u, not 0 or 1",
                                   r->path, r->ctx, i, r->p[r->pos + i]);
        r->pos += n * min;
    }
    return SPINDLE_OK;
}

static spindle_status parse_value(sp_gguf *g, reader *r, uint32_t type,
                                  sp_gguf_value *v, int depth) {
    if (type == SP_GGUF_STRING) {
        v->type = SP_GGUF_STRING;
        return rd_str(r, &v->as.s);
    }
    if (type == SP_GGUF_ARRAY) return parse_array(g, r, v, depth);
    size_t size = sp_gguf_scalar_size(type);
    if (size == 0)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: unknown value type %u",
                       r->path, r->ctx, type);
    if (size > r->size - r->pos) return truncated(r, size);
    if (type == SP_GGUF_BOOL && r->p[r->pos] > 1)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: bool value %u is not 0 or 1",
                       r->path, r->ctx, r->p[r->pos]);
    sp_gguf_decode_scalar((sp_gguf_type)type, r->p + r->pos, v);
    r->pos += size;
    return SPINDLE_OK;
}

static spindle_status parse_header(sp_gguf *g, reader *r, uint64_t *n_tensors,
                                   uint64_t *n_kv) {
    snprintf(r->ctx, sizeof r->ctx, "header");
    unsigned char magic[4];
    spindle_status st = rd_bytes(r, magic, 4);
    if (st) return st;
    if (memcmp(magic, "GGUF", 4) != 0)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: not a GGUF file (bad magic)", r->path);
    if ((st = rd_u32(r, &g->version))) return st;
    if (g->version == 1)
        return sp_fail(r->err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: GGUF version 1 is not supported (only 2 and 3)", r->path);
    if (g->version != 2 && g->version != 3) {
        /* A byte-swapped small number means a big-endian file. */
        uint32_t v = g->version;
        uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
        return sp_fail(r->err, SPINDLE_ERR_UNSUPPORTED, "%s: unsupported GGUF version %u%s",
                       r->path, v, swapped <= 3 ? " (big-endian file?)" : "");
    }
    if ((st = rd_u64(r, n_tensors)) || (st = rd_u64(r, n_kv))) return st;
    size_t left = r->size - r->pos;
    if (*n_kv > left / MIN_KV_BYTES)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT,
                       "%s: metadata count %llu is impossible in the %zu bytes left",
                       r->path, (unsigned long long)*n_kv, left);
    if (*n_tensors > left / MIN_TENSOR_INFO_BYTES)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT,
                       "%s: tensor count %llu is impossible in the %zu bytes left",
                       r->path, (unsigned long long)*n_tensors, left);
    return SPINDLE_OK;
}

static spindle_status parse_metadata(sp_gguf *g, reader *r, size_t n_kv) {
    g->keys = calloc(n_kv ? n_kv : 1, sizeof *g->keys);
    g->values = calloc(n_kv ? n_kv : 1, sizeof *g->values);
    if (!g->keys || !g->values || !index_init(&g->kv_index, n_kv))
        return sp_fail(r->err, SPINDLE_ERR_MEMORY, "%s: out of memory", r->path);
    for (size_t i = 0; i < n_kv; i++) {
        snprintf(r->ctx, sizeof r->ctx, "metadata entry %zu", i);
        spindle_status st = rd_name(r, &g->keys[i]);
        if (st) return st;
        g->n_kv = i + 1; /* the key is owned from here on */
        snprintf(r->ctx, sizeof r->ctx, "key '%.100s'", g->keys[i]);
        if (!index_insert(&g->kv_index, g->keys[i], i))
            return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: duplicate key", r->path, r->ctx);
        uint32_t type = 0;
        if ((st = rd_u32(r, &type)) || (st = parse_value(g, r, type, &g->values[i], 0)))
            return st;
    }
    return SPINDLE_OK;
}

static spindle_status read_alignment(sp_gguf *g, reader *r) {
    g->alignment = SP_GGUF_DEFAULT_ALIGNMENT;
    const sp_gguf_value *v = sp_gguf_find(g, "general.alignment");
    if (!v) return SPINDLE_OK;
    uint64_t a;
    if (!sp_gguf_value_u64(v, &a) || a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
        return sp_fail(r->err, SPINDLE_ERR_FORMAT,
                       "%s: key 'general.alignment' must be a power of two up to 2^30",
                       r->path);
    g->alignment = (size_t)a;
    return SPINDLE_OK;
}

static spindle_status parse_tensor_info(sp_gguf *g, reader *r, size_t i) {
    sp_gguf_tensor *t = &g->tensors[i];
    snprintf(r->ctx, sizeof r->ctx, "tensor entry %zu", i);
    char *name;
    spindle_status st = rd_name(r, &name);
    if (st) return st;
    t->name = name;
    g->n_tensors = i + 1;
    snprintf(r->ctx, sizeof r->ctx, "tensor '%.100s'", name);
    if (!index_insert(&g->tensor_index, name, i))
        return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: duplicate tensor name",
                       r->path, r->ctx);
    uint32_t n_dims = 0;
    if ((st = rd_u32(r, &n_dims))) return st;
    if (n_dims > SP_GGUF_MAX_DIMS)
        return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: %u dimensions (at most %d)",
                       r->path, r->ctx, n_dims, SP_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < SP_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne = 0;
        if ((st = rd_u64(r, &ne))) return st;
        if (ne > (uint64_t)INT64_MAX)
            return sp_fail(r->err, SPINDLE_ERR_FORMAT, "%s: %s: dimension %u is %llu",
                           r->path, r->ctx, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    uint64_t offset = 0;
    if ((st = rd_u32(r, &t->type)) || (st = rd_u64(r, &offset))) return st;
    t->offset = offset;
    return SPINDLE_OK;
}

/* Type, size, alignment and bounds of one tensor once the data section is
 * known. */
static spindle_status check_tensor(sp_gguf *g, sp_gguf_tensor *t, spindle_error *err) {
    const char *path = g->map.path;
    const sp_ggml_type_traits *tr = sp_ggml_traits(t->type);
    if (!tr)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "%s: tensor '%.100s': unknown ggml type %u",
                       path, t->name, t->type);
    if (!tr->to_f32)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%.100s': ggml type %s (%u) is not supported",
                       path, t->name, tr->name, t->type);
    if (t->ne[0] % tr->block_size != 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%.100s': row length %lld is not a multiple of the %s block size %lld",
                       path, t->name, (long long)t->ne[0], tr->name, (long long)tr->block_size);
    /* Element count and byte size, refusing any overflow. */
    uint64_t nel = 1;
    for (int d = 0; d < SP_GGUF_MAX_DIMS; d++) {
        uint64_t ne = (uint64_t)t->ne[d];
        if (ne != 0 && nel > (uint64_t)INT64_MAX / ne)
            return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: tensor '%.100s': element count overflows",
                           path, t->name);
        nel *= ne;
    }
    uint64_t blocks = nel / (uint64_t)tr->block_size;
    size_t avail = g->map.size > g->data_offset ? g->map.size - g->data_offset : 0;
    if (blocks > avail / tr->type_size || t->offset > avail ||
        blocks * tr->type_size > avail - t->offset)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%.100s': data (offset %llu, %llu blocks of %zu bytes) "
                       "extends past the end of the file",
                       path, t->name, (unsigned long long)t->offset,
                       (unsigned long long)blocks, tr->type_size);
    t->nbytes = (size_t)(blocks * tr->type_size);
    if (t->offset % g->alignment != 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor '%.100s': offset %llu is not a multiple of the alignment %zu",
                       path, t->name, (unsigned long long)t->offset, g->alignment);
    size_t file_off = g->data_offset + (size_t)t->offset;
    if (file_off % tr->align != 0)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: tensor '%.100s': %s data at file offset %zu is not %zu-byte aligned",
                       path, t->name, tr->name, file_off, tr->align);
    t->data = g->map.data + file_off;
    return SPINDLE_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const sp_gguf_tensor *x = *(const sp_gguf_tensor *const *)a;
    const sp_gguf_tensor *y = *(const sp_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static spindle_status check_overlaps(sp_gguf *g, spindle_error *err) {
    if (g->n_tensors < 2) return SPINDLE_OK;
    sp_gguf_tensor **order = malloc(g->n_tensors * sizeof *order);
    if (!order) return sp_fail(err, SPINDLE_ERR_MEMORY, "%s: out of memory", g->map.path);
    size_t n = 0;
    for (size_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].nbytes) order[n++] = &g->tensors[i];
    qsort(order, n, sizeof *order, cmp_by_offset);
    spindle_status st = SPINDLE_OK;
    for (size_t i = 1; i < n && !st; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
            st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: tensors '%.100s' and '%.100s' overlap",
                         g->map.path, order[i - 1]->name, order[i]->name);
    free(order);
    return st;
}

static spindle_status parse(sp_gguf *g, spindle_error *err) {
    reader r = {.p = g->map.data, .size = g->map.size, .path = g->map.path, .err = err};
    uint64_t n_tensors = 0, n_kv = 0;
    spindle_status st = parse_header(g, &r, &n_tensors, &n_kv);
    if (st) return st;
    if ((st = parse_metadata(g, &r, (size_t)n_kv)) || (st = read_alignment(g, &r))) return st;
    size_t nt = (size_t)n_tensors;
    /* Re-check against what is left now that metadata has been consumed. */
    if (nt > (r.size - r.pos) / MIN_TENSOR_INFO_BYTES)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: tensor count %zu is impossible in the %zu bytes left",
                       r.path, nt, r.size - r.pos);
    g->tensors = calloc(nt ? nt : 1, sizeof *g->tensors);
    if (!g->tensors || !index_init(&g->tensor_index, nt))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "%s: out of memory", r.path);
    for (size_t i = 0; i < nt; i++)
        if ((st = parse_tensor_info(g, &r, i))) return st;
    size_t pad = (g->alignment - r.pos % g->alignment) % g->alignment;
    g->data_offset = r.pos + pad;
    if (nt > 0 && g->data_offset > r.size)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: data section would start at %zu, past the end of the file (%zu bytes)",
                       r.path, g->data_offset, r.size);
    for (size_t i = 0; i < nt; i++)
        if ((st = check_tensor(g, &g->tensors[i], err))) return st;
    return check_overlaps(g, err);
}

spindle_status sp_gguf_open(const char *path, sp_gguf **out, spindle_error *err) {
    *out = NULL;
    sp_gguf *g = calloc(1, sizeof *g);
    if (!g) return sp_fail(err, SPINDLE_ERR_MEMORY, "%s: out of memory", path);
    spindle_status st = sp_map_file(path, &g->map, err);
    if (st == SPINDLE_OK) st = parse(g, err);
    if (st != SPINDLE_OK) {
        sp_gguf_close(g);
        return st;
    }
    *out = g;
    return SPINDLE_OK;
}

void sp_gguf_close(sp_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) free(g->keys[i]);
    for (size_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->keys);
    free(g->values);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    while (g->arena) {
        arena_node *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
    sp_unmap_file(&g->map);
    free(g);
}

const char *sp_gguf_path(const sp_gguf *g) { return g->map.path; }
uint32_t sp_gguf_version(const sp_gguf *g) { return g->version; }
size_t sp_gguf_alignment(const sp_gguf *g) { return g->alignment; }
size_t sp_gguf_data_offset(const sp_gguf *g) { return g->data_offset; }
size_t sp_gguf_kv_count(const sp_gguf *g) { return g->n_kv; }
size_t sp_gguf_tensor_count(const sp_gguf *g) { return g->n_tensors; }

const sp_gguf_value *sp_gguf_kv_at(const sp_gguf *g, size_t i, const char **key) {
    if (i >= g->n_kv) return NULL;
    if (key) *key = g->keys[i];
    return &g->values[i];
}

const sp_gguf_value *sp_gguf_find(const sp_gguf *g, const char *key) {
    size_t i = index_find(&g->kv_index, key);
    return i == SIZE_MAX ? NULL : &g->values[i];
}

const sp_gguf_tensor *sp_gguf_tensor_at(const sp_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sp_gguf_tensor *sp_gguf_find_tensor(const sp_gguf *g, const char *name) {
    size_t i = index_find(&g->tensor_index, name);
    return i == SIZE_MAX ? NULL : &g->tensors[i];
}

int64_t sp_gguf_tensor_nelements(const sp_gguf_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}
