/* The public header's promises that need no model: stop-reason names (the
 * strings `spindle run --json` has always printed), NULL handles and the
 * log levels' names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "spindle.h"

static void test_stop_reason_names(void **state) {
    (void)state;
    assert_string_equal(spindle_stop_reason_name(SPINDLE_STOP_LENGTH), "length");
    assert_string_equal(spindle_stop_reason_name(SPINDLE_STOP_EOS), "eos");
    assert_string_equal(spindle_stop_reason_name(SPINDLE_STOP_CALLBACK), "callback");
    assert_string_equal(spindle_stop_reason_name(SPINDLE_STOP_CONTEXT), "context");
    assert_string_equal(spindle_stop_reason_name(SPINDLE_STOP_ERROR), "error");
    assert_string_equal(spindle_stop_reason_name(SPINDLE_STOP_CANCELLED), "cancelled");
    assert_null(spindle_stop_reason_name((spindle_stop_reason)(SPINDLE_STOP_CANCELLED + 1)));
    assert_null(spindle_stop_reason_name((spindle_stop_reason)-1));
}

static void test_null_handles(void **state) {
    (void)state;
    spindle_error err;
    memset(&err, 0, sizeof err);
    assert_int_equal(spindle_seq_length(NULL), 0);
    assert_int_equal(spindle_seq_truncate(NULL, 0, &err), SPINDLE_ERR_ARGUMENT);
    assert_non_null(strstr(err.message, "NULL"));
    const int32_t *ids = (const int32_t *)&err;
    assert_int_equal(spindle_model_eos_ids(NULL, &ids), 0);
    assert_null(ids);
    assert_null(spindle_model_dir(NULL));
    assert_int_equal(spindle_model_vocab_size(NULL), 0);
    assert_null(spindle_tokenizer_id_to_token(NULL, 0));
}

static void test_log_level_names(void **state) {
    (void)state;
    assert_string_equal(spindle_log_level_name(SPINDLE_LOG_ERROR), "error");
    assert_string_equal(spindle_log_level_name(SPINDLE_LOG_WARN), "warn");
    assert_string_equal(spindle_log_level_name(SPINDLE_LOG_INFO), "info");
    assert_string_equal(spindle_log_level_name(SPINDLE_LOG_DEBUG), "debug");
    assert_null(spindle_log_level_name((spindle_log_level)4));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_reason_names),
        cmocka_unit_test(test_null_handles),
        cmocka_unit_test(test_log_level_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
