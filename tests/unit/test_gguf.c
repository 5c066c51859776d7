/* GGUF reader: a file written here byte by byte (following the GGUF spec,
 * independently of the reader) is read back; then corrupted copies of it
 * must fail cleanly with a one-line error naming the file. Then model-shaped
 * files through the metadata -> config translation: reproducers of what a
 * fuzz campaign found (a zero head size, integer-typed numbers), and the
 * config.json counterparts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/config.h"
#include "artifacts/gguf.h"
#include "artifacts/gguf_model.h"
#include "models/registry.h"

/* ------------------------------------------------------------ file builder */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(buf *b, uint16_t v) { put(b, &v, 2); }
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_f32(buf *b, float v) { put(b, &v, 4); }
static void put_f64(buf *b, double v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void put_key(buf *b, const char *key, uint32_t type) {
    put_str(b, key);
    put_u32(b, type);
}

/* GGUF value type numbers from the spec, spelled out independently. */
enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR,
       T_U64, T_I64, T_F64 };
/* ggml type numbers and block sizes (ggml.h / ggml-common.h). */
enum { G_F32 = 0, G_F16 = 1, G_Q8_0 = 8 };

typedef struct opts {
    bool dup_key, dup_tensor;
    uint32_t alignment;   /* 0: no general.alignment key (default 32) */
    int extra_nesting;    /* wrap an array in this many more arrays */
    uint32_t n_dims0;     /* n_dims written for tensor 0 (0: the real 2) */
} opts;

/* Where interesting fields landed, for targeted corruption. */
typedef struct layout {
    size_t version, n_tensors, n_kv, first_key_len, u8_array_len, str_len;
    size_t bool_value, alignment_value, tensor_type[3], tensor_offset[3], tensor_dim0[3];
    size_t data_start, header_end;
    size_t data_end; /* end of the last tensor's bytes; padding follows */
} layout;

#define N_TENSORS 3
static const char *k_names[N_TENSORS] = {"tok_embd.weight", "blk.0.attn_q.weight", "output_norm"};

