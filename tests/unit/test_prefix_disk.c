/* runtime/prefix_disk.h, the KV pool's disk tier: a published block
 * offered to it comes back, after the pool (and its writer) is gone, in
 * another pool over the same directory with the same bytes; a file written
 * under another fingerprint or damaged is refused and deleted; a budget of
 * two files keeps the two most recently written. For a hybrid layout (a
 * full-KV layer and a recurrent one) the boundary state goes to disk
 * beside the blocks and a new sequence in a new pool maps the prefix with
 * it; a state file whose container is sound but whose snapshot does not
 * fit (another layout, another boundary) is refused and deleted, and the
 * prefix is not mapped. A refusal is told to the log handler
 * (spindle_set_log) as one warning naming the file, never printed. */
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
#include "runtime/seq_state.h"
#include "runtime/seq_state_impl.h"   /* sp_seq_state_snapshot_tail */

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
    sp_kv_pool_publish(p, b, h, root, t, 0);
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
        n += strstr(e->d_name, ".kvb") != NULL ||
             strstr(e->d_name, ".kvs") != NULL;
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

/* What the log handler received. */
typedef struct log_capture {
    int n;
    spindle_log_level level;
    char last[1024];
} log_capture;

static void capture(spindle_log_level level, const char *message, void *user) {
    log_capture *c = user;
    c->n++;
    c->level = level;
    snprintf(c->last, sizeof c->last, "%s", message);
}

static void test_foreign_and_damaged_refused(void **state) {
    (void)state;
    log_capture logged = {0};
    spindle_set_log(capture, &logged);
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
    assert_int_equal(logged.n, 1);
    assert_int_equal(logged.level, SPINDLE_LOG_WARN);
    assert_non_null(strstr(logged.last, "prompt cache: "));
    assert_non_null(strstr(logged.last, dir));
    assert_null(strchr(logged.last, '\n'));
    spindle_set_log(NULL, NULL);             /* none: dropped */
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
    assert_int_equal(logged.n, 1);
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

/* ---- a hybrid layout: boundary states ---- */

enum { CONV = 4, CH = 3, SF = 10 };
static const sp_layer_state_desc HYBRID[2] = {
    {.kind = SP_STATE_FULL_KV, .n_kv_heads = HEADS, .head_dim = HD},
    {.kind = SP_STATE_RECURRENT, .conv_kernel = CONV, .conv_channels = CH,
     .state_floats = SF}};
enum { REC_FLOATS = (CONV - 1) * CH + SF };

static sp_kv_pool *hybrid_pool(const char *dir) {
    sp_kv_pool *p = NULL;
    spindle_error err = {0};
    const size_t bb = sp_kv_pool_block_bytes_for(HYBRID, 2, SP_KV_F32);
    assert_int_equal(sp_kv_pool_new(HYBRID, 2, SP_KV_F32, 64 * bb, 42, &p,
                                    &err), SPINDLE_OK);
    assert_non_null(sp_kv_pool_states(p));
    assert_int_equal(sp_prefix_disk_open(dir, 1 << 20, FP_A, p, &err),
                     SPINDLE_OK);
    return p;
}

static sp_seq_state *hybrid_seq(sp_kv_pool *p) {
    const sp_seq_state_options opt = {.kv_type = SP_KV_F32, .max_length = 256,
                                      .pool = p};
    sp_seq_state *s = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_seq_state_new(HYBRID, 2, &opt, &s, &err), SPINDLE_OK);
    return s;
}

/* Feed blocks of tokens 0.. (one pass per block, so each boundary gets
 * its state): KV values of the position, the recurrent state that of the
 * length reached. */
