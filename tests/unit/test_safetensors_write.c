/* Safetensors writer: a file written by it reads back through the
 * safetensors reader with the declared names, dtypes, shapes and bytes; the
 * header is padded to 8 bytes; misuse fails without leaving a file and
 * without touching a previous one. Expected bytes are the ones the test
 * itself writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/safetensors.h"
#include "artifacts/safetensors_write.h"

static char g_dir[256], g_path[300];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/sp_stw_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_path, sizeof g_path, "%s/model.safetensors", g_dir);
    return 0;
}

/* Files in the directory (temporary ones included). */
static int count_files(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static int teardown(void **state) {
    (void)state;
    DIR *d = opendir(g_dir);
    char p[600];
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    return rmdir(g_dir);
}

static void test_roundtrip(void **state) {
    (void)state;
    spindle_error err = {0};
    sp_st_writer *w;
    const float a[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    const uint16_t b[3] = {0x3c00, 0xbc00, 0x7bff};
    const int64_t sa[2] = {2, 3}, sb[1] = {3};
    assert_int_equal(sp_st_writer_new(g_path, &w, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_meta(w, "format", "mlx", &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_add(w, "a.weight", SP_DTYPE_F32, 2, sa, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_add(w, "b", SP_DTYPE_F16, 1, sb, &err), SPINDLE_OK);
    assert_int_not_equal(sp_st_writer_add(w, "b", SP_DTYPE_F16, 1, sb, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_begin(w, &err), SPINDLE_OK);
    /* Bytes may arrive in pieces that span tensors. */
    assert_int_equal(sp_st_writer_write(w, a, 10, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_write(w, (const char *)a + 10, 14, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_write(w, b, 6, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_finish(w, &err), SPINDLE_OK);
    assert_int_equal(count_files(), 1);

    FILE *f = fopen(g_path, "rb");
    assert_non_null(f);
    unsigned char hl[8];
    assert_int_equal(fread(hl, 1, 8, f), 8);
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)hl[i] << (8 * i);
    assert_int_equal(hlen % 8, 0);

    sp_tensor_set *set;
    assert_int_equal(sp_safetensors_open_file(g_path, &set, &err), SPINDLE_OK);
    assert_int_equal(sp_tensor_set_count(set), 2);
    const sp_tensor_info *ta = sp_tensor_set_find(set, "a.weight");
    const sp_tensor_info *tb = sp_tensor_set_find(set, "b");
    assert_non_null(ta);
    assert_non_null(tb);
    assert_int_equal(ta->dtype, SP_DTYPE_F32);
    assert_int_equal(ta->ndim, 2);
    assert_int_equal(ta->shape[0], 2);
    assert_int_equal(ta->shape[1], 3);
    assert_memory_equal(ta->data, a, sizeof a);
    assert_int_equal(tb->dtype, SP_DTYPE_F16);
    assert_int_equal(tb->shape[0], 3);
    assert_memory_equal(tb->data, b, sizeof b);
    assert_string_equal(sp_tensor_set_metadata(set, "format"), "mlx");
    sp_tensor_set_free(set);
}

static void test_failures_leave_old_file(void **state) {
    (void)state;
    spindle_error err = {0};
    const char old[] = "previous contents";
    assert_int_equal(sp_write_file_atomic(g_path, old, sizeof old, &err), SPINDLE_OK);
    const int64_t s[1] = {4};
    const float v[4] = {1, 2, 3, 4};
    sp_st_writer *w;

    /* Too many bytes. */
    assert_int_equal(sp_st_writer_new(g_path, &w, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_add(w, "x", SP_DTYPE_F32, 1, s, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_begin(w, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_write(w, v, 8, &err), SPINDLE_OK);
    assert_int_not_equal(sp_st_writer_write(w, v, 16, &err), SPINDLE_OK);
    sp_st_writer_abort(w);

    /* Too few bytes at finish. */
    assert_int_equal(sp_st_writer_new(g_path, &w, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_add(w, "x", SP_DTYPE_F32, 1, s, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_begin(w, &err), SPINDLE_OK);
    assert_int_equal(sp_st_writer_write(w, v, 12, &err), SPINDLE_OK);
    assert_int_not_equal(sp_st_writer_finish(w, &err), SPINDLE_OK);
    assert_non_null(strstr(err.message, "12 of 16"));

    /* Negative dimension. */
    const int64_t bad[1] = {-1};
    assert_int_equal(sp_st_writer_new(g_path, &w, &err), SPINDLE_OK);
    assert_int_not_equal(sp_st_writer_add(w, "x", SP_DTYPE_F32, 1, bad, &err), SPINDLE_OK);
    sp_st_writer_abort(w);

    assert_int_equal(count_files(), 1); /* no temporary left */
    char buf[64] = {0};
    FILE *f = fopen(g_path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof buf, f), sizeof old);
    fclose(f);
    assert_memory_equal(buf, old, sizeof old);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures_leave_old_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