static void build(const opts *o, buf *b, layout *L) {
    memset(b, 0, sizeof *b);
    memset(L, 0, sizeof *L);
    put(b, "GGUF", 4);
    L->version = b->n;
    put_u32(b, 3);
    L->n_tensors = b->n;
    put_u64(b, N_TENSORS);
    L->n_kv = b->n;
    uint64_t n_kv = 20 + (o->alignment ? 1 : 0) + (o->dup_key ? 1 : 0);
    put_u64(b, n_kv);

    L->first_key_len = b->n;
    put_key(b, "general.architecture", T_STR);
    L->str_len = b->n;
    put_str(b, "llama");
    put_key(b, "v.u8", T_U8); put_u8(b, 200);
    put_key(b, "v.i8", T_I8); put_u8(b, (uint8_t)-100);
    put_key(b, "v.u16", T_U16); put_u16(b, 60000);
    put_key(b, "v.i16", T_I16); put_u16(b, (uint16_t)-30000);
    put_key(b, "v.u32", T_U32); put_u32(b, 4000000000u);
    put_key(b, "v.i32", T_I32); put_u32(b, (uint32_t)-7);
    put_key(b, "v.f32", T_F32); put_f32(b, 1e-5f);
    put_key(b, "v.bool", T_BOOL);
    L->bool_value = b->n;
    put_u8(b, 1);
    put_key(b, "v.u64", T_U64); put_u64(b, 0xFEDCBA9876543210ull);
    put_key(b, "v.i64", T_I64); put_u64(b, (uint64_t)INT64_MIN);
    put_key(b, "v.f64", T_F64); put_f64(b, 0.1);
    put_key(b, "v.u64.small", T_U64); put_u64(b, 4096);
    put_key(b, "a.u8", T_ARR); put_u32(b, T_U8);
    L->u8_array_len = b->n;
    put_u64(b, 3); put_u8(b, 1); put_u8(b, 2); put_u8(b, 3);
    put_key(b, "a.f32", T_ARR); put_u32(b, T_F32); put_u64(b, 2);
    put_f32(b, 0.25f); put_f32(b, -8.5f);
    put_key(b, "a.i16", T_ARR); put_u32(b, T_I16); put_u64(b, 3);
    put_u16(b, 1); put_u16(b, (uint16_t)-2); put_u16(b, 3);
    put_key(b, "a.bool", T_ARR); put_u32(b, T_BOOL); put_u64(b, 2);
    put_u8(b, 0); put_u8(b, 1);
    put_key(b, "tokenizer.ggml.tokens", T_ARR); put_u32(b, T_STR); put_u64(b, 4);
    put_str(b, "<s>"); put_str(b, ""); put_str(b, "hello"); put_str(b, "\xc4\xa0world");
    /* [[10, 20], [30]] of i32, possibly wrapped in more single-element arrays. */
    put_key(b, "a.nested", T_ARR);
    for (int i = 0; i < o->extra_nesting; i++) { put_u32(b, T_ARR); put_u64(b, 1); }
    put_u32(b, T_ARR); put_u64(b, 2);
    put_u32(b, T_I32); put_u64(b, 2); put_u32(b, 10); put_u32(b, 20);
    put_u32(b, T_I32); put_u64(b, 1); put_u32(b, 30);
    put_key(b, "a.nested.str", T_ARR); put_u32(b, T_ARR); put_u64(b, 1);
    put_u32(b, T_STR); put_u64(b, 2); put_str(b, "x"); put_str(b, "yz");
    if (o->alignment) {
        put_key(b, "general.alignment", T_U32);
        L->alignment_value = b->n;
        put_u32(b, o->alignment);
    }
    if (o->dup_key) { put_key(b, "v.u8", T_U8); put_u8(b, 1); }

    /* Tensors: F32 [4 x 3], Q8_0 [64 x 2], F16 [8]. */
    const uint64_t dims[N_TENSORS][2] = {{4, 3}, {64, 2}, {8, 1}};
    const uint32_t ndims[N_TENSORS] = {2, 2, 1};
    const uint32_t types[N_TENSORS] = {G_F32, G_Q8_0, G_F16};
    const size_t nbytes[N_TENSORS] = {4 * 3 * 4, 2 * 2 * (2 + 32), 8 * 2};
    size_t align = o->alignment ? o->alignment : 32;
    uint64_t off = 0;
    for (int t = 0; t < N_TENSORS; t++) {
        put_str(b, o->dup_tensor && t == 2 ? k_names[0] : k_names[t]);
        put_u32(b, t == 0 && o->n_dims0 ? o->n_dims0 : ndims[t]);
        L->tensor_dim0[t] = b->n;
        for (uint32_t d = 0; d < (t == 0 && o->n_dims0 ? o->n_dims0 : ndims[t]); d++)
            put_u64(b, d < 2 ? dims[t][d] : 1);
        L->tensor_type[t] = b->n;
        put_u32(b, types[t]);
        L->tensor_offset[t] = b->n;
        put_u64(b, off);
        off += (nbytes[t] + align - 1) / align * align;
    }
    L->header_end = b->n;
    while (b->n % align) put_u8(b, 0);
    L->data_start = b->n;
    /* Tensor data: byte k of the section is k & 0xff, except that the f16
     * tensor holds 1.0 (0x3c00) everywhere and the q8_0 scales are 0.5. */
    size_t start = b->n;
    while (b->n - start < off) put_u8(b, (uint8_t)(b->n - start));
    uint64_t off1 = (nbytes[0] + align - 1) / align * align;
    uint64_t off2 = off1 + (nbytes[1] + align - 1) / align * align;
    for (int blk = 0; blk < 4; blk++) {
        uint16_t half = 0x3800; /* 0.5 */
        memcpy(b->p + start + off1 + blk * 34, &half, 2);
    }
    for (int i = 0; i < 8; i++) {
        uint16_t one = 0x3c00;
        memcpy(b->p + start + off2 + 2 * i, &one, 2);
    }
    L->data_end = start + off2 + nbytes[2];
}

static char g_dir[64];

static char *write_file(const char *name, const void *data, size_t n) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    return path;
}

/* Open must fail with `want` and a one-line message naming the file and
 * containing `needle` (when not NULL). */
static void expect_fail(const void *data, size_t n, spindle_status want,
                        const char *needle) {
    const char *path = write_file("bad.gguf", data, n);
    sp_gguf *g = (sp_gguf *)0x1;
    spindle_error err;
    memset(&err, 0, sizeof err);
    spindle_status st = sp_gguf_open(path, &g, &err);
    if (st != want || (needle && !strstr(err.message, needle)))
        fail_msg("size %zu: got status %d (%s), want %d with '%s'", n, st,
                 err.message, want, needle ? needle : "");
    assert_null(g);
    assert_non_null(strstr(err.message, path));
    assert_null(strchr(err.message, '\n'));
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/test_gguf_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/good.gguf", g_dir); unlink(path);
    snprintf(path, sizeof path, "%s/bad.gguf", g_dir); unlink(path);
    snprintf(path, sizeof path, "%s/model.gguf", g_dir); unlink(path);
    rmdir(g_dir);
    return 0;
}

