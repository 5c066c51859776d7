/* Matrix products against ggml block-quantized weights (SP_W_GGML,
 * matmul_ggml.c via sp_matmul / sp_weight_row) for every type Spindle can
 * dequantize. Blocks are random bytes with their f16/f32 scale fields
 * replaced by random finite values; the reference dequantizes each row with
 * the same bit-exact sp_dequantize_row_* (checked against the gguf package
 * by tests/unit_py/test_gguf_dequant.py) and sums in double.
 *
 * Tolerance: |y - y_ref| <= 1e-5 * sqrt(cols) * sum_c |w_rc x_tc| + 1e-30,
 * as in test_matmul.c: f32 accumulation differs from double by a few 2^-24
 * * sqrt(cols) relative to that sum, while a wrong block, row, tile edge or
 * token shows up as an O(1) error. Every SIMD level the CPU has is run (they
 * provide the tile dot products). Precision is forced to exact: in the other
 * modes few-token products quantize the activations as llama.cpp does
 * (tests/unit/test_ggml_dot.c checks those). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/ggml/ggml_quants.h"
#include "compute/matmul/matmul.h"
#include "compute/matmul/matmul_simd.h"

#define TEST_RNG_SEED 0x243f6a8885a308d3ull
#include "test_util.h"

static void put16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }

/* Offsets of the f16 scale fields of each block type. */
typedef struct scale_fields {
    uint32_t type;
    size_t off[2];
    int n;
} scale_fields;

static const scale_fields fields[] = {
    {SP_GGML_Q4_0, {offsetof(sp_block_q4_0, d)}, 1},
    {SP_GGML_Q4_1, {offsetof(sp_block_q4_1, d), offsetof(sp_block_q4_1, m)}, 2},
    {SP_GGML_Q5_0, {offsetof(sp_block_q5_0, d)}, 1},
    {SP_GGML_Q5_1, {offsetof(sp_block_q5_1, d), offsetof(sp_block_q5_1, m)}, 2},
    {SP_GGML_Q8_0, {offsetof(sp_block_q8_0, d)}, 1},
    {SP_GGML_Q2_K, {offsetof(sp_block_q2_K, d), offsetof(sp_block_q2_K, dmin)}, 2},
    {SP_GGML_Q3_K, {offsetof(sp_block_q3_K, d)}, 1},
    {SP_GGML_Q4_K, {offsetof(sp_block_q4_K, d), offsetof(sp_block_q4_K, dmin)}, 2},
    {SP_GGML_Q5_K, {offsetof(sp_block_q5_K, d), offsetof(sp_block_q5_K, dmin)}, 2},
    {SP_GGML_Q6_K, {offsetof(sp_block_q6_K, d)}, 1},
};

static const uint32_t all_types[] = {
    SP_GGML_F32,  SP_GGML_F16,  SP_GGML_BF16, SP_GGML_Q4_0, SP_GGML_Q4_1,
    SP_GGML_Q5_0, SP_GGML_Q5_1, SP_GGML_Q8_0, SP_GGML_Q2_K, SP_GGML_Q3_K,
    SP_GGML_Q4_K, SP_GGML_Q5_K, SP_GGML_Q6_K, SP_GGML_Q8_K,
};

/* rows x cols weights of `type`, random but finite. */
static unsigned char *make_weights(uint32_t type, int64_t rows, int64_t cols,
                                   size_t *row_bytes) {
    const sp_ggml_type_traits *tr = sp_ggml_traits(type);
    assert_non_null(tr);
    *row_bytes = sp_ggml_row_size(type, cols);
    assert_true(*row_bytes > 0);
    size_t n = *row_bytes * (size_t)rows;
    unsigned char *d = aligned_alloc(64, (n + 63) / 64 * 64);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) d[i] = (unsigned char)rng_u32();
    size_t blocks = n / tr->type_size;
    for (size_t b = 0; b < blocks; b++) {
        unsigned char *blk = d + b * tr->type_size;
        if (type == SP_GGML_F32) {
            float f = rng_unit();
            memcpy(blk, &f, 4);
        } else if (type == SP_GGML_F16) {
            put16(blk, rng_f16_bits(10, 16));
        } else if (type == SP_GGML_BF16) {
            float f = rng_unit();
            uint32_t u;
            memcpy(&u, &f, 4);
            put16(blk, (uint16_t)(u >> 16));
        } else if (type == SP_GGML_Q8_K) {
            float f = rng_unit() * 0.01f;
            memcpy(blk, &f, 4);
        } else {
            for (size_t k = 0; k < sizeof fields / sizeof *fields; k++)
                if (fields[k].type == type)
                    for (int j = 0; j < fields[k].n; j++)
                        put16(blk + fields[k].off[j], rng_f16_bits(5, 12));
        }
    }
    return d;
}

