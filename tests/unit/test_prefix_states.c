/* runtime/prefix_states.h, the boundary-state store of the prefix index:
 * the byte bound (least recently used first out; acquire counts as a use),
 * a second state for the same boundary dropped, one state larger than the
 * bound still kept alone, and every snapshot freed exactly once (the
 * sanitizer build checks the leaks and double frees). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runtime/prefix_states.h"
#include "runtime/seq_state.h"

static const sp_layer_state_desc RECURRENT = {
    .kind = SP_STATE_RECURRENT, .conv_kernel = 4, .conv_channels = 8,
    .state_floats = 1000};

/* A snapshot of a fresh recurrent state: all of them have one size. */
static sp_state_snapshot *snapshot(void) {
    sp_seq_state_options opt = {.kv_type = SP_KV_F32, .max_rollback = 2};
    sp_seq_state *s = NULL;
    sp_state_snapshot *snap = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_seq_state_new(&RECURRENT, 1, &opt, &s, &err),
                     SPINDLE_OK);
    assert_int_equal(sp_seq_state_snapshot(s, &snap, &err), SPINDLE_OK);
    sp_seq_state_free(s);
    return snap;
}

static void expect(sp_prefix_states *st, int states, size_t bytes) {
    sp_prefix_states_counts c;
    sp_prefix_states_counts_get(st, &c);
    assert_int_equal(c.states, states);
    assert_int_equal(c.bytes, bytes);
    assert_true(c.states <= 1 || c.bytes <= c.max_bytes);
}

static void test_bound_and_lru(void **state) {
    (void)state;
    sp_state_snapshot *first = snapshot();
    const size_t one = sp_state_snapshot_bytes(first);
    sp_prefix_states *st = sp_prefix_states_new(3 * one);
    assert_non_null(st);
    sp_prefix_states_put(st, 1, first);
    sp_prefix_states_put(st, 2, snapshot());
    sp_prefix_states_put(st, 3, snapshot());
    expect(st, 3, 3 * one);
    sp_prefix_states_put(st, 2, snapshot());     /* already there: dropped */
    expect(st, 3, 3 * one);
    /* 1 used now: 2 is the oldest when 4 comes */
    const sp_state_snapshot *got = sp_prefix_states_acquire(st, 1);
    assert_ptr_equal(got, first);
    sp_prefix_states_release(st);
    sp_prefix_states_put(st, 4, snapshot());
    expect(st, 3, 3 * one);
    assert_true(sp_prefix_states_has(st, 1));
    assert_false(sp_prefix_states_has(st, 2));
    assert_true(sp_prefix_states_has(st, 3));
    assert_true(sp_prefix_states_has(st, 4));
    assert_null(sp_prefix_states_acquire(st, 2));   /* unlocked: no hang */
    sp_prefix_states_put(st, 5, snapshot());
    assert_false(sp_prefix_states_has(st, 3));
    sp_prefix_states_free(st);
}

static void test_larger_than_the_bound(void **state) {
    (void)state;
    sp_state_snapshot *snap = snapshot();
    const size_t one = sp_state_snapshot_bytes(snap);
    sp_prefix_states *st = sp_prefix_states_new(one / 2);
    assert_non_null(st);
    sp_prefix_states_put(st, 7, snap);
    expect(st, 1, one);
    sp_prefix_states_put(st, 8, snapshot());        /* evicts 7 */
    expect(st, 1, one);
    assert_false(sp_prefix_states_has(st, 7));
    assert_true(sp_prefix_states_has(st, 8));
    sp_prefix_states_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_and_lru),
        cmocka_unit_test(test_larger_than_the_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