/* ------------------------------------------------------------------- tests */

static sp_gguf *open_good(const opts *o, buf *b, layout *L) {
    build(o, b, L);
    const char *path = write_file("good.gguf", b->p, b->n);
    sp_gguf *g = NULL;
    spindle_error err;
    spindle_status st = sp_gguf_open(path, &g, &err);
    if (st) fail_msg("%s", err.message);
    return g;
}

static void test_scalars(void **state) {
    (void)state;
    buf b; layout L; opts o = {0};
    sp_gguf *g = open_good(&o, &b, &L);
    spindle_error err;
    assert_int_equal(sp_gguf_version(g), 3);
    assert_int_equal(sp_gguf_alignment(g), 32);
    assert_int_equal(sp_gguf_kv_count(g), 20);
    const char *key;
    assert_non_null(sp_gguf_kv_at(g, 0, &key));
    assert_string_equal(key, "general.architecture");
    assert_null(sp_gguf_kv_at(g, 20, &key));

    sp_gguf_str s;
    assert_int_equal(sp_gguf_get_string(g, "general.architecture", &s, &err), SPINDLE_OK);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.ptr, "llama", 5);

    uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; float f; bool bl;
    assert_int_equal(sp_gguf_get_u32(g, "v.u8", &u32, &err), SPINDLE_OK);
    assert_int_equal(u32, 200);
    assert_int_equal(sp_gguf_get_i32(g, "v.i8", &i32, &err), SPINDLE_OK);
    assert_int_equal(i32, -100);
    assert_int_equal(sp_gguf_get_u32(g, "v.u16", &u32, &err), SPINDLE_OK);
    assert_int_equal(u32, 60000);
    assert_int_equal(sp_gguf_get_i64(g, "v.i16", &i64, &err), SPINDLE_OK);
    assert_int_equal(i64, -30000);
    assert_int_equal(sp_gguf_get_u32(g, "v.u32", &u32, &err), SPINDLE_OK);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(sp_gguf_get_i32(g, "v.i32", &i32, &err), SPINDLE_OK);
    assert_int_equal(i32, -7);
    assert_int_equal(sp_gguf_get_u64(g, "v.u64", &u64, &err), SPINDLE_OK);
    assert_true(u64 == 0xFEDCBA9876543210ull);
    assert_int_equal(sp_gguf_get_i64(g, "v.i64", &i64, &err), SPINDLE_OK);
    assert_true(i64 == INT64_MIN);
    assert_int_equal(sp_gguf_get_u32(g, "v.u64.small", &u32, &err), SPINDLE_OK);
    assert_int_equal(u32, 4096);
    assert_int_equal(sp_gguf_get_f32(g, "v.f32", &f, &err), SPINDLE_OK);
    assert_true(f == 1e-5f);
    assert_int_equal(sp_gguf_get_bool(g, "v.bool", &bl, &err), SPINDLE_OK);
    assert_true(bl);

    /* Lossy or mismatched conversions are refused with the key named. */
    assert_int_equal(sp_gguf_get_i32(g, "v.u32", &i32, &err), SPINDLE_ERR_FORMAT);
    assert_non_null(strstr(err.message, "v.u32"));
    assert_int_equal(sp_gguf_get_u32(g, "v.i32", &u32, &err), SPINDLE_ERR_FORMAT);
    assert_int_equal(sp_gguf_get_u32(g, "v.u64", &u32, &err), SPINDLE_ERR_FORMAT);
    assert_int_equal(sp_gguf_get_i64(g, "v.u64", &i64, &err), SPINDLE_ERR_FORMAT);
    assert_int_equal(sp_gguf_get_u64(g, "v.i64", &u64, &err), SPINDLE_ERR_FORMAT);
    assert_int_equal(sp_gguf_get_f32(g, "v.f64", &f, &err), SPINDLE_ERR_FORMAT); /* 0.1 */
    assert_int_equal(sp_gguf_get_u32(g, "v.f32", &u32, &err), SPINDLE_ERR_FORMAT);
    assert_int_equal(sp_gguf_get_bool(g, "v.u8", &bl, &err), SPINDLE_ERR_FORMAT);
    assert_int_equal(sp_gguf_get_string(g, "v.u8", &s, &err), SPINDLE_ERR_FORMAT);
    assert_int_equal(sp_gguf_get_u32(g, "no.such.key", &u32, &err), SPINDLE_ERR_FORMAT);
    assert_non_null(strstr(err.message, "no.such.key"));
    assert_non_null(strstr(err.message, "good.gguf"));
    assert_null(sp_gguf_find(g, "no.such.key"));

    double d;
    assert_true(sp_gguf_value_f64(sp_gguf_find(g, "v.f64"), &d));
    assert_true(d == 0.1);
    sp_gguf_close(g);
    free(b.p);
}

