/* config.json numbers outside int's range are errors, not undefined
 * conversions (fuzz corpus regress-config-huge-*): partial_rotary_factor,
 * rope_scaling original_max_position_embeddings, quantization bits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/config.h"

static char dir[64];

static spindle_status load_with(const char *extra, spindle_error *err) {
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fprintf(f, "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
               "\"intermediate_size\": 8, \"num_attention_heads\": 4, \"vocab_size\": 10%s}",
            extra);
    fclose(f);
    sp_model_config cfg;
    spindle_status st = sp_config_load(dir, &cfg, err);
    if (st == SPINDLE_OK) sp_config_free(&cfg);
    return st;
}

static void test_huge_numbers(void **state) {
    (void)state;
    spindle_error err = {0};
    assert_int_equal(load_with("", &err), SPINDLE_OK);
    assert_int_equal(load_with(", \"partial_rotary_factor\": 1e300", &err), SPINDLE_ERR_FORMAT);
    assert_non_null(strstr(err.message, "partial_rotary_factor"));
    assert_int_equal(load_with(", \"quantization\": {\"bits\": 1e300, \"group_size\": 64}", &err),
                     SPINDLE_ERR_FORMAT);
    assert_non_null(strstr(err.message, "bits"));
    assert_int_equal(load_with(", \"quantization\": {\"bits\": 4, \"group_size\": 64}", &err),
                     SPINDLE_OK);
    assert_int_equal(load_with(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 2, "
                               "\"original_max_position_embeddings\": 1e300}", &err),
                     SPINDLE_ERR_FORMAT);
    assert_non_null(strstr(err.message, "original_max_position_embeddings"));
    assert_int_equal(load_with(", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2, "
                               "\"original_max_position_embeddings\": 4096}", &err),
                     SPINDLE_OK);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/sp_config_test_%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_huge_numbers)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return rc;
}
