/* runtime/kv_pool.h and the block tables of runtime/seq_state.h: the
 * pool's accounting (every block free, cached or used), LRU eviction of
 * unreferenced published blocks, lookups that compare the tokens and the
 * parent, exhaustion, and copy-on-write: two sequences sharing published
 * blocks, one truncated into a shared block and rewritten, the other still
 * reading its own values. The index's changes reach the event hook
 * (stored, removed on eviction) exactly once each. The invariant walkers (sp_kv_pool_check,
 * sp_seq_state_check) find every state reached here sound, and name each
 * reference count corrupted on purpose. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "runtime/kv_pool.h"
#include "runtime/seq_state.h"

enum { HEADS = 2, HD = 4, BT = SP_KV_BLOCK_TOKENS };

static const sp_layer_state_desc FULL = {.kind = SP_STATE_FULL_KV,
                                         .n_kv_heads = HEADS, .head_dim = HD};

static sp_kv_pool *new_pool(int blocks) {
    sp_kv_pool *p = NULL;
    spindle_error err = {0};
    const size_t bytes = (size_t)blocks * sp_kv_pool_block_bytes_for(&FULL, 1, SP_KV_F32);
    assert_int_equal(sp_kv_pool_new(&FULL, 1, SP_KV_F32, bytes, 42, &p, &err),
                     SPINDLE_OK);
    assert_int_equal(sp_kv_pool_capacity(p), blocks);
    return p;
}

static void expect_sound(sp_kv_pool *p) {
    spindle_error err = {0};
    if (sp_kv_pool_check(p, &err)) fail_msg("%s", err.message);
}

static void expect_counts(sp_kv_pool *p, int free_, int cached, int used) {
    expect_sound(p);
    sp_kv_pool_counts c;
    sp_kv_pool_counts_get(p, &c);
    assert_int_equal(c.free, free_);
    assert_int_equal(c.cached, cached);
    assert_int_equal(c.used, used);
}

static void test_lru_and_lookup(void **state) {
    (void)state;
    sp_kv_pool *p = new_pool(3);
    int32_t t1[BT], t2[BT];
    for (int i = 0; i < BT; i++) t1[i] = i, t2[i] = 100 + i;
    const uint64_t root = sp_kv_pool_root_hash(p, 0);
    const uint64_t h1 = sp_kv_pool_chain_hash(root, t1);
    const uint64_t h2 = sp_kv_pool_chain_hash(root, t2);
    int a = sp_kv_pool_alloc(p), b = sp_kv_pool_alloc(p);
    sp_kv_pool_publish(p, a, h1, root, t1, 0);
    sp_kv_pool_publish(p, b, h2, root, t2, 0);
    assert_true(sp_kv_pool_must_copy(p, a));
    sp_kv_pool_release(p, a);          /* a cached first: evicted first */
    sp_kv_pool_release(p, b);
    expect_counts(p, 1, 2, 0);
    assert_int_equal(sp_kv_pool_available(p), 3);
    /* Another adapter's namespace, other tokens, another parent: misses. */
    assert_int_equal(sp_kv_pool_lookup(p, h1, sp_kv_pool_root_hash(p, 7), t1), -1);
    assert_int_equal(sp_kv_pool_lookup(p, h1, root, t2), -1);
    assert_int_equal(sp_kv_pool_lookup(p, h2, root, t2), b);
    expect_counts(p, 1, 1, 1);
    /* Free block first, then the LRU one (a), never the referenced b. */
    int c = sp_kv_pool_alloc(p), d = sp_kv_pool_alloc(p);
    assert_true(c != a && c != b);
    assert_int_equal(d, a);
    assert_int_equal(sp_kv_pool_lookup(p, h1, root, t1), -1);
    assert_int_equal(sp_kv_pool_alloc(p), -1);  /* exhausted */
    expect_counts(p, 0, 0, 3);
    sp_kv_pool_release(p, b);
    sp_kv_pool_release(p, c);
    sp_kv_pool_release(p, d);
    expect_counts(p, 2, 1, 0);
    sp_kv_pool_free(p);
}

