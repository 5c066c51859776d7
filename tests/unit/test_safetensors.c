/* Safetensors reader: valid files, sharded directories, and one malformed
 * file per validation rule. Files are written here byte by byte, so every
 * expected dtype, shape and payload is the one the test itself put there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifacts/safetensors.h"

/* ------------------------------------------------------------ helpers */

static char g_root[256];
static int g_seq;

static int rm_entry(const char *p, const struct stat *s, int f, struct FTW *w) {
    (void)s; (void)f; (void)w;
    return remove(p);
}

static int setup_root(void **state) {
    (void)state;
    snprintf(g_root, sizeof g_root, "%s/sp_st_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(g_root) ? 0 : -1;
}

static int teardown_root(void **state) {
    (void)state;
    return nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh directory for one case; the caller frees the path. */
static char *new_dir(void) {
    char *d = malloc(512);
    assert_non_null(d);
    snprintf(d, 512, "%s/case%d", g_root, g_seq++);
    assert_int_equal(mkdir(d, 0755), 0);
    return d;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void write_raw(const char *dir, const char *name, const void *bytes,
                      size_t n) {
    char *p = join(dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    free(p);
}

/* u64 LE header length, the header, then `data`. */
static void write_st(const char *dir, const char *name, const char *header,
                     const void *data, size_t n) {
    size_t h = strlen(header);
    unsigned char *buf = malloc(8 + h + n + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    if (n) memcpy(buf + 8 + h, data, n);
    write_raw(dir, name, buf, 8 + h + n);
    free(buf);
}

static const unsigned char ZEROS[4096];

/* ------------------------------------------------------------ valid files */

static void check_shape(const sp_tensor_info *t, int ndim, const int64_t *s) {
    assert_int_equal(t->ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(t->shape[i], s[i]);
}

static void test_valid_single_file(void **state) {
    (void)state;
    char *dir = new_dir();
    unsigned char data[96];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 1);
    /* Out of offset order, with a 4-byte gap at 64..68 (writers may pad), a
     * scalar, an empty tensor inside another's range, and trailing spaces. */
    const char *header =
        "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"h\\u00e9\"},"
        "\"b.f16\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
        "\"a.f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"c.bf16\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[32,40]},"
        "\"d.i64\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[40,48]},"
        "\"e.u8\":{\"dtype\":\"U8\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
        "\"f.bool\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[48,51]},"
        "\"g.i8\":{\"dtype\":\"I8\",\"shape\":[13],\"data_offsets\":[51,64]},"
        "\"h.f64\":{\"dtype\":\"F64\",\"shape\":[1,1,1],\"data_offsets\":[68,76]},"
        "\"i.u16\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[76,80]},"
        "\"j.i32\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[80,84]},"
        "\"k.u32\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[84,88]},"
        "\"l.u64\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[88,96]},"
        "\"m.i16\":{\"dtype\":\"I16\",\"shape\":[0],\"data_offsets\":[96,96]}"
        "}      ";
    write_st(dir, "w.safetensors", header, data, sizeof data);
    char *path = join(dir, "w.safetensors");
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_safetensors_open_file(path, &set, &err), SPINDLE_OK);
    assert_int_equal(sp_tensor_set_count(set), 13);

    static const struct {
        const char *name;
        sp_dtype dtype;
        int ndim;
        int64_t shape[3];
        size_t begin, end;
    } want[] = {
        {"a.f32", SP_DTYPE_F32, 2, {2, 3}, 0, 24},
        {"b.f16", SP_DTYPE_F16, 1, {4}, 24, 32},
        {"c.bf16", SP_DTYPE_BF16, 2, {2, 2}, 32, 40},
        {"d.i64", SP_DTYPE_I64, 0, {0}, 40, 48},
        {"e.u8", SP_DTYPE_U8, 2, {3, 0}, 4, 4},
        {"f.bool", SP_DTYPE_BOOL, 1, {3}, 48, 51},
        {"g.i8", SP_DTYPE_I8, 1, {13}, 51, 64},
        {"h.f64", SP_DTYPE_F64, 3, {1, 1, 1}, 68, 76},
        {"i.u16", SP_DTYPE_U16, 1, {2}, 76, 80},
        {"j.i32", SP_DTYPE_I32, 1, {1}, 80, 84},
        {"k.u32", SP_DTYPE_U32, 1, {1}, 84, 88},
        {"l.u64", SP_DTYPE_U64, 1, {1}, 88, 96},
        {"m.i16", SP_DTYPE_I16, 1, {0}, 96, 96},
    };
    const unsigned char *base = sp_tensor_set_find(set, "a.f32")->data;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const sp_tensor_info *t = sp_tensor_set_find(set, want[i].name);
        assert_non_null(t);
        assert_string_equal(t->name, want[i].name);
        assert_int_equal(t->dtype, want[i].dtype);
        check_shape(t, want[i].ndim, want[i].shape);
        assert_int_equal(t->nbytes, want[i].end - want[i].begin);
        assert_ptr_equal((const unsigned char *)t->data, base + want[i].begin);
        assert_memory_equal(t->data, data + want[i].begin, t->nbytes);
        assert_string_equal(t->file, path);
        /* Iteration is in name order, the order of `want`. */
        assert_ptr_equal(sp_tensor_set_at(set, i), t);
    }
    assert_null(sp_tensor_set_at(set, 13));
    assert_null(sp_tensor_set_find(set, "a.f3"));
    assert_null(sp_tensor_set_find(set, "zzz"));
    assert_null(sp_tensor_set_find(set, "__metadata__"));
    assert_string_equal(sp_tensor_set_metadata(set, "format"), "pt");
    assert_string_equal(sp_tensor_set_metadata(set, "note"), "h\xc3\xa9");
    assert_null(sp_tensor_set_metadata(set, "missing"));
    sp_tensor_set_free(set);
    free(path);
    free(dir);
}

/* Models have thousands of tensors: every one must be found by name. */
static void test_many_tensors_lookup(void **state) {
    (void)state;
    enum { N = 2000 };
    char *dir = new_dir();
    size_t cap = N * 96 + 16, len = 0;
    char *h = malloc(cap);
    assert_non_null(h);
    len += (size_t)snprintf(h + len, cap - len, "{");
    /* Reverse offset order so that neither sort order matches the header's. */
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(h + len, cap - len,
                                "%s\"t.%d\":{\"dtype\":\"U16\",\"shape\":[1],"
                                "\"data_offsets\":[%d,%d]}",
                                i ? "," : "", i, 2 * (N - 1 - i), 2 * (N - i));
    snprintf(h + len, cap - len, "}");
    uint16_t *data = malloc(N * sizeof *data);
    assert_non_null(data);
    for (int i = 0; i < N; i++) data[N - 1 - i] = (uint16_t)(i * 31 + 5);
    write_st(dir, "model.safetensors", h, data, N * sizeof *data);
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_safetensors_open_dir(dir, &set, &err), SPINDLE_OK);
    assert_int_equal(sp_tensor_set_count(set), N);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "t.%d", i);
        const sp_tensor_info *t = sp_tensor_set_find(set, name);
        assert_non_null(t);
        uint16_t v;
        memcpy(&v, t->data, 2);
        assert_int_equal(v, (uint16_t)(i * 31 + 5));
    }
    sp_tensor_set_free(set);
    free(data);
    free(h);
    free(dir);
}

