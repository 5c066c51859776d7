/* The encoded-image cache (src/vision/image_cache.h): rows come back as
 * put, under their digest only; the least recently used (put or got) goes
 * first when the byte budget is full; rows over the whole budget are not
 * kept; the counters say so; threads sharing it see whole rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vision/image_cache.h"

#define N 64   /* floats per image here: 256 bytes */

static void digest_of(int id, unsigned char d[SPINDLE_SPAN_DIGEST_BYTES]) {
    memset(d, 0, SPINDLE_SPAN_DIGEST_BYTES);
    d[0] = (unsigned char)id;
}

static void put(sp_image_cache *c, int id) {
    float rows[N];
    unsigned char d[SPINDLE_SPAN_DIGEST_BYTES];
    for (int i = 0; i < N; i++) rows[i] = (float)(id * 1000 + i);
    digest_of(id, d);
    sp_image_cache_put(c, d, rows, N);
}

/* Whether image `id` is kept, its rows checked. */
static bool kept(sp_image_cache *c, int id) {
    unsigned char d[SPINDLE_SPAN_DIGEST_BYTES];
    float *rows = NULL;
    digest_of(id, d);
    if (!sp_image_cache_get(c, d, N, &rows)) return false;
    for (int i = 0; i < N; i++) assert_true(rows[i] == (float)(id * 1000 + i));
    free(rows);
    return true;
}

static void test_get_what_was_put(void **state) {
    (void)state;
    sp_image_cache *c = sp_image_cache_new(4 * N * sizeof(float));
    assert_false(kept(c, 1));
    put(c, 1);
    put(c, 2);
    assert_true(kept(c, 1));
    assert_true(kept(c, 2));
    assert_false(kept(c, 3));
    /* Another length under the same digest is not these rows. */
    unsigned char d[SPINDLE_SPAN_DIGEST_BYTES];
    float *rows = (float *)1;
    digest_of(1, d);
    assert_false(sp_image_cache_get(c, d, N / 2, &rows));
    assert_null(rows);
    sp_image_cache_stats st;
    sp_image_cache_stats_get(c, &st);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 3);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.bytes, 2 * N * sizeof(float));
    sp_image_cache_free(c);
}

static void test_least_recently_used_goes_first(void **state) {
    (void)state;
    sp_image_cache *c = sp_image_cache_new(3 * N * sizeof(float));
    put(c, 1);
    put(c, 2);
    put(c, 3);
    assert_true(kept(c, 1));   /* 1 is now the most recent: 2 goes first */
    put(c, 4);
    assert_false(kept(c, 2));
    assert_true(kept(c, 3));
    assert_true(kept(c, 1));
    assert_true(kept(c, 4));
    put(c, 4);                 /* the same digest again replaces, evicts nothing */
    sp_image_cache_stats st;
    sp_image_cache_stats_get(c, &st);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.bytes, 3 * N * sizeof(float));
    sp_image_cache_free(c);
}

static void test_over_budget_is_not_kept(void **state) {
    (void)state;
    sp_image_cache *c = sp_image_cache_new(N * sizeof(float) - 1);
    put(c, 1);
    assert_false(kept(c, 1));
    sp_image_cache_free(c);
    c = sp_image_cache_new(0);   /* a cache that keeps nothing */
    put(c, 1);
    assert_false(kept(c, 1));
    sp_image_cache_stats st;
    sp_image_cache_stats_get(c, &st);
    assert_int_equal(st.entries, 0);
    sp_image_cache_free(c);
}

/* Each thread puts and gets images 0-7 in a cache that holds 3: every
 * row that comes back is whole (kept() checks each value). */
static void *churn(void *arg) {
    sp_image_cache *c = arg;
    for (int i = 0; i < 2000; i++) {
        put(c, i % 8);
        (void)kept(c, (i * 5) % 8);
    }
    return NULL;
}

static void test_threads_share_it(void **state) {
    (void)state;
    sp_image_cache *c = sp_image_cache_new(3 * N * sizeof(float));
    pthread_t t[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, churn, c), 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    sp_image_cache_stats st;
    sp_image_cache_stats_get(c, &st);
    assert_int_equal(st.hits + st.misses, 4 * 2000);
    assert_true(st.entries <= 3 && st.bytes == (size_t)st.entries * N * sizeof(float));
    sp_image_cache_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_what_was_put),
        cmocka_unit_test(test_least_recently_used_goes_first),
        cmocka_unit_test(test_over_budget_is_not_kept),
        cmocka_unit_test(test_threads_share_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