/* The prefix index's changes, as the event hook reports them. */
typedef struct recorded {
    int n;
    spindle_kv_event ev[8];
    int32_t first_token[8];
} recorded;

static void record(const spindle_kv_event *ev, void *user) {
    recorded *r = user;
    assert_true(r->n < 8);
    r->first_token[r->n] = ev->tokens ? ev->tokens[0] : -1;
    r->ev[r->n] = *ev;
    r->ev[r->n++].tokens = NULL;   /* borrowed for the call only */
}

/* A block published is STORED once (first: its parent is the namespace's
 * root), a second publish of the same hash reports nothing, and the LRU
 * eviction of an allocation is REMOVED under the same hash. */
static void test_index_events(void **state) {
    (void)state;
    sp_kv_pool *p = new_pool(2);
    recorded r = {0};
    sp_kv_pool_set_events(p, record, &r);
    int32_t t1[BT], t2[BT];
    for (int i = 0; i < BT; i++) t1[i] = 7 + i, t2[i] = 300 + i;
    const uint64_t root = sp_kv_pool_root_hash(p, 3);
    const uint64_t h1 = sp_kv_pool_chain_hash(root, t1);
    const uint64_t h2 = sp_kv_pool_chain_hash(h1, t2);
    int a = sp_kv_pool_alloc(p), b = sp_kv_pool_alloc(p);
    sp_kv_pool_publish(p, a, h1, root, t1, 3);
    sp_kv_pool_publish(p, b, h2, h1, t2, 3);
    sp_kv_pool_publish(p, b, h2, h1, t2, 3);   /* already published */
    assert_int_equal(r.n, 2);
    assert_int_equal(r.ev[0].kind, SPINDLE_KV_BLOCK_STORED);
    assert_true(r.ev[0].hash == h1 && r.ev[0].parent == root && r.ev[0].first);
    assert_int_equal(r.ev[0].adapter_id, 3);
    assert_int_equal(r.ev[0].n_tokens, BT);
    assert_int_equal(r.first_token[0], 7);
    assert_true(r.ev[1].hash == h2 && r.ev[1].parent == h1 && !r.ev[1].first);
    assert_int_equal(r.first_token[1], 300);
    sp_kv_pool_release(p, a);
    sp_kv_pool_release(p, b);
    const int c = sp_kv_pool_alloc(p);        /* evicts a, the older */
    assert_int_equal(c, a);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.ev[2].kind, SPINDLE_KV_BLOCK_REMOVED);
    assert_true(r.ev[2].hash == h1);
    sp_kv_pool_release(p, c);
    expect_sound(p);
    sp_kv_pool_free(p);
}

/* Value stored at position pos by a sequence whose token there is tok. */
static float value(int tok, int pos, int i) {
    return (float)tok * 0.5f + (float)pos * 0.01f + (float)i;
}

static void feed(sp_seq_state *s, const int32_t *tokens, int n) {
    spindle_error err = {0};
    const int from = sp_seq_state_length(s);
    assert_int_equal(sp_seq_state_reserve(s, n, &err), SPINDLE_OK);
    sp_seq_state_set_pending_tokens(s, tokens);
    float k[HEADS * HD], v[HEADS * HD];
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < HEADS * HD; i++) {
            k[i] = value(tokens[t], from + t, i);
            v[i] = -k[i];
        }
        sp_seq_state_kv_store(s, 0, from + t, k, v);
    }
    sp_seq_state_commit(s);
}