static void test_arrays(void **state) {
    (void)state;
    buf b; layout L; opts o = {0};
    sp_gguf *g = open_good(&o, &b, &L);
    spindle_error err;
    const sp_gguf_value *a;
    sp_gguf_value e;
    int64_t iv;

    assert_int_equal(sp_gguf_get_array(g, "a.u8", SP_GGUF_U8, &a, &err), SPINDLE_OK);
    assert_int_equal(sp_gguf_array_count(a), 3);
    for (int i = 0; i < 3; i++) {
        assert_true(sp_gguf_array_at(a, (uint64_t)i, &e));
        assert_true(sp_gguf_value_i64(&e, &iv));
        assert_int_equal(iv, i + 1);
    }
    assert_false(sp_gguf_array_at(a, 3, &e));
    assert_int_equal(sp_gguf_get_array(g, "a.u8", SP_GGUF_STRING, &a, &err), SPINDLE_ERR_FORMAT);

    float fl[2];
    assert_int_equal(sp_gguf_array_to_f32(g, "a.f32", fl, 2, &err), SPINDLE_OK);
    assert_true(fl[0] == 0.25f && fl[1] == -8.5f);
    assert_int_equal(sp_gguf_array_to_f32(g, "a.f32", fl, 3, &err), SPINDLE_ERR_FORMAT);
    int32_t il[3];
    assert_int_equal(sp_gguf_array_to_i32(g, "a.i16", il, 3, &err), SPINDLE_OK);
    assert_true(il[0] == 1 && il[1] == -2 && il[2] == 3);
    assert_int_equal(sp_gguf_array_to_i32(g, "a.f32", il, 2, &err), SPINDLE_ERR_FORMAT);

    assert_int_equal(sp_gguf_get_array(g, "a.bool", SP_GGUF_BOOL, &a, &err), SPINDLE_OK);
    bool bl;
    assert_true(sp_gguf_array_at(a, 1, &e) && sp_gguf_value_bool(&e, &bl) && bl);

    const char *toks[4] = {"<s>", "", "hello", "\xc4\xa0world"};
    assert_int_equal(sp_gguf_get_array(g, "tokenizer.ggml.tokens", SP_GGUF_STRING, &a, &err),
                     SPINDLE_OK);
    assert_int_equal(sp_gguf_array_count(a), 4);
    for (int i = 0; i < 4; i++) {
        sp_gguf_str s;
        assert_true(sp_gguf_array_str(a, (uint64_t)i, &s));
        assert_int_equal(s.len, strlen(toks[i]));
        assert_memory_equal(s.ptr, toks[i], s.len);
    }

    /* [[10, 20], [30]] */
    assert_int_equal(sp_gguf_get_array(g, "a.nested", SP_GGUF_ARRAY, &a, &err), SPINDLE_OK);
    assert_int_equal(sp_gguf_array_count(a), 2);
    sp_gguf_value inner;
    assert_true(sp_gguf_array_at(a, 0, &inner));
    assert_int_equal(sp_gguf_array_type(&inner), SP_GGUF_I32);
    assert_int_equal(sp_gguf_array_count(&inner), 2);
    assert_true(sp_gguf_array_at(&inner, 1, &e) && sp_gguf_value_i64(&e, &iv));
    assert_int_equal(iv, 20);
    assert_true(sp_gguf_array_at(a, 1, &inner));
    assert_true(sp_gguf_array_at(&inner, 0, &e) && sp_gguf_value_i64(&e, &iv));
    assert_int_equal(iv, 30);
    assert_int_equal(sp_gguf_get_array(g, "a.nested.str", SP_GGUF_ARRAY, &a, &err), SPINDLE_OK);
    assert_true(sp_gguf_array_at(a, 0, &inner));
    sp_gguf_str s;
    assert_true(sp_gguf_array_str(&inner, 1, &s));
    assert_int_equal(s.len, 2);
    assert_memory_equal(s.ptr, "yz", 2);
    sp_gguf_close(g);
    free(b.p);
}