static void check_type(uint32_t type, int64_t rows, int64_t cols, int nt,
                       sp_pool *pool) {
    const sp_ggml_type_traits *tr = sp_ggml_traits(type);
    size_t rb;
    unsigned char *data = make_weights(type, rows, cols, &rb);
    sp_weight w = {.type = SP_W_GGML, .rows = rows, .cols = cols,
                   .data = data, .ggml_type = type};
    float *x = malloc(sizeof(float) * (size_t)(nt * cols));
    float *y = malloc(sizeof(float) * (size_t)(nt * rows));
    float *row = malloc(sizeof(float) * (size_t)cols);
    float *got = malloc(sizeof(float) * (size_t)cols);
    assert_true(x && y && row && got);
    for (int64_t i = 0; i < nt * cols; i++) x[i] = rng_unit();
    sp_matmul(pool, &w, x, nt, y);
    for (int64_t r = 0; r < rows; r++) {
        tr->to_f32(data + (size_t)r * rb, row, cols);
        sp_weight_row(&w, r, got);
        assert_memory_equal(got, row, sizeof(float) * (size_t)cols);
        for (int t = 0; t < nt; t++) {
            double acc = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                double p = (double)row[c] * x[t * cols + c];
                acc += p;
                mag += fabs(p);
            }
            double g = y[t * rows + r];
            if (!(fabs(g - acc) <= 1e-5 * sqrt((double)cols) * mag + 1e-30))
                fail_msg("%s %lldx%lld t=%d r=%lld: got %.9g want %.9g",
                         tr->name, (long long)rows, (long long)cols, t,
                         (long long)r, g, acc);
        }
    }
    free(x); free(y); free(row); free(got); free(data);
}

static void run_all(sp_pool *pool) {
    for (size_t i = 0; i < sizeof all_types / sizeof *all_types; i++) {
        uint32_t type = all_types[i];
        int64_t bs = sp_ggml_traits(type)->block_size;
        /* One block; several blocks across a 512-column tile edge; odd row
         * counts around the 8-row tile; token counts around the SIMD
         * small-batch limit. */
        int64_t cols1 = bs, cols2 = bs == 256 ? 768 : (bs == 1 ? 531 : 1184);
        check_type(type, 1, cols1, 1, pool);
        check_type(type, 13, cols2, 3, pool);
        check_type(type, 37, cols1 * 2, 5, pool);
        check_type(type, 9, cols2, 1, pool);
    }
}

static void test_all_levels(void **s) {
    (void)s;
    sp_pool *pools[2] = {NULL, sp_pool_create(2)};
    assert_non_null(pools[1]);
    sp_simd_level top = sp_simd_supported();
    sp_mm_precision_force(SP_PRECISION_EXACT);
    for (int lv = 0; lv < SP_SIMD_COUNT; lv++) {
        if (!sp_simd_available((sp_simd_level)lv)) continue;
        assert_true(sp_simd_force((sp_simd_level)lv));
        for (int p = 0; p < 2; p++) run_all(pools[p]);
    }
    sp_simd_force(top);
    sp_mm_precision_force(SP_PRECISION_HIGH);
    sp_pool_destroy(pools[1]);
}

/* sp_weight_row_block on a stacked ggml tensor (3 experts of 13 rows): each
 * block gives, bit for bit, the same products (decode and prefill, in the
 * default precision) and rows as those rows of the whole tensor. */
