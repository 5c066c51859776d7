/* sp_matmul_check (matmul.c): the predicate the loader asks before it binds
 * a weight. Weights a kernel can multiply pass and give finite products;
 * every weight no kernel can use is refused with a reason (sp_matmul itself
 * would fill such a product with NaNs, which is what a model used to
 * produce at run time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "compute/ggml/ggml_quants.h"
#include "compute/matmul/matmul.h"

enum { ROWS = 4, COLS = 256 };

static _Alignas(64) uint8_t data[ROWS * COLS * 4];
static _Alignas(64) uint16_t qparams[ROWS * COLS / 32];
static float x[COLS], y[ROWS];

static sp_weight f32_weight(void) {
    return (sp_weight){.type = SP_W_F32, .rows = ROWS, .cols = COLS,
                       .data = data};
}

static sp_weight affine_weight(int bits, int group) {
    return (sp_weight){.type = SP_W_AFFINE, .rows = ROWS, .cols = COLS,
                       .data = data, .bits = bits, .group_size = group,
                       .qparam_dtype = SP_DTYPE_BF16, .scales = qparams,
                       .biases = qparams};
}

static sp_weight ggml_weight(uint32_t type, int64_t cols, size_t offset) {
    return (sp_weight){.type = SP_W_GGML, .rows = ROWS, .cols = cols,
                       .data = data + offset, .ggml_type = type};
}

static void expect_usable(const sp_weight *w, const char *what) {
    const char *why = sp_matmul_check(w);
    if (why) fail_msg("%s refused: %s", what, why);
    sp_matmul(NULL, w, x, 1, y);
    for (int r = 0; r < ROWS; r++)
        if (!isfinite(y[r])) fail_msg("%s: y[%d] = %g", what, r, y[r]);
}

static void expect_refused(const sp_weight *w, const char *what) {
    const char *why = sp_matmul_check(w);
    if (!why || !*why) fail_msg("%s accepted", what);
}

static void test_usable_weights(void **state) {
    (void)state;
    memset(data, 0, sizeof data);
    memset(qparams, 0, sizeof qparams);
    for (int i = 0; i < COLS; i++) x[i] = 1.0f;
    sp_weight w = f32_weight();
    expect_usable(&w, "f32");
    w.type = SP_W_BF16;
    expect_usable(&w, "bf16");
    w.type = SP_W_F16;
    expect_usable(&w, "f16");
    const int bits[] = {2, 3, 4, 5, 6, 8};
    for (int b = 0; b < 6; b++)
        for (int g = 32; g <= 128; g *= 2) {
            w = affine_weight(bits[b], g);
            expect_usable(&w, "affine");
        }
    w = ggml_weight(SP_GGML_Q4_0, COLS, 0);
    expect_usable(&w, "q4_0");
    w = ggml_weight(SP_GGML_Q6_K, COLS, 0);
    expect_usable(&w, "q6_k");
}

static void test_unusable_weights(void **state) {
    (void)state;
    expect_refused(NULL, "no weight");
    sp_weight w = f32_weight();
    w.data = NULL;
    expect_refused(&w, "no data");
    w = f32_weight();
    w.cols = 0;
    expect_refused(&w, "no columns");
    w = f32_weight();
    w.rows = -1;
    expect_refused(&w, "negative rows");
    w = f32_weight();
    w.type = (sp_wtype)99;
    expect_refused(&w, "unknown storage type");
    w = affine_weight(7, 64);
    expect_refused(&w, "7-bit affine");
    w = affine_weight(4, 16);
    expect_refused(&w, "affine group 16");
    w = affine_weight(4, 64);
    w.cols = COLS - 32;
    expect_refused(&w, "affine columns not whole groups");
    w = affine_weight(4, 64);
    w.qparam_dtype = SP_DTYPE_I32;
    expect_refused(&w, "affine int32 scales");
    w = affine_weight(4, 64);
    w.biases = NULL;
    expect_refused(&w, "affine without biases");
    w = ggml_weight(SP_GGML_IQ2_XXS, COLS, 0);
    expect_refused(&w, "iq2_xxs (no dequantizer)");
    w = ggml_weight(SP_GGML_Q8_1, COLS, 0);
    expect_refused(&w, "q8_1 (activation type only)");
    w = ggml_weight(999, COLS, 0);
    expect_refused(&w, "unknown ggml type");
    w = ggml_weight(SP_GGML_Q4_0, COLS - 16, 0);
    expect_refused(&w, "q4_0 columns not whole blocks");
    w = ggml_weight(SP_GGML_Q4_0, COLS, 1);
    expect_refused(&w, "q4_0 misaligned blocks");
    /* what a model would have computed with it */
    sp_matmul(NULL, &w, x, 1, y);
    for (int r = 0; r < ROWS; r++) assert_true(isnan(y[r]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usable_weights),
        cmocka_unit_test(test_unusable_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