static void test_tensors(void **state) {
    (void)state;
    buf b; layout L;
    uint32_t aligns[2] = {0, 64};
    for (int k = 0; k < 2; k++) {
        opts o = {.alignment = aligns[k]};
        sp_gguf *g = open_good(&o, &b, &L);
        size_t align = aligns[k] ? aligns[k] : 32;
        assert_int_equal(sp_gguf_alignment(g), align);
        assert_int_equal(sp_gguf_data_offset(g), L.data_start);
        assert_int_equal(sp_gguf_data_offset(g) % align, 0);
        assert_int_equal(sp_gguf_tensor_count(g), N_TENSORS);
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, 0);
        assert_string_equal(t->name, "tok_embd.weight");
        assert_int_equal(t->type, 0);
        assert_int_equal(t->n_dims, 2);
        assert_true(t->ne[0] == 4 && t->ne[1] == 3 && t->ne[2] == 1 && t->ne[3] == 1);
        assert_int_equal(t->nbytes, 4 * 3 * 4);
        /* Data is the bytes written at the data section start. */
        assert_memory_equal(t->data, b.p + L.data_start, t->nbytes);

        const sp_gguf_tensor *q = sp_gguf_find_tensor(g, "blk.0.attn_q.weight");
        assert_non_null(q);
        assert_ptr_equal(q, sp_gguf_tensor_at(g, 1));
        assert_int_equal(q->type, 8);
        assert_int_equal(q->nbytes, 2 * 2 * (2 + 32)); /* 2 rows of 2 Q8_0 blocks */
        assert_int_equal(sp_gguf_tensor_nelements(q), 128);
        assert_int_equal(q->offset % align, 0);
        assert_memory_equal(q->data, b.p + L.data_start + q->offset, q->nbytes);

        const sp_gguf_tensor *n = sp_gguf_find_tensor(g, "output_norm");
        assert_int_equal(n->n_dims, 1);
        assert_int_equal(n->nbytes, 16);
        assert_null(sp_gguf_find_tensor(g, "missing"));
        assert_null(sp_gguf_tensor_at(g, 3));
        sp_gguf_close(g);
        free(b.p);
    }
}

static void test_truncated_everywhere(void **state) {
    (void)state;
    buf b; layout L; opts o = {0};
    build(&o, &b, &L);
    /* Every proper prefix is invalid: the header parse runs out of bytes (or
     * a count or length no longer fits), or a tensor's data is cut off. */
    for (size_t n = 0; n < L.data_end; n++)
        expect_fail(b.p, n, SPINDLE_ERR_FORMAT, NULL);
    /* Trailing padding after the last tensor is optional. */
    for (size_t n = L.data_end; n <= b.n; n++) {
        sp_gguf *g;
        spindle_error err;
        const char *path = write_file("good.gguf", b.p, n);
        if (sp_gguf_open(path, &g, &err)) fail_msg("size %zu: %s", n, err.message);
        sp_gguf_close(g);
    }
    free(b.p);
}

static void patch_u64(buf *b, size_t at, uint64_t v) { memcpy(b->p + at, &v, 8); }
static void patch_u32(buf *b, size_t at, uint32_t v) { memcpy(b->p + at, &v, 4); }

