/* Thread pool: every index covered exactly once, range sizes bounded by the
 * grain, valid thread ids, results visible to the caller, back-to-back
 * regions, nested regions, serial fallback with a NULL pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#include "compute/threadpool.h"

typedef struct cover_ctx {
    atomic_int *hits;     /* times each index was visited */
    int64_t *value;       /* plain writes: checks visibility after return */
    int64_t max_range;    /* the grain the caller expects */
    int pool_size;
    atomic_int bad;       /* ranges that broke the contract */
} cover_ctx;

static void cover_fn(void *p, int64_t begin, int64_t end, int thread_id) {
    cover_ctx *c = p;
    if (begin >= end || end - begin > c->max_range || thread_id < 0 ||
        thread_id >= c->pool_size)
        atomic_fetch_add(&c->bad, 1);
    for (int64_t i = begin; i < end; i++) {
        atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
        c->value[i] = 3 * i + 1;
    }
}

/* Run one region and check its coverage. */
static void check_cover(sp_pool *pool, int64_t n, int64_t grain) {
    cover_ctx c = {0};
    c.hits = calloc((size_t)(n > 0 ? n : 1), sizeof *c.hits);
    c.value = calloc((size_t)(n > 0 ? n : 1), sizeof *c.value);
    assert_non_null(c.hits);
    assert_non_null(c.value);
    c.pool_size = sp_pool_size(pool);
    int64_t threads = c.pool_size;
    c.max_range = grain > 0 ? grain : (n + threads - 1) / threads;
    atomic_init(&c.bad, 0);
    sp_pool_for(pool, n, grain, cover_fn, &c);
    assert_int_equal(atomic_load(&c.bad), 0);
    for (int64_t i = 0; i < n; i++) {
        if (atomic_load(&c.hits[i]) != 1 || c.value[i] != 3 * i + 1)
            fail_msg("n=%lld grain=%lld: index %lld hit %d times",
                     (long long)n, (long long)grain, (long long)i,
                     atomic_load(&c.hits[i]));
    }
    free(c.hits);
    free(c.value);
}

static void cover_all(sp_pool *pool) {
    static const int64_t ns[] = {0, 1, 2, 3, 5, 7, 16, 63, 64, 65, 1000, 4097};
    static const int64_t grains[] = {-1, 0, 1, 2, 3, 7, 64, 1000, 5000};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < sizeof grains / sizeof grains[0]; j++)
            check_cover(pool, ns[i], grains[j]);
}

static void test_null_pool(void **state) {
    (void)state;
    assert_int_equal(sp_pool_size(NULL), 1);
    cover_all(NULL);
    sp_pool_destroy(NULL);
}

static void test_coverage_pools(void **state) {
    (void)state;
    for (int t = 1; t <= 4; t++) {
        sp_pool *pool = sp_pool_create(t);
        assert_non_null(pool);
        assert_int_equal(sp_pool_size(pool), t);
        cover_all(pool);
        sp_pool_destroy(pool);
    }
}

static void test_default_size(void **state) {
    (void)state;
    sp_pool *pool = sp_pool_create(0);
    assert_non_null(pool);
    assert_true(sp_pool_size(pool) >= 1);
    check_cover(pool, 1000, 0);
    sp_pool_destroy(pool);
}

typedef struct sum_ctx {
    atomic_llong sum;
} sum_ctx;

static void sum_fn(void *p, int64_t begin, int64_t end, int thread_id) {
    (void)thread_id;
    sum_ctx *s = p;
    long long local = 0;
    for (int64_t i = begin; i < end; i++) local += i;
    atomic_fetch_add(&s->sum, local);
}

/* Many short regions in a row: the pattern of a decode step. */
static void test_back_to_back(void **state) {
    (void)state;
    sp_pool *pool = sp_pool_create(3);
    assert_non_null(pool);
    for (int k = 0; k < 3000; k++) {
        const int64_t n = 1 + k % 97;
        sum_ctx s;
        atomic_init(&s.sum, 0);
        sp_pool_for(pool, n, 1 + k % 5, sum_fn, &s);
        assert_int_equal(atomic_load(&s.sum), n * (n - 1) / 2);
    }
    sp_pool_destroy(pool);
}

typedef struct nest_ctx {
    sp_pool *pool;
    atomic_int *hits; /* [outer][inner] */
    int64_t inner_n;
    int pool_size;
    atomic_int bad;
} nest_ctx;

typedef struct nest_inner {
    nest_ctx *outer;
    int64_t row;
} nest_inner;

static void inner_fn(void *p, int64_t begin, int64_t end, int thread_id) {
    nest_inner *in = p;
    if (thread_id < 0 || thread_id >= in->outer->pool_size)
        atomic_fetch_add(&in->outer->bad, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&in->outer->hits[in->row * in->outer->inner_n + i], 1);
}