static void hybrid_feed(sp_seq_state *s, const int32_t *tokens, int blocks) {
    spindle_error err = {0};
    float k[HEADS * HD], v[HEADS * HD];
    for (int b = 0; b < blocks; b++) {
        const int from = sp_seq_state_length(s);
        assert_int_equal(sp_seq_state_reserve(s, BT, &err), SPINDLE_OK);
        sp_seq_state_set_pending_tokens(s, tokens + from);
        for (int pos = from; pos < from + BT; pos++) {
            for (int i = 0; i < HEADS * HD; i++)
                k[i] = (float)(pos + i), v[i] = -k[i];
            sp_seq_state_kv_store(s, 0, pos, k, v);
        }
        const sp_recurrent_state r = sp_seq_state_recurrent(s, 1);
        for (int i = 0; i < (CONV - 1) * CH; i++) r.conv[i] = (float)(from + BT) + 0.25f * i;
        for (int i = 0; i < SF; i++) r.state[i] = -(float)(from + BT) - 0.5f * i;
        sp_seq_state_commit(s);
    }
}

static void expect_recurrent_at(sp_seq_state *s, int length) {
    spindle_error err = {0};
    assert_int_equal(sp_seq_state_length(s), length);
    assert_int_equal(sp_seq_state_reserve(s, 1, &err), SPINDLE_OK);
    const sp_recurrent_state r = sp_seq_state_recurrent(s, 1);
    for (int i = 0; i < (CONV - 1) * CH; i++)
        assert_true(r.conv[i] == (float)length + 0.25f * i);
    for (int i = 0; i < SF; i++)
        assert_true(r.state[i] == -(float)length - 0.5f * i);
}

static int count_ext(const char *dir, const char *ext) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        n += len > 4 && !strcmp(e->d_name + len - 4, ext);
    }
    if (d) closedir(d);
    return n;
}

static void hybrid_tokens(int32_t *t, int n) {
    for (int i = 0; i < n; i++) t[i] = (i * 7 + 3) % 97;
}

static void test_hybrid_states_round_trip(void **state) {
    (void)state;
    char *dir = fresh_dir();
    int32_t t[3 * BT + 1];
    hybrid_tokens(t, 3 * BT + 1);
    sp_kv_pool *p = hybrid_pool(dir);
    sp_seq_state *s = hybrid_seq(p);
    hybrid_feed(s, t, 3);
    sp_seq_state_free(s);
    sp_kv_pool_free(p);                     /* writes the queue */
    assert_int_equal(count_ext(dir, ".kvb"), 3);
    assert_int_equal(count_ext(dir, ".kvs"), 3);
    p = hybrid_pool(dir);                   /* a fresh process, as it were */
    s = hybrid_seq(p);
    assert_int_equal(sp_seq_state_map_prefix(s, t, 3 * BT + 1), 3 * BT);
    sp_prefix_disk_stats st;
    assert_true(sp_prefix_disk_stats_get(p, &st));
    assert_int_equal(st.loaded, 4);         /* 3 blocks, the last state */
    assert_int_equal(st.refused, 0);
    expect_recurrent_at(s, 3 * BT);
    sp_seq_state_free(s);
    /* A shorter prompt: the state at its own last boundary. */
    s = hybrid_seq(p);
    assert_int_equal(sp_seq_state_map_prefix(s, t, 2 * BT + 5), 2 * BT);
    expect_recurrent_at(s, 2 * BT);
    sp_seq_state_free(s);
    sp_kv_pool_free(p);
    remove_dir(dir);
}

/* Replace the state file of block `blocks` of t by `snap` under a sound
 * container (the right fingerprint, type, hash, parent and tokens). */
static void plant_state(sp_kv_pool *p, const char *dir, const int32_t *t,
                        int blocks, const sp_state_snapshot *snap) {
    uint64_t parent = sp_kv_pool_root_hash(p, 0), h = 0;
    for (int i = 0; i < blocks; i++) {
        h = sp_kv_pool_chain_hash(parent, t + i * BT);
        if (i + 1 < blocks) parent = h;
    }
    sp_prefix_block_key key = {.kind = SP_PREFIX_FILE_STATE,
                               .kv_type = SP_KV_F32,
                               .payload_bytes = sp_state_snapshot_bytes(snap),
                               .hash = h, .parent = parent};
    memcpy(key.fingerprint, FP_A, SP_PREFIX_FP_LEN);
    memcpy(key.tokens, t + (blocks - 1) * BT, sizeof key.tokens);
    unsigned char header[SP_PREFIX_BLOCK_HEADER];
    sp_prefix_block_header(&key, sp_state_snapshot_data(snap), header);
    char path[512];
    snprintf(path, sizeof path, "%s/%016llx.kvs", dir, (unsigned long long)h);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(header, 1, sizeof header, f), sizeof header);
    assert_int_equal(fwrite(sp_state_snapshot_data(snap), 1,
                            sp_state_snapshot_bytes(snap), f),
                     sp_state_snapshot_bytes(snap));
    fclose(f);
}