static void test_corruptions(void **state) {
    (void)state;
    buf b; layout L; opts o = {0};
    build(&o, &b, &L);
    buf c = {malloc(b.n), b.n, b.n};
#define RESET() memcpy(c.p, b.p, b.n)

    RESET(); c.p[0] = 'X';
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "magic");
    RESET(); patch_u32(&c, L.version, 1);
    expect_fail(c.p, c.n, SPINDLE_ERR_UNSUPPORTED, "version 1");
    RESET(); patch_u32(&c, L.version, 4);
    expect_fail(c.p, c.n, SPINDLE_ERR_UNSUPPORTED, "version 4");
    RESET(); patch_u32(&c, L.version, 3u << 24);
    expect_fail(c.p, c.n, SPINDLE_ERR_UNSUPPORTED, "big-endian");
    RESET(); patch_u64(&c, L.n_tensors, 1ull << 60);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "tensor count");
    RESET(); patch_u64(&c, L.n_kv, UINT64_MAX);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "metadata count");
    RESET(); patch_u64(&c, L.n_kv, 21); /* one more than present: runs into tensors */
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, NULL);
    RESET(); patch_u64(&c, L.first_key_len, 1ull << 62);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "string length");
    RESET(); patch_u64(&c, L.str_len, UINT64_MAX);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "general.architecture");
    RESET(); patch_u64(&c, L.u8_array_len, 1ull << 61);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "array length");
    RESET(); c.p[L.bool_value] = 2;
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "v.bool");
    RESET(); patch_u32(&c, L.bool_value - 4, 13); /* value type 13 does not exist */
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "unknown value type 13");
    RESET(); patch_u32(&c, L.u8_array_len - 4, 99);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "element type 99");

    RESET(); patch_u64(&c, L.tensor_offset[2], 1ull << 40);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "output_norm");
    RESET(); patch_u64(&c, L.tensor_offset[2], 64 * 32);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "past the end");
    RESET(); patch_u64(&c, L.tensor_dim0[1] + 8, 1ull << 40);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "blk.0.attn_q.weight");
    RESET(); patch_u64(&c, L.tensor_dim0[1], 1ull << 63);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "dimension");
    RESET(); patch_u64(&c, L.tensor_dim0[1], 1ull << 62);
    patch_u64(&c, L.tensor_dim0[1] + 8, 1ull << 62);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "overflow");
    RESET(); patch_u64(&c, L.tensor_dim0[1], 48); /* not a multiple of 32 */
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "block size");
    RESET(); patch_u64(&c, L.tensor_offset[1], 16);
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "alignment");
    RESET(); patch_u64(&c, L.tensor_offset[1], 0); /* on top of tensor 0 */
    expect_fail(c.p, c.n, SPINDLE_ERR_FORMAT, "overlap");
    RESET(); patch_u32(&c, L.tensor_type[1], 200);
    expect_fail(c.p, c.n, SPINDLE_ERR_UNSUPPORTED, "'blk.0.attn_q.weight': unknown ggml type 200");
    RESET(); patch_u32(&c, L.tensor_type[1], 16); /* IQ2_XXS: known, not loadable */
    patch_u64(&c, L.tensor_dim0[1], 256);
    patch_u64(&c, L.tensor_dim0[1] + 8, 1);
    expect_fail(c.p, c.n, SPINDLE_ERR_UNSUPPORTED, "IQ2_XXS (16)");
    free(c.p);
    free(b.p);

    /* Alignments that are not a power of two, or absurdly large. */
    opts o64 = {.alignment = 64};
    build(&o64, &b, &L);
    uint32_t bad_align[] = {0, 3, 48, 0x80000000u};
    for (size_t i = 0; i < 4; i++) {
        patch_u32(&b, L.alignment_value, bad_align[i]);
        expect_fail(b.p, b.n, SPINDLE_ERR_FORMAT, "general.alignment");
    }
    free(b.p);

    opts variants[] = {{.dup_key = true}, {.dup_tensor = true}, {.extra_nesting = 7},
                       {.n_dims0 = 5}};
    const char *needles[] = {"duplicate key", "duplicate tensor", "nested", "5 dimensions"};
    spindle_status want[] = {SPINDLE_ERR_FORMAT, SPINDLE_ERR_FORMAT, SPINDLE_ERR_LIMIT,
                             SPINDLE_ERR_FORMAT};
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        build(&variants[i], &b, &L);
        expect_fail(b.p, b.n, want[i], needles[i]);
        free(b.p);
    }
    /* Nesting just under the limit is fine; 4 dims is fine. */
    opts ok[] = {{.extra_nesting = 6}, {.n_dims0 = 4}};
    for (size_t i = 0; i < 2; i++) {
        sp_gguf *g = open_good(&ok[i], &b, &L);
        assert_non_null(g);
        sp_gguf_close(g);
        free(b.p);
    }
}

static void test_missing_file(void **state) {
    (void)state;
    sp_gguf *g;
    spindle_error err;
    assert_int_equal(sp_gguf_open("/nonexistent/x.gguf", &g, &err), SPINDLE_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(err.message, "/nonexistent/x.gguf"));
    sp_gguf_close(NULL);
}

/* ------------------------------------------------- model metadata -> config */

/* Metadata entries under construction, counted. */
typedef struct kvs {
    buf b;
    uint64_t n;
} kvs;