static void outer_fn(void *p, int64_t begin, int64_t end, int thread_id) {
    (void)thread_id;
    nest_ctx *c = p;
    for (int64_t r = begin; r < end; r++) {
        nest_inner in = {c, r};
        sp_pool_for(c->pool, c->inner_n, 3, inner_fn, &in);
    }
}

/* A region started from inside a region of the same pool must not wait for
 * the (busy) workers: it runs on the calling thread. */
static void test_nested(void **state) {
    (void)state;
    for (int t = 1; t <= 3; t++) {
        sp_pool *pool = sp_pool_create(t);
        assert_non_null(pool);
        nest_ctx c = {.pool = pool, .inner_n = 37, .pool_size = t};
        const int64_t outer_n = 23;
        c.hits = calloc((size_t)(outer_n * c.inner_n), sizeof *c.hits);
        assert_non_null(c.hits);
        atomic_init(&c.bad, 0);
        sp_pool_for(pool, outer_n, 2, outer_fn, &c);
        assert_int_equal(atomic_load(&c.bad), 0);
        for (int64_t i = 0; i < outer_n * c.inner_n; i++)
            assert_int_equal(atomic_load(&c.hits[i]), 1);
        free(c.hits);
        sp_pool_destroy(pool);
    }
}

typedef struct who_ctx {
    atomic_int seen[4];
} who_ctx;

static void who_fn(void *p, int64_t begin, int64_t end, int thread_id) {
    (void)begin;
    (void)end;
    who_ctx *c = p;
    atomic_fetch_add(&c->seen[thread_id & 3], 1);
    struct timespec ts = {0, 2000000}; /* 2 ms: ample time for a wake-up */
    nanosleep(&ts, NULL);
}

/* The workers really take part (a pool that ran everything on the caller
 * would pass the coverage tests). */
static void test_workers_participate(void **state) {
    (void)state;
    sp_pool *pool = sp_pool_create(2);
    assert_non_null(pool);
    who_ctx c;
    for (int i = 0; i < 4; i++) atomic_init(&c.seen[i], 0);
    sp_pool_for(pool, 16, 1, who_fn, &c);
    assert_int_equal(atomic_load(&c.seen[0]) + atomic_load(&c.seen[1]), 16);
    assert_true(atomic_load(&c.seen[1]) > 0);
    sp_pool_destroy(pool);
}

typedef struct straggle_ctx {
    atomic_int done;
    int64_t sum;   /* plain: written by the worker, read after the region */
} straggle_ctx;

/* The caller's chunk takes 0.2 ms (time for the worker to claim the other
 * one), the worker's 1.2 ms: the caller then spins, yields and sleeps until
 * the worker wakes it. */
static void straggle_fn(void *p, int64_t begin, int64_t end, int thread_id) {
    straggle_ctx *c = p;
    struct timespec ts = {0, thread_id ? 1200000 : 200000};
    nanosleep(&ts, NULL);
    if (thread_id != 0) c->sum += end - begin;
    atomic_fetch_add(&c->done, (int)(end - begin));
}

/* Long waits for a straggler (what a descheduled worker causes) take the
 * caller's sleeping path: every region still ends exactly when its last
 * chunk does (no lost wake-up: a hang here), with the worker's writes
 * visible, and the pool still serves short regions afterwards. */
static void test_straggler_wakes_sleeping_caller(void **state) {
    (void)state;
    sp_pool *pool = sp_pool_create(2);
    assert_non_null(pool);
    int64_t by_worker = 0;
    for (int k = 0; k < 200; k++) {
        straggle_ctx c = {.sum = 0};
        atomic_init(&c.done, 0);
        sp_pool_for(pool, 2, 1, straggle_fn, &c);
        assert_int_equal(atomic_load(&c.done), 2);
        assert_true(c.sum <= 1);
        by_worker += c.sum;
        if (k % 10 == 0) check_cover(pool, 1000, 7);
    }
    assert_true(by_worker > 0);   /* the caller did wait for the worker */
    for (int k = 0; k < 2000; k++) check_cover(pool, 64, 1);
    sp_pool_destroy(pool);
}

/* Creating and destroying pools repeatedly, with and without work, must not
 * hang or leak (sanitizer builds check the latter). */
static void test_create_destroy(void **state) {
    (void)state;
    for (int k = 0; k < 20; k++) {
        sp_pool *pool = sp_pool_create(1 + k % 4);
        assert_non_null(pool);
        if (k % 2) check_cover(pool, 100, 7);
        sp_pool_destroy(pool);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_pool),
        cmocka_unit_test(test_coverage_pools),
        cmocka_unit_test(test_default_size),
        cmocka_unit_test(test_back_to_back),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_workers_participate),
        cmocka_unit_test(test_create_destroy),
        cmocka_unit_test(test_straggler_wakes_sleeping_caller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