static void expect_values(const sp_seq_state *s, const int32_t *tokens,
                          int n) {
    const sp_kv_view view = sp_seq_state_kv_view(s, 0);
    for (int pos = 0; pos < n; pos++)
        for (int h = 0; h < HEADS; h++) {
            int run;
            const int64_t at = sp_kv_view_row(&view, h, pos, HD, &run);
            for (int d = 0; d < HD; d++)
                assert_true(((const float *)view.k)[at + d] ==
                            value(tokens[pos], pos, h * HD + d));
        }
}

static void test_copy_on_write(void **state) {
    (void)state;
    sp_kv_pool *p = new_pool(8);
    const sp_seq_state_options opt = {.kv_type = SP_KV_F32, .max_length = 200,
                                      .pool = p};
    spindle_error err = {0};
    sp_seq_state *a, *b;
    assert_int_equal(sp_seq_state_new(&FULL, 1, &opt, &a, &err), SPINDLE_OK);
    assert_int_equal(sp_seq_state_new(&FULL, 1, &opt, &b, &err), SPINDLE_OK);
    int32_t ta[80], tb[80];
    for (int i = 0; i < 80; i++) ta[i] = tb[i] = (i * 7) % 13;
    feed(a, ta, 70);                       /* 2 full blocks published */
    expect_counts(p, 5, 0, 3);
    assert_int_equal(sp_seq_state_map_prefix(b, tb, 70), 2 * BT);
    expect_counts(p, 5, 0, 3);             /* shared, not copied */
    assert_int_equal(sp_seq_state_blocks_held(b), 2);
    /* b rolls back into the shared second block and writes other tokens. */
    assert_int_equal(sp_seq_state_truncate(b, 40, &err), SPINDLE_OK);
    for (int i = 40; i < 80; i++) tb[i] = 20 + i;
    feed(b, tb + 40, 30);
    expect_values(a, ta, 70);              /* a never sees b's writes */
    expect_values(b, tb, 70);              /* b kept rows 32..39 */
    assert_true(sp_seq_state_kv_view(a, 0).blocks[1] !=
                sp_seq_state_kv_view(b, 0).blocks[1]);
    /* A full pool: the reserve fails and nothing changes. */
    sp_seq_state *c;
    assert_int_equal(sp_seq_state_new(&FULL, 1, &opt, &c, &err), SPINDLE_OK);
    int32_t tc[200] = {0};
    assert_int_equal(sp_seq_state_reserve(c, 199, &err), SPINDLE_ERR_LIMIT);
    assert_non_null(strstr(err.message, "KV pool is full"));
    assert_int_equal(sp_seq_state_blocks_held(c), 0);
    feed(c, tc, 10);
    sp_seq_state_free(a);
    sp_seq_state_free(b);
    sp_seq_state_free(c);
    sp_kv_pool_counts cnt;
    sp_kv_pool_counts_get(p, &cnt);
    assert_int_equal(cnt.used, 0);
    assert_int_equal(cnt.free + cnt.cached, 8);
    sp_kv_pool_free(p);
}

/* Latent KV (multi-head latent attention): a full-KV layer and a latent
 * one share each block; the latent layer has keys only (its block bytes,
 * its view without values, its snapshot rows), and its rows survive
 * truncation, copy-on-write and a snapshot restored into another state. */