static const char *SHARD1 =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"x.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"y.weight\":{\"dtype\":\"BF16\",\"shape\":[2,1],\"data_offsets\":[8,12]}}";
static const char *SHARD2 =
    "{\"z.weight\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
static const char *INDEX_OK =
    "{\"metadata\":{\"total_size\":18},\"weight_map\":{"
    "\"x.weight\":\"model-00001-of-00002.safetensors\","
    "\"y.weight\":\"model-00001-of-00002.safetensors\","
    "\"z.weight\":\"model-00002-of-00002.safetensors\"}}";

static void write_sharded(const char *dir, const char *index) {
    const unsigned char d1[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const unsigned char d2[6] = {21, 22, 23, 24, 25, 26};
    write_st(dir, "model-00001-of-00002.safetensors", SHARD1, d1, sizeof d1);
    write_st(dir, "model-00002-of-00002.safetensors", SHARD2, d2, sizeof d2);
    if (index)
        write_raw(dir, "model.safetensors.index.json", index, strlen(index));
}

static void check_sharded_set(const sp_tensor_set *set) {
    assert_int_equal(sp_tensor_set_count(set), 3);
    const sp_tensor_info *x = sp_tensor_set_find(set, "x.weight");
    const sp_tensor_info *y = sp_tensor_set_find(set, "y.weight");
    const sp_tensor_info *z = sp_tensor_set_find(set, "z.weight");
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(z);
    assert_non_null(strstr(x->file, "/model-00001-of-00002.safetensors"));
    assert_ptr_equal(x->file, y->file);
    assert_non_null(strstr(z->file, "/model-00002-of-00002.safetensors"));
    assert_int_equal(((const unsigned char *)y->data)[0], 9);
    assert_int_equal(((const unsigned char *)z->data)[5], 26);
    assert_int_equal(z->dtype, SP_DTYPE_F16);
    int64_t ys[2] = {2, 1};
    check_shape(y, 2, ys);
    assert_string_equal(sp_tensor_set_metadata(set, "format"), "pt");
}

static void test_sharded_with_index(void **state) {
    (void)state;
    char *dir = new_dir();
    write_sharded(dir, INDEX_OK);
    /* A stray file the index does not name is not read. */
    write_raw(dir, "junk.safetensors", "xx", 2);
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_safetensors_open_dir(dir, &set, &err), SPINDLE_OK);
    check_sharded_set(set);
    sp_tensor_set_free(set);
    free(dir);
}

