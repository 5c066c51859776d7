/* config.json numbers outside int's range are errors, not undefined
 * conversions (fuzz corpus regress-config-huge-*): partial_rotary_factor,
 * rope_scaling original_max_position_embeddings, quantization bits. And the
 * quantization modes: MLX's affine and mxfp4, as the block's default and
 * per module (mlx-lm: a module's own entry without a mode is affine). */
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

/* The mode, bits and group size sp_config_quant_rule gives `module`. */
static void rule_of(const char *quant, const char *module, sp_quant_rule want,
                    bool mxfp4, int bits) {
    char path[128], extra[512];
    snprintf(extra, sizeof extra, ", \"quantization\": %s", quant);
    spindle_error err = {0};
    assert_int_equal(load_with(extra, &err), SPINDLE_OK);
    snprintf(path, sizeof path, "%s", dir);
    sp_model_config cfg;
    assert_int_equal(sp_config_load(path, &cfg, &err), SPINDLE_OK);
    int b = -1, g = -1;
    bool mx = !mxfp4;
    assert_int_equal(sp_config_quant_rule(&cfg, module, &b, &g, &mx), want);
    assert_int_equal(mx, mxfp4);
    assert_int_equal(b, bits);
    sp_config_free(&cfg);
}

static void test_quant_modes(void **state) {
    (void)state;
    spindle_error err = {0};
    const char *mixed = "{\"group_size\": 64, \"bits\": 8, \"mode\": \"affine\", "
                        "\"e\": {\"group_size\": 32, \"bits\": 4, \"mode\": \"mxfp4\"}, "
                        "\"r\": {\"group_size\": 64, \"bits\": 8}, "
                        "\"bad\": {\"group_size\": 32, \"bits\": 4, \"mode\": \"nvfp4\"}}";
    rule_of(mixed, "e", SP_QUANT_EXPLICIT, true, 4);
    rule_of(mixed, "r", SP_QUANT_EXPLICIT, false, 8);
    rule_of(mixed, "other", SP_QUANT_INFER, false, 8);
    rule_of(mixed, "bad", SP_QUANT_EXPLICIT, false, 0); /* refused at binding */
    const char *all = "{\"group_size\": 32, \"bits\": 4, \"mode\": \"mxfp4\", "
                      "\"r\": {\"group_size\": 64, \"bits\": 8}}";
    rule_of(all, "other", SP_QUANT_INFER, true, 4);
    rule_of(all, "r", SP_QUANT_EXPLICIT, false, 8);
    assert_int_equal(load_with(", \"quantization\": {\"group_size\": 16, \"bits\": 4, "
                               "\"mode\": \"nvfp4\"}", &err),
                     SPINDLE_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "nvfp4"));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/sp_config_test_%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_huge_numbers),
                                       cmocka_unit_test(test_quant_modes)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return rc;
}