static void test_latent_kv(void **state) {
    (void)state;
    enum { LD = 6 };
    const sp_layer_state_desc layers[2] = {
        FULL, {.kind = SP_STATE_LATENT_KV, .n_kv_heads = 1, .head_dim = LD}};
    const size_t block = sp_kv_pool_block_bytes_for(layers, 2, SP_KV_F32);
    assert_int_equal(block, (size_t)(2 * HEADS * HD + LD) * BT * 4);
    sp_kv_pool *p = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_kv_pool_new(layers, 2, SP_KV_F32, 6 * block, 7, &p,
                                    &err), SPINDLE_OK);
    const sp_seq_state_options opt = {.kv_type = SP_KV_F32, .max_length = 100,
                                      .pool = p};
    sp_seq_state *a, *b;
    assert_int_equal(sp_seq_state_new(layers, 2, &opt, &a, &err), SPINDLE_OK);
    assert_int_equal(sp_seq_state_new(layers, 2, &opt, &b, &err), SPINDLE_OK);
    int32_t tok[70];
    for (int i = 0; i < 70; i++) tok[i] = i % 11;
    assert_int_equal(sp_seq_state_reserve(a, 70, &err), SPINDLE_OK);
    sp_seq_state_set_pending_tokens(a, tok);
    float k[HEADS * HD], row[LD];
    for (int t = 0; t < 70; t++) {
        for (int i = 0; i < HEADS * HD; i++) k[i] = value(tok[t], t, i);
        for (int i = 0; i < LD; i++) row[i] = value(tok[t], t, 100 + i);
        sp_seq_state_kv_store(a, 0, t, k, k);
        sp_seq_state_kv_store(a, 1, t, row, NULL);
    }
    sp_seq_state_commit(a);
    const sp_kv_view v = sp_seq_state_kv_view(a, 1);
    assert_null(v.v);
    /* b maps a's two published blocks, rolls back into the second one and
     * writes there: a's latent rows stay. */
    assert_int_equal(sp_seq_state_map_prefix(b, tok, 70), 2 * BT);
    assert_int_equal(sp_seq_state_truncate(b, 40, &err), SPINDLE_OK);
    assert_int_equal(sp_seq_state_reserve(b, 1, &err), SPINDLE_OK);
    for (int i = 0; i < LD; i++) row[i] = -1.0f;
    sp_seq_state_kv_store(b, 1, 40, row, NULL);
    sp_seq_state_kv_store(b, 0, 40, k, k);
    sp_seq_state_commit(b);
    sp_state_snapshot *snap = NULL;
    assert_int_equal(sp_seq_state_snapshot(a, &snap, &err), SPINDLE_OK);
    assert_true(sp_state_snapshot_bytes(snap) >=
                (size_t)70 * (2 * HEADS * HD + LD) * 4);
    assert_true(sp_state_snapshot_bytes(snap) <
                (size_t)70 * (2 * HEADS * HD + 2 * LD) * 4);
    sp_seq_state_free(b);
    assert_int_equal(sp_seq_state_new(layers, 2, &opt, &b, &err), SPINDLE_OK);
    assert_int_equal(sp_seq_state_restore(b, snap, &err), SPINDLE_OK);
    for (const sp_seq_state *s = a;; s = b) {
        const sp_kv_view w = sp_seq_state_kv_view(s, 1);
        for (int pos = 0; pos < 70; pos++) {
            int run;
            const int64_t at = sp_kv_view_row(&w, 0, pos, LD, &run);
            for (int d = 0; d < LD; d++)
                assert_true(((const float *)w.k)[at + d] ==
                            value(tok[pos], pos, 100 + d));
        }
        if (s == b) break;
    }
    expect_values(b, tok, 70);
    sp_state_snapshot_free(snap);
    sp_seq_state_free(a);
    sp_seq_state_free(b);
    expect_sound(p);
    sp_kv_pool_free(p);
}

/* An embeddings span's positions enter the block hash by their keys: other
 * digests, rows or flags, the same placeholder ids, another hash; no key (or
 * all-zero keys) hashes as the plain token chain. */