static void test_sharded_without_index(void **state) {
    (void)state;
    char *dir = new_dir();
    write_sharded(dir, NULL);
    write_raw(dir, "notes.txt", "hello", 5);
    write_raw(dir, ".hidden.safetensors", "xx", 2);
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_safetensors_open_dir(dir, &set, &err), SPINDLE_OK);
    check_sharded_set(set);
    sp_tensor_set_free(set);
    free(dir);
}

/* ------------------------------------------------------------ malformed */

/* The open must fail with `status`, leave *out NULL, and say so in one line
 * that names `file` and, when given, `tensor`. */
static void expect_fail(spindle_status got, const sp_tensor_set *set,
                        const spindle_error *err, spindle_status status,
                        const char *file, const char *tensor) {
    if (got != status)
        fail_msg("status %d, want %d: %s", got, status, err->message);
    assert_int_equal(err->status, status);
    assert_null(set);
    assert_null(strchr(err->message, '\n'));
    if (!strstr(err->message, file))
        fail_msg("message does not name %s: %s", file, err->message);
    if (tensor) {
        char quoted[128];
        snprintf(quoted, sizeof quoted, "'%s'", tensor);
        if (!strstr(err->message, quoted))
            fail_msg("message does not name %s: %s", quoted, err->message);
    }
}

typedef struct bad_header {
    const char *header;
    spindle_status status;
    const char *tensor; /* must appear quoted in the message, or NULL */
} bad_header;

/* Each header comes with 16 bytes of data. */
static const bad_header BAD_HEADERS[] = {
    {"", SPINDLE_ERR_FORMAT, NULL},
    {"{\"a\":", SPINDLE_ERR_FORMAT, NULL},
    {"{\"a\":{}} x", SPINDLE_ERR_FORMAT, NULL},
    {"[1,2]", SPINDLE_ERR_FORMAT, NULL},
    {"\"str\"", SPINDLE_ERR_FORMAT, NULL},
    {"{\"t\":5}", SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":[]}", SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_UNSUPPORTED, "t"},
    {"{\"t\":{\"dtype\":\"F8_E5M2\",\"shape\":[4],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_UNSUPPORTED, "t"},
    /* shape */
    {"{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", SPINDLE_ERR_FORMAT,
     "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
     "\"data_offsets\":[0,1]}}", SPINDLE_ERR_UNSUPPORTED, "t"},
    /* element count 2^96, and 2^62 elements whose byte size wraps */
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],"
     "\"data_offsets\":[0,0]}}", SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F64\",\"shape\":[2147483648,2147483648],"
     "\"data_offsets\":[0,0]}}", SPINDLE_ERR_FORMAT, "t"},
    /* data_offsets */
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"a\":1}}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[14,18]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
     "\"data_offsets\":[0,18446744073709551615]}}", SPINDLE_ERR_FORMAT, "t"},
    /* byte range does not match shape x dtype */
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
     SPINDLE_ERR_FORMAT, "t"},
    {"{\"t\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     SPINDLE_ERR_FORMAT, "t"},
    /* overlap: u starts inside t */
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     SPINDLE_ERR_FORMAT, "u"},
    {"{\"u\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]},"
     "\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
     SPINDLE_ERR_FORMAT, "u"},
    {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     SPINDLE_ERR_FORMAT, "t"},
    /* metadata */
    {"{\"__metadata__\":[1]}", SPINDLE_ERR_FORMAT, NULL},
    {"{\"__metadata__\":{\"k\":1}}", SPINDLE_ERR_FORMAT, "k"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", SPINDLE_ERR_FORMAT, NULL},
    /* not UTF-8 / NUL inside the header */
    {"{\"t\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
     SPINDLE_ERR_FORMAT, NULL},
    {"{\"t\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[1],"
     "\"data_offsets\":[0,1]}}", SPINDLE_ERR_FORMAT, NULL},
};