static void kv_u32(kvs *m, const char *key, uint32_t v) { put_key(&m->b, key, T_U32); put_u32(&m->b, v); m->n++; }
static void kv_u16(kvs *m, const char *key, uint16_t v) { put_key(&m->b, key, T_U16); put_u16(&m->b, v); m->n++; }
static void kv_u8(kvs *m, const char *key, uint8_t v) { put_key(&m->b, key, T_U8); put_u8(&m->b, v); m->n++; }
static void kv_i64(kvs *m, const char *key, int64_t v) { put_key(&m->b, key, T_I64); put_u64(&m->b, (uint64_t)v); m->n++; }
static void kv_f32(kvs *m, const char *key, float v) { put_key(&m->b, key, T_F32); put_f32(&m->b, v); m->n++; }
static void kv_f64(kvs *m, const char *key, double v) { put_key(&m->b, key, T_F64); put_f64(&m->b, v); m->n++; }
static void kv_bool(kvs *m, const char *key, bool v) { put_key(&m->b, key, T_BOOL); put_u8(&m->b, v); m->n++; }
static void kv_str(kvs *m, const char *key, const char *v) { put_key(&m->b, key, T_STR); put_str(&m->b, v); m->n++; }

#define MODEL_HIDDEN 8
#define MODEL_VOCAB 4

/* A Llama GGUF with hidden size 8, one layer, the caller's extra metadata
 * and one tensor, token_embd.weight (F32 [4][8]): what the metadata ->
 * config translation reads. `heads` is attention.head_count. */
static const char *model_file(const kvs *extra, uint32_t heads) {
    kvs m = {0};
    kv_str(&m, "general.architecture", "llama");
    kv_u32(&m, "llama.embedding_length", MODEL_HIDDEN);
    kv_u32(&m, "llama.block_count", 1);
    kv_u32(&m, "llama.attention.head_count", heads);
    put(&m.b, extra->b.p, extra->b.n);
    m.n += extra->n;
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 1);
    put_u64(&b, m.n);
    put(&b, m.b.p, m.b.n);
    put_str(&b, "token_embd.weight");
    put_u32(&b, 2);
    put_u64(&b, MODEL_HIDDEN);
    put_u64(&b, MODEL_VOCAB);
    put_u32(&b, G_F32);
    put_u64(&b, 0);
    while (b.n % 32) put_u8(&b, 0);
    for (int i = 0; i < MODEL_HIDDEN * MODEL_VOCAB; i++) put_f32(&b, 0.5f);
    const char *path = write_file("model.gguf", b.p, b.n);
    free(b.p);
    free(m.b.p);
    return path;
}

/* Translate the file's metadata; on failure err says why. */
static spindle_status model_config(const kvs *extra, uint32_t heads,
                                   sp_model_config *cfg, spindle_error *err) {
    sp_gguf_weights *w = NULL;
    memset(err, 0, sizeof *err);
    spindle_status st = sp_gguf_weights_open(model_file(extra, heads),
                                             sp_gguf_families(), &w, err);
    if (!st) st = sp_gguf_model_config(w, cfg, err);
    sp_gguf_weights_free(w);
    return st;
}

static void expect_config_fail(const kvs *extra, uint32_t heads,
                               const char *needle) {
    sp_model_config cfg;
    spindle_error err;
    spindle_status st = model_config(extra, heads, &cfg, &err);
    if (st != SPINDLE_ERR_FORMAT || !strstr(err.message, needle))
        fail_msg("got status %d (%s), want a format error with '%s'", st,
                 err.message, needle);
    assert_null(strchr(err.message, '\n'));
}

/* More heads than embedding dimensions made the derived head size 0 and
 * rope.dimension_count / head_dim infinite (then converted to int). */
static void test_config_zero_head_dim(void **state) {
    (void)state;
    kvs m = {0};
    kv_u32(&m, "llama.feed_forward_length", 16);
    kv_u32(&m, "llama.rope.dimension_count", 8);
    expect_config_fail(&m, 2 * MODEL_HIDDEN, "attention.head_count 16 exceeds");
    free(m.b.p);
    /* The same heads with an explicit head size are fine. */
    kvs ok = {0};
    kv_u32(&ok, "llama.feed_forward_length", 16);
    kv_u32(&ok, "llama.attention.key_length", 4);
    sp_model_config cfg;
    spindle_error err;
    if (model_config(&ok, 2 * MODEL_HIDDEN, &cfg, &err)) fail_msg("%s", err.message);
    assert_int_equal(cfg.head_dim, 4);
    sp_config_free(&cfg);
    free(ok.b.p);
    kvs odd = {0};
    kv_u32(&odd, "llama.feed_forward_length", 16);
    kv_u32(&odd, "llama.rope.dimension_count", 3);
    expect_config_fail(&odd, 2, "rope.dimension_count 3 must be even");
    free(odd.b.p);
}

/* llama.cpp writes some numbers as integers (original_context_length as
 * u32): every numeric type reads as a number, bool does not. */
