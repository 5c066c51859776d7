/* The kept responses of POST /v1/responses (src/server/responses_store.h):
 * a response and its conversation come back as put, the least recently
 * used (written or read) goes first when the count or the byte budget is
 * full, a response alone over the budget is refused, and delete forgets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "server/responses_store.h"

static bool kept(sp_responses_store *st, const char *id) {
    char *r = sp_responses_store_response(st, id);
    free(r);
    return r != NULL;
}

static void test_put_get_delete(void **state) {
    (void)state;
    sp_responses_store st;
    sp_responses_store_init(&st, 4, 1000);
    assert_true(sp_responses_store_put(&st, "resp_a", "{\"a\":1}", "[1]"));
    char *r = sp_responses_store_response(&st, "resp_a");
    char *h = sp_responses_store_history(&st, "resp_a");
    assert_string_equal(r, "{\"a\":1}");
    assert_string_equal(h, "[1]");
    free(r);
    free(h);
    assert_null(sp_responses_store_response(&st, "resp_b"));
    /* The same id again replaces it. */
    assert_true(sp_responses_store_put(&st, "resp_a", "{}", "[2]"));
    h = sp_responses_store_history(&st, "resp_a");
    assert_string_equal(h, "[2]");
    free(h);
    assert_true(sp_responses_store_delete(&st, "resp_a"));
    assert_false(sp_responses_store_delete(&st, "resp_a"));
    assert_false(kept(&st, "resp_a"));
    assert_int_equal(st.bytes, 0);
    sp_responses_store_free(&st);
}

static void test_least_recently_used_goes_first(void **state) {
    (void)state;
    sp_responses_store st;
    sp_responses_store_init(&st, 2, 1000);
    assert_true(sp_responses_store_put(&st, "a", "{}", "[]"));
    assert_true(sp_responses_store_put(&st, "b", "{}", "[]"));
    assert_true(kept(&st, "a"));   /* read: now b is the oldest */
    assert_true(sp_responses_store_put(&st, "c", "{}", "[]"));
    assert_true(kept(&st, "a") && kept(&st, "c"));
    assert_false(kept(&st, "b"));
    sp_responses_store_free(&st);
}

static void test_byte_budget(void **state) {
    (void)state;
    sp_responses_store st;
    sp_responses_store_init(&st, 8, 20);
    char big[16];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_true(sp_responses_store_put(&st, "a", "0123456", "[]"));   /* 9 bytes */
    assert_true(sp_responses_store_put(&st, "b", "0123456", "[]"));   /* 18 */
    assert_true(sp_responses_store_put(&st, "c", "0123456", "[]"));   /* a goes */
    assert_false(kept(&st, "a"));
    assert_true(kept(&st, "b") && kept(&st, "c"));
    assert_true(st.bytes <= 20);
    /* Alone over the budget: refused, the others stay. */
    char huge[32];
    memset(huge, 'y', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    assert_false(sp_responses_store_put(&st, "d", huge, "[]"));
    assert_true(kept(&st, "b") && kept(&st, "c"));
    assert_true(sp_responses_store_put(&st, "e", big, "[]"));   /* 17: both go */
    assert_false(kept(&st, "b") || kept(&st, "c"));
    assert_true(kept(&st, "e"));
    sp_responses_store_free(&st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_delete),
        cmocka_unit_test(test_least_recently_used_goes_first),
        cmocka_unit_test(test_byte_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