static void test_keyed_chain_hash(void **state) {
    (void)state;
    int32_t t[BT];
    uint64_t none[BT] = {0}, k1[BT] = {0}, k2[BT] = {0}, k3[BT] = {0},
             k4[BT] = {0};
    unsigned char d1[16] = {1}, d2[16] = {2};
    for (int i = 0; i < BT; i++) t[i] = 7;
    for (int i = 10; i < BT; i++) {
        k1[i] = sp_span_position_key(d1, i - 10, 0);
        k2[i] = sp_span_position_key(d2, i - 10, 0);
        k3[i] = sp_span_position_key(d1, i - 9, 0); /* the span's next rows */
        k4[i] = sp_span_position_key(d1, i - 10, SPINDLE_SPAN_BIDIRECTIONAL);
    }
    const uint64_t root = 99;
    const uint64_t plain = sp_kv_pool_chain_hash(root, t);
    assert_true(sp_kv_pool_chain_hash_keyed(root, t, NULL) == plain);
    assert_true(sp_kv_pool_chain_hash_keyed(root, t, none) == plain);
    const uint64_t h1 = sp_kv_pool_chain_hash_keyed(root, t, k1);
    assert_true(h1 != plain);
    assert_true(h1 != sp_kv_pool_chain_hash_keyed(root, t, k2));
    assert_true(h1 != sp_kv_pool_chain_hash_keyed(root, t, k3));
    assert_true(h1 != sp_kv_pool_chain_hash_keyed(root, t, k4));
    assert_true(h1 == sp_kv_pool_chain_hash_keyed(root, t, k1));
    assert_true(sp_span_position_key(d1, 0, 0) != 0);
}

/* The walker's message for p, "" when sound. */
static const char *violation(sp_kv_pool *p, spindle_error *err) {
    *err = (spindle_error){0};
    if (!sp_kv_pool_check(p, err)) return "";
    assert_int_equal(err->status, SPINDLE_ERR_INTERNAL);
    return err->message;
}

static void test_walkers_catch_corrupt_counts(void **state) {
    (void)state;
    sp_kv_pool *p = new_pool(4);
    const sp_seq_state_options opt = {.kv_type = SP_KV_F32, .max_length = 100,
                                      .pool = p};
    spindle_error err = {0};
    sp_seq_state *a, *b;
    assert_int_equal(sp_seq_state_new(&FULL, 1, &opt, &a, &err), SPINDLE_OK);
    assert_int_equal(sp_seq_state_new(&FULL, 1, &opt, &b, &err), SPINDLE_OK);
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = i;
    feed(a, t, 40);                        /* block 0 published, 1 used */
    feed(b, t, 5);
    sp_seq_state_free(b);                  /* its block back on the stack */
    expect_counts(p, 2, 0, 2);
    const int32_t *held = sp_seq_state_kv_view(a, 0).blocks;
    const int published = held[0], used = held[1];
    int free_block = 0;
    while (free_block == published || free_block == used) free_block++;
    assert_int_equal(sp_seq_state_check(a, &err), SPINDLE_OK);
    /* A free block with a reference. */
    sp_kv_pool_debug_set_refs(p, free_block, 1);
    assert_non_null(strstr(violation(p, &err), "free block"));
    sp_kv_pool_debug_set_refs(p, free_block, 0);
    assert_string_equal(violation(p, &err), "");
    /* A used block whose count fell to 0 without being released: neither
     * free nor cached, and the sequence holding it is told too. */
    sp_kv_pool_debug_set_refs(p, used, 0);
    assert_non_null(strstr(violation(p, &err), "neither free nor cached"));
    assert_int_equal(sp_seq_state_check(a, &err), SPINDLE_ERR_INTERNAL);
    assert_non_null(strstr(err.message, "has no reference"));
    sp_kv_pool_debug_set_refs(p, used, 1);
    /* A cached (published, released) block with a reference. */
    sp_seq_state_free(a);
    expect_counts(p, 3, 1, 0);
    sp_kv_pool_debug_set_refs(p, published, 2);
    assert_non_null(strstr(violation(p, &err), "cached block"));
    sp_kv_pool_debug_set_refs(p, published, 0);
    expect_sound(p);
    sp_kv_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru_and_lookup),
        cmocka_unit_test(test_index_events),
        cmocka_unit_test(test_keyed_chain_hash),
        cmocka_unit_test(test_copy_on_write),
        cmocka_unit_test(test_latent_kv),
        cmocka_unit_test(test_walkers_catch_corrupt_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