static void test_config_numeric_types(void **state) {
    (void)state;
    kvs m = {0};
    kv_f32(&m, "llama.feed_forward_length", 16.0f);      /* an integral f32 */
    kv_u16(&m, "llama.context_length", 4096);
    kv_str(&m, "llama.rope.scaling.type", "yarn");
    kv_f32(&m, "llama.rope.scaling.factor", 4.0f);
    kv_u32(&m, "llama.rope.scaling.original_context_length", 2048);
    kv_i64(&m, "llama.rope.scaling.yarn_beta_fast", 16);
    kv_u8(&m, "llama.rope.scaling.yarn_beta_slow", 2);
    kv_u32(&m, "llama.rope.freq_base", 500000);
    kv_f64(&m, "llama.attention.layer_norm_rms_epsilon", 1e-5);
    sp_model_config cfg;
    spindle_error err;
    if (model_config(&m, 2, &cfg, &err)) fail_msg("%s", err.message);
    assert_int_equal(cfg.intermediate_size, 16);
    assert_int_equal(cfg.max_position, 4096);
    assert_int_equal(cfg.rope.type, SP_ROPE_YARN);
    assert_int_equal(cfg.rope.original_max_position, 2048);
    assert_true(cfg.rope.factor == 4.0);
    assert_true(cfg.rope.beta_fast == 16.0 && cfg.rope.beta_slow == 2.0);
    assert_true(cfg.rope.theta == 500000.0);
    assert_true(cfg.rms_norm_eps == 1e-5f);
    sp_config_free(&cfg);
    free(m.b.p);

    kvs flag = {0};
    kv_u32(&flag, "llama.feed_forward_length", 16);
    kv_bool(&flag, "llama.rope.freq_base", true);
    expect_config_fail(&flag, 2, "'llama.rope.freq_base' is not a number");
    free(flag.b.p);
    kvs frac = {0};
    kv_f32(&frac, "llama.feed_forward_length", 16.5f);
    expect_config_fail(&frac, 2, "'llama.feed_forward_length' is invalid");
    free(frac.b.p);
    kvs bcount = {0};
    kv_bool(&bcount, "llama.feed_forward_length", true);
    expect_config_fail(&bcount, 2, "'llama.feed_forward_length' is invalid");
    free(bcount.b.p);
}

/* config.json: the same dimensions, and doubles that must not reach an
 * int conversion. */
static void expect_json_fail(const char *json, const char *needle) {
    sp_model_config cfg;
    spindle_error err;
    memset(&err, 0, sizeof err);
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    spindle_status st = sp_config_from_json(root, "config.json", &cfg, &err);
    if (st != SPINDLE_ERR_FORMAT || !strstr(err.message, needle))
        fail_msg("%s: got status %d (%s), want a format error with '%s'",
                 json, st, err.message, needle);
}

#define JSON_DIMS(heads) \
    "{\"model_type\":\"llama\",\"hidden_size\":8,\"num_hidden_layers\":1," \
    "\"intermediate_size\":16,\"vocab_size\":4,\"num_attention_heads\":" #heads

static void test_config_json_dims(void **state) {
    (void)state;
    expect_json_fail(JSON_DIMS(16) "}", "num_attention_heads (16) exceeds hidden_size (8)");
    expect_json_fail(JSON_DIMS(16) ",\"partial_rotary_factor\":1e300}",
                     "num_attention_heads (16) exceeds");
    expect_json_fail(JSON_DIMS(2) ",\"partial_rotary_factor\":1e300}",
                     "partial_rotary_factor must be in (0, 1]");
    expect_json_fail(JSON_DIMS(2) ",\"rope_scaling\":{\"type\":\"llama3\","
                     "\"factor\":8,\"original_max_position_embeddings\":1e300}}",
                     "original_max_position_embeddings must be an integer");
    expect_json_fail(JSON_DIMS(2) ",\"quantization\":{\"bits\":1e300,"
                     "\"group_size\":64}}",
                     "positive integer 'bits'");
    sp_model_config cfg;
    spindle_error err;
    cJSON *root = cJSON_Parse(JSON_DIMS(2) ",\"partial_rotary_factor\":0.5}");
    if (sp_config_from_json(root, "config.json", &cfg, &err)) fail_msg("%s", err.message);
    assert_int_equal(cfg.head_dim, 4);
    assert_int_equal(cfg.rope.rotary_dim, 2);
    sp_config_free(&cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_tensors),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_corruptions),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_config_zero_head_dim),
        cmocka_unit_test(test_config_numeric_types),
        cmocka_unit_test(test_config_json_dims),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