static void expect_state_refused(const char *dir, const int32_t *t,
                                 const sp_state_snapshot *bad) {
    sp_kv_pool *p = hybrid_pool(dir);
    plant_state(p, dir, t, 1, bad);
    sp_kv_pool_free(p);
    p = hybrid_pool(dir);
    sp_seq_state *s = hybrid_seq(p);
    assert_int_equal(sp_seq_state_map_prefix(s, t, BT + 1), 0);
    sp_prefix_disk_stats st;
    assert_true(sp_prefix_disk_stats_get(p, &st));
    assert_int_equal(st.refused, 1);
    assert_int_equal(count_ext(dir, ".kvs"), 0);   /* deleted */
    assert_int_equal(count_ext(dir, ".kvb"), 1);   /* the block stays */
    sp_seq_state_free(s);
    sp_kv_pool_free(p);
}

static void test_unfit_state_refused(void **state) {
    (void)state;
    char *dir = fresh_dir();
    int32_t t[2 * BT + 1];
    hybrid_tokens(t, 2 * BT + 1);
    /* Another layout: the recurrent layer twice the size. */
    sp_layer_state_desc other[2] = {HYBRID[0], HYBRID[1]};
    other[1].state_floats = 2 * SF;
    const sp_seq_state_options opt = {.kv_type = SP_KV_F32, .max_length = 256};
    spindle_error err = {0};
    sp_seq_state *o = NULL;
    assert_int_equal(sp_seq_state_new(other, 2, &opt, &o, &err), SPINDLE_OK);
    int32_t zeros[BT] = {0};
    assert_int_equal(sp_seq_state_reserve(o, BT, &err), SPINDLE_OK);
    sp_seq_state_set_pending_tokens(o, zeros);
    sp_seq_state_commit(o);
    sp_state_snapshot *foreign = NULL;
    assert_int_equal(sp_seq_state_snapshot_tail(o, &foreign, &err),
                     SPINDLE_OK);
    sp_seq_state_free(o);
    /* This layout's state, but of the second boundary. */
    sp_kv_pool *p = hybrid_pool(dir);
    sp_seq_state *s = hybrid_seq(p);
    hybrid_feed(s, t, 2);
    sp_seq_state_free(s);
    sp_kv_pool_free(p);
    p = hybrid_pool(dir);
    s = hybrid_seq(p);
    assert_int_equal(sp_seq_state_map_prefix(s, t, 2 * BT + 1), 2 * BT);
    sp_state_snapshot *later = NULL;
    assert_int_equal(sp_seq_state_snapshot_tail(s, &later, &err), SPINDLE_OK);
    sp_seq_state_free(s);
    sp_kv_pool_free(p);
    /* Only the first block and its state from here on. */
    remove_dir(dir);
    dir = fresh_dir();
    p = hybrid_pool(dir);
    s = hybrid_seq(p);
    hybrid_feed(s, t, 1);
    sp_seq_state_free(s);
    sp_kv_pool_free(p);
    expect_state_refused(dir, t, foreign);
    expect_state_refused(dir, t, later);
    sp_state_snapshot_free(foreign);
    sp_state_snapshot_free(later);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_across_pools),
        cmocka_unit_test(test_foreign_and_damaged_refused),
        cmocka_unit_test(test_budget_keeps_the_newest),
        cmocka_unit_test(test_hybrid_states_round_trip),
        cmocka_unit_test(test_unfit_state_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
