/* runtime/prefix_disk.h, the KV pool's disk tier: a published block
 * offered to it comes back, after the pool (and its writer) is gone, in
 * another pool over the same directory with the same bytes; a file written
 * under another fingerprint or damaged is refused and deleted; a budget of
 * two files keeps the two most recently written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/kv_pool.h"
#include "runtime/prefix_block.h"
#include "runtime/prefix_disk.h"

enum { HEADS = 2, HD = 4, BT = SP_KV_BLOCK_TOKENS, LAYERS = 2 };

static const sp_layer_state_desc FULL[LAYERS] = {
    {.kind = SP_STATE_FULL_KV, .n_kv_heads = HEADS, .head_dim = HD},
    {.kind = SP_STATE_FULL_KV, .n_kv_heads = HEADS, .head_dim = HD}};
static const char FP_A[] = "0123456789abcdef0123456789abcdef";
static const char FP_B[] = "fedcba9876543210fedcba9876543210";

static size_t block_bytes(void) {
    return sp_kv_pool_block_bytes_for(FULL, LAYERS, SP_KV_F32);
}

static sp_kv_pool *pool_over(const char *dir, const char *fp, size_t budget) {
    sp_kv_pool *p = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_kv_pool_new(FULL, LAYERS, SP_KV_F32, 8 * block_bytes(),
                                     42, &p, &err), SPINDLE_OK);
    assert_int_equal(sp_prefix_disk_open(dir, budget, fp, p, &err), SPINDLE_OK);
    return p;
}

static void tokens_of(int salt, int32_t *t) {
    for (int i = 0; i < BT; i++) t[i] = salt * 1000 + i;
}

/* Publish and offer one block of distinct values; its hash. */
static uint64_t offer(sp_kv_pool *p, int salt) {
    int32_t t[BT];
    tokens_of(salt, t);
    const int b = sp_kv_pool_alloc(p);
    assert_true(b >= 0);
    const int32_t table[1] = {b};
    float k[HEADS * HD], v[HEADS * HD];
    for (int l = 0; l < LAYERS; l++)
        for (int pos = 0; pos < BT; pos++) {
            for (int i = 0; i < HEADS * HD; i++)
                k[i] = (float)(salt + l + pos * 0.5 + i), v[i] = -k[i];
            sp_kv_pool_store(p, l, table, pos, k, v);
        }
    const uint64_t root = sp_kv_pool_root_hash(p, 0);
    const uint64_t h = sp_kv_pool_chain_hash(root, t);
    sp_kv_pool_publish(p, b, h, root, t);
    sp_prefix_disk_offer(p, b, h, root, t);
    sp_kv_pool_release(p, b);
    return h;
}

static void expect_block(sp_kv_pool *p, int b, int salt) {
    const int32_t table[1] = {b};
    float got[2 * HEADS * BT * HD];
    for (int l = 0; l < LAYERS; l++) {
        sp_kv_pool_read(p, l, table, 0, BT, got);
        /* [k, v][head][pos][dim] */
        for (int h = 0; h < HEADS; h++)
            for (int pos = 0; pos < BT; pos++)
                for (int d = 0; d < HD; d++) {
                    const float want = (float)(salt + l + pos * 0.5 + h * HD + d);
                    assert_true(got[(h * BT + pos) * HD + d] == want);
                    assert_true(got[((HEADS + h) * BT + pos) * HD + d] == -want);
                }
    }
}

static int load(sp_kv_pool *p, int salt) {
    int32_t t[BT];
    tokens_of(salt, t);
    const uint64_t root = sp_kv_pool_root_hash(p, 0);
    return sp_prefix_disk_load(p, sp_kv_pool_chain_hash(root, t), root, t);
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".kvb") != NULL;
    if (d) closedir(d);
    return n;
}

static char *fresh_dir(void) {
    char tmpl[] = "/tmp/spindle-prefix-disk-XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    return strdup(dir);
}

static void remove_dir(char *dir) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static void test_round_trip_across_pools(void **state) {
    (void)state;
    char *dir = fresh_dir();
    sp_kv_pool *p = pool_over(dir, FP_A, 1 << 20);
    offer(p, 1);
    offer(p, 2);
    sp_kv_pool_free(p);                      /* writes the queue */
    assert_int_equal(count_files(dir), 2);
    p = pool_over(dir, FP_A, 1 << 20);
    const int b = load(p, 2);
    assert_true(b >= 0);
    expect_block(p, b, 2);
    sp_prefix_disk_stats st;
    assert_true(sp_prefix_disk_stats_get(p, &st));
    assert_int_equal(st.loaded, 1);
    assert_int_equal(st.files, 2);
    assert_int_equal(load(p, 3), -1);        /* never written */
    sp_kv_pool_release(p, b);
    sp_kv_pool_free(p);
    remove_dir(dir);
}

static void test_foreign_and_damaged_refused(void **state) {
    (void)state;
    char *dir = fresh_dir();
    sp_kv_pool *p = pool_over(dir, FP_B, 1 << 20);
    offer(p, 1);
    offer(p, 2);
    sp_kv_pool_free(p);
    p = pool_over(dir, FP_A, 1 << 20);       /* another model's files */
    assert_int_equal(load(p, 1), -1);
    sp_prefix_disk_stats st;
    assert_true(sp_prefix_disk_stats_get(p, &st));
    assert_int_equal(st.refused, 1);
    assert_int_equal(count_files(dir), 1);   /* the refused one deleted */
    sp_kv_pool_free(p);
    p = pool_over(dir, FP_B, 1 << 20);       /* the other, one byte flipped */
    DIR *d = opendir(dir);
    char path[512] = "";
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".kvb"))
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    closedir(d);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, SP_PREFIX_BLOCK_HEADER + 5, SEEK_SET);
    fputc(0x7f, f);
    fclose(f);
    assert_int_equal(load(p, 2), -1);
    assert_true(sp_prefix_disk_stats_get(p, &st));
    assert_int_equal(st.refused, 1);
    assert_int_equal(count_files(dir), 0);
    sp_kv_pool_free(p);
    remove_dir(dir);
}

static void test_budget_keeps_the_newest(void **state) {
    (void)state;
    char *dir = fresh_dir();
    const size_t file = SP_PREFIX_BLOCK_HEADER + block_bytes();
    sp_kv_pool *p = pool_over(dir, FP_A, 2 * file + file / 2);
    for (int salt = 1; salt <= 4; salt++) offer(p, salt);
    sp_kv_pool_free(p);
    assert_int_equal(count_files(dir), 2);
    p = pool_over(dir, FP_A, 2 * file + file / 2);
    assert_int_equal(load(p, 1), -1);
    assert_int_equal(load(p, 2), -1);
    const int b3 = load(p, 3), b4 = load(p, 4);
    assert_true(b3 >= 0 && b4 >= 0);
    sp_kv_pool_release(p, b3);
    sp_kv_pool_release(p, b4);
    sp_kv_pool_free(p);
    /* A smaller budget at start deletes down to it. */
    p = pool_over(dir, FP_A, file);
    assert_int_equal(count_files(dir), 1);
    sp_kv_pool_free(p);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_across_pools),
        cmocka_unit_test(test_foreign_and_damaged_refused),
        cmocka_unit_test(test_budget_keeps_the_newest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