static void test_bad_headers(void **state) {
    (void)state;
    char *dir = new_dir();
    for (size_t i = 0; i < sizeof BAD_HEADERS / sizeof BAD_HEADERS[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad%02zu.safetensors", i);
        write_st(dir, name, BAD_HEADERS[i].header, ZEROS, 16);
        char *path = join(dir, name);
        sp_tensor_set *set = NULL;
        spindle_error err = {0};
        spindle_status st = sp_safetensors_open_file(path, &set, &err);
        expect_fail(st, set, &err, BAD_HEADERS[i].status, name,
                    BAD_HEADERS[i].tensor);
        free(path);
    }
    free(dir);
}

static void open_raw_expect(const char *dir, const char *name,
                            const void *bytes, size_t n,
                            spindle_status status) {
    write_raw(dir, name, bytes, n);
    char *path = join(dir, name);
    sp_tensor_set *set = (sp_tensor_set *)1; /* must be reset to NULL */
    spindle_error err = {0};
    spindle_status st = sp_safetensors_open_file(path, &set, &err);
    expect_fail(st, set, &err, status, name, NULL);
    free(path);
}

static void test_bad_framing(void **state) {
    (void)state;
    char *dir = new_dir();
    open_raw_expect(dir, "empty.safetensors", "", 0, SPINDLE_ERR_FORMAT);
    open_raw_expect(dir, "short.safetensors", "\x02\0\0\0\0", 5,
                    SPINDLE_ERR_FORMAT);
    /* Header length 100 in a 10-byte file. */
    open_raw_expect(dir, "pasteof.safetensors", "\x64\0\0\0\0\0\0\0{}", 10,
                    SPINDLE_ERR_FORMAT);
    /* Header length 2^64 - 1. */
    open_raw_expect(dir, "huge.safetensors",
                    "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10,
                    SPINDLE_ERR_FORMAT);
    /* A NUL inside the header (cJSON would stop at it). */
    open_raw_expect(dir, "nul.safetensors", "\x04\0\0\0\0\0\0\0{}\0 ", 12,
                    SPINDLE_ERR_FORMAT);
    /* A header length above the bound inside a file that really is that
     * long: a sparse file costs no disk. */
    char *path = join(dir, "big.safetensors");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const uint64_t hlen = 200000000ull;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hlen >> (8 * i));
    assert_int_equal(fwrite(le, 1, 8, f), 8);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(truncate(path, (off_t)(hlen + 8)), 0);
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    spindle_status st = sp_safetensors_open_file(path, &set, &err);
    expect_fail(st, set, &err, SPINDLE_ERR_LIMIT, "big.safetensors", NULL);
    free(path);
    /* Missing file, and a directory where a file is expected. */
    path = join(dir, "absent.safetensors");
    st = sp_safetensors_open_file(path, &set, &err);
    expect_fail(st, set, &err, SPINDLE_ERR_IO, "absent.safetensors", NULL);
    free(path);
    st = sp_safetensors_open_file(dir, &set, &err);
    expect_fail(st, set, &err, SPINDLE_ERR_IO, dir, NULL);
    free(dir);
}

/* Write the two good shards plus `index`, open the directory, and expect
 * failure naming `file` (and `tensor`). */
static void expect_dir_fail(const char *index, spindle_status status,
                            const char *file, const char *tensor) {
    char *dir = new_dir();
    write_sharded(dir, index);
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    spindle_status st = sp_safetensors_open_dir(dir, &set, &err);
    expect_fail(st, set, &err, status, file, tensor);
    free(dir);
}