static void test_row_blocks(void **s) {
    (void)s;
    static const uint32_t types[] = {SP_GGML_F16, SP_GGML_Q4_0, SP_GGML_Q8_0,
                                     SP_GGML_Q4_K};
    static const int tokens[] = {1, 5};
    sp_pool *pool = sp_pool_create(2);
    const int64_t per = 13, rows = 3 * per, cols = 768;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        size_t rb;
        unsigned char *data = make_weights(types[i], rows, cols, &rb);
        sp_weight w = {.type = SP_W_GGML, .rows = rows, .cols = cols,
                       .data = data, .ggml_type = types[i]};
        float x[5 * 768], full[5 * 39], part[5 * 13], a[768], b[768];
        for (int64_t j = 0; j < 5 * cols; j++) x[j] = rng_unit();
        for (int ti = 0; ti < 2; ti++) {
            sp_matmul(pool, &w, x, tokens[ti], full);
            for (int64_t e = 0; e < 3; e++) {
                sp_weight blk = sp_weight_row_block(&w, e * per, per);
                sp_matmul(pool, &blk, x, tokens[ti], part);
                for (int t = 0; t < tokens[ti]; t++)
                    assert_memory_equal(part + t * per,
                                        full + t * rows + e * per,
                                        (size_t)per * sizeof(float));
                sp_weight_row(&blk, per - 1, a);
                sp_weight_row(&w, e * per + per - 1, b);
                assert_memory_equal(a, b, sizeof a);
            }
        }
        free(data);
    }
    sp_pool_destroy(pool);
}

/* 9..16 tokens of the k-quants at precision fast (their int8 GEMM starts
 * at 17) go through the decode kernels in two passes (matmul_ggml.c), so
 * each token gets exactly its one-token product, at every level. */
static void test_fast_tokens_in_passes(void **s) {
    (void)s;
    static const uint32_t types[] = {SP_GGML_Q4_K, SP_GGML_Q5_K, SP_GGML_Q6_K};
    sp_pool *pool = sp_pool_create(2);
    const int64_t rows = 21, cols = 512;
    const sp_simd_level top = sp_simd_supported();
    sp_mm_precision_force(SP_PRECISION_FAST);
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        size_t rb;
        unsigned char *data = make_weights(types[i], rows, cols, &rb);
        sp_weight w = {.type = SP_W_GGML, .rows = rows, .cols = cols,
                       .data = data, .ggml_type = types[i]};
        float x[16 * 512], all[16 * 21], one[21];
        for (int64_t j = 0; j < 16 * cols; j++) x[j] = rng_unit();
        for (int lv = 0; lv < SP_SIMD_COUNT; lv++) {
            if (!sp_simd_force((sp_simd_level)lv)) continue;
            for (int nt = 9; nt <= 16; nt += 7) {
                sp_matmul(pool, &w, x, nt, all);
                for (int t = 0; t < nt; t++) {
                    sp_matmul(pool, &w, x + t * cols, 1, one);
                    if (memcmp(one, all + t * rows, sizeof one) != 0)
                        fail_msg("%s %s, token %d of %d: not its one-token "
                                 "product", sp_ggml_traits(types[i])->name,
                                 sp_simd_name((sp_simd_level)lv), t, nt);
                }
            }
        }
        free(data);
    }
    sp_simd_force(top);
    sp_mm_precision_force(SP_PRECISION_HIGH);
    sp_pool_destroy(pool);
}

/* Descriptors the kernels cannot run produce NaNs, never a wild read. */
static void test_unusable(void **s) {
    (void)s;
    size_t rb;
    unsigned char *data = make_weights(SP_GGML_Q4_0, 2, 64, &rb);
    float x[2 * 64] = {0}, y[4], row[64];
    sp_weight bad[] = {
        {.type = SP_W_GGML, .rows = 2, .cols = 48, .data = data,
         .ggml_type = SP_GGML_Q4_0},                   /* partial block */
        {.type = SP_W_GGML, .rows = 2, .cols = 64, .data = data,
         .ggml_type = SP_GGML_IQ2_XXS},                /* no dequantizer */
        {.type = SP_W_GGML, .rows = 2, .cols = 64, .data = data,
         .ggml_type = 99},                             /* unknown */
        {.type = SP_W_GGML, .rows = 2, .cols = 64, .data = data + 1,
         .ggml_type = SP_GGML_Q4_0},                   /* misaligned */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sp_matmul(NULL, &bad[i], x, 2, y);
        for (int j = 0; j < 4; j++) assert_true(isnan(y[j]));
    }
    sp_weight ok = {.type = SP_W_GGML, .rows = 2, .cols = 64, .data = data,
                    .ggml_type = SP_GGML_Q4_0};
    sp_weight_row(&ok, 2, row);
    assert_true(isnan(row[0]) && isnan(row[63]));
    sp_weight_row(&ok, -1, row);
    assert_true(isnan(row[0]));
    assert_int_equal(sp_weight_nbytes(&ok), 2 * 2 * 18);
    free(data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_levels),
        cmocka_unit_test(test_row_blocks),
        cmocka_unit_test(test_fast_tokens_in_passes),
        cmocka_unit_test(test_unusable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