static void test_bad_index(void **state) {
    (void)state;
    const char *IDX = "model.safetensors.index.json";
    expect_dir_fail("{\"weight_map\":", SPINDLE_ERR_FORMAT, IDX, NULL);
    expect_dir_fail("[]", SPINDLE_ERR_FORMAT, IDX, NULL);
    expect_dir_fail("{\"metadata\":{}}", SPINDLE_ERR_FORMAT, IDX, NULL);
    expect_dir_fail("{\"weight_map\":{}}", SPINDLE_ERR_FORMAT, IDX, NULL);
    expect_dir_fail("{\"weight_map\":{\"x.weight\":3}}", SPINDLE_ERR_FORMAT,
                    IDX, "x.weight");
    /* A shard the index names is missing. */
    expect_dir_fail("{\"weight_map\":{"
                    "\"x.weight\":\"model-00001-of-00002.safetensors\","
                    "\"w.weight\":\"model-00003-of-00003.safetensors\"}}",
                    SPINDLE_ERR_IO, "model-00003-of-00003.safetensors", NULL);
    /* Shard names that leave the directory. */
    expect_dir_fail("{\"weight_map\":{\"x.weight\":"
                    "\"../model-00001-of-00002.safetensors\"}}",
                    SPINDLE_ERR_FORMAT, IDX, "x.weight");
    expect_dir_fail("{\"weight_map\":{\"x.weight\":\"/etc/passwd\"}}",
                    SPINDLE_ERR_FORMAT, IDX, "x.weight");
    expect_dir_fail("{\"weight_map\":{\"x.weight\":\"..\"}}",
                    SPINDLE_ERR_FORMAT, IDX, "x.weight");
    expect_dir_fail("{\"weight_map\":{\"x.weight\":\"\"}}",
                    SPINDLE_ERR_FORMAT, IDX, "x.weight");
    /* A tensor the index names is absent from its shard. */
    expect_dir_fail("{\"weight_map\":{"
                    "\"x.weight\":\"model-00001-of-00002.safetensors\","
                    "\"q.weight\":\"model-00002-of-00002.safetensors\"}}",
                    SPINDLE_ERR_FORMAT, "model-00002-of-00002.safetensors",
                    "q.weight");
    /* ...or is in another shard than the index says. */
    expect_dir_fail("{\"weight_map\":{"
                    "\"x.weight\":\"model-00002-of-00002.safetensors\","
                    "\"z.weight\":\"model-00001-of-00002.safetensors\"}}",
                    SPINDLE_ERR_FORMAT, "model-00001-of-00002.safetensors",
                    "x.weight");
}

static void test_bad_shards(void **state) {
    (void)state;
    sp_tensor_set *set = NULL;
    spindle_error err = {0};
    /* One tensor name in two shards. */
    char *dir = new_dir();
    write_sharded(dir, NULL);
    write_st(dir, "model-00003.safetensors", SHARD2, ZEROS, 6);
    spindle_status st = sp_safetensors_open_dir(dir, &set, &err);
    expect_fail(st, set, &err, SPINDLE_ERR_FORMAT, "model-00003.safetensors",
                "z.weight");
    assert_non_null(strstr(err.message, "model-00002-of-00002.safetensors"));
    free(dir);
    /* A truncated shard named by a valid index. */
    dir = new_dir();
    write_sharded(dir, INDEX_OK);
    char *path = join(dir, "model-00002-of-00002.safetensors");
    assert_int_equal(truncate(path, 8 + (off_t)strlen(SHARD2) + 3), 0);
    free(path);
    st = sp_safetensors_open_dir(dir, &set, &err);
    expect_fail(st, set, &err, SPINDLE_ERR_FORMAT,
                "model-00002-of-00002.safetensors", "z.weight");
    free(dir);
    /* A shard cut inside its header. */
    dir = new_dir();
    write_sharded(dir, INDEX_OK);
    path = join(dir, "model-00001-of-00002.safetensors");
    assert_int_equal(truncate(path, 20), 0);
    free(path);
    st = sp_safetensors_open_dir(dir, &set, &err);
    expect_fail(st, set, &err, SPINDLE_ERR_FORMAT,
                "model-00001-of-00002.safetensors", NULL);
    free(dir);
    /* No weights at all; not a directory. */
    dir = new_dir();
    write_raw(dir, "config.json", "{}", 2);
    st = sp_safetensors_open_dir(dir, &set, &err);
    expect_fail(st, set, &err, SPINDLE_ERR_IO, dir, NULL);
    path = join(dir, "config.json");
    st = sp_safetensors_open_dir(path, &set, &err);
    expect_fail(st, set, &err, SPINDLE_ERR_IO, "config.json", NULL);
    free(path);
    free(dir);
}

static void test_null_arguments(void **state) {
    (void)state;
    spindle_error err = {0};
    sp_tensor_set *set = NULL;
    assert_int_equal(sp_safetensors_open_file(NULL, &set, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_int_equal(sp_safetensors_open_dir("x", NULL, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_null(sp_tensor_set_find(NULL, "x"));
    assert_int_equal(sp_tensor_set_count(NULL), 0);
    assert_null(sp_tensor_set_at(NULL, 0));
    assert_null(sp_tensor_set_metadata(NULL, "x"));
    sp_tensor_set_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_single_file),
        cmocka_unit_test(test_many_tensors_lookup),
        cmocka_unit_test(test_sharded_with_index),
        cmocka_unit_test(test_sharded_without_index),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_bad_framing),
        cmocka_unit_test(test_bad_index),
        cmocka_unit_test(test_bad_shards),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests_name("safetensors", tests, setup_root,
                                       teardown_root);
}
