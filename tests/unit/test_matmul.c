/* Matrix products for every weight storage type against a reference written
 * here: weights are generated from known values (float bits built from sign,
 * exponent and mantissa; affine codes packed by an independent bit-by-bit
 * packer), decoded with ldexp-based formulas and multiplied in double.
 *
 * Tolerance: |y - y_ref| <= 1e-5 * sqrt(cols) * sum_c |w_rc| |x_tc| (for
 * affine weights |w| is taken as |s q| + |b|, the size of the terms that are
 * rounded while dequantizing). f32 accumulation over cols terms has a typical
 * relative error of a few 2^-24 * sqrt(cols); 1e-5 leaves a wide margin
 * while any wrong code, scale, group or row shows up as an O(1) error.
 *
 * Every kernel level the CPU has (portable, AVX2, AVX-512: matmul_simd.h)
 * is run against the same reference with the same tolerance: they all
 * accumulate exact f32 products in f32 and differ only in summation order.
 * Their float-type span decoders must match bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/matmul/matmul.h"
#include "compute/matmul/matmul_simd.h"

/* ------------------------------------------------------------ generators */

/* rng_u32, rng_unit, rng_f16_bits, rng_bf16_bits. */
#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "test_util.h"

/* --------------------------------------------------- independent decoders */

static float ref_f16(uint16_t h) {
    const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) { /* inf / NaN: IEEE widening keeps the payload */
        uint32_t u = ((uint32_t)sign << 31) | 0x7f800000u | ((uint32_t)m << 13);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (float)(sign ? -v : v);
}

static float ref_bf16(uint16_t h) {
    const int sign = h >> 15, e = (h >> 7) & 255, m = h & 127;
    if (e == 255) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    return (float)(sign ? -v : v);
}

/* ------------------------------------------------------------ test weights */

/* A weight plus what the test knows about it. Buffers are offset by `skew`
 * bytes to model unaligned tensors inside an mmapped file. */
typedef struct test_weight {
    sp_weight w;
    uint8_t *data_buf, *scale_buf, *bias_buf;
    float *dense;  /* [rows][cols]: the intended value of each element */
    float *mag;    /* [rows][cols]: size of the rounded terms (see header) */
} test_weight;

static float qparam_value(sp_dtype t, const uint8_t *p, size_t i) {
    if (t == SP_DTYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t == SP_DTYPE_F16 ? ref_f16(h) : ref_bf16(h);
}

static void put_qparam(sp_dtype t, uint8_t *p, size_t i, int small) {
    if (t == SP_DTYPE_F32) {
        float f = rng_unit() * (small ? 0.05f : 1.0f);
        memcpy(p + 4 * i, &f, 4);
    } else if (t == SP_DTYPE_F16) {
        uint16_t h = small ? rng_f16_bits(8, 12) : rng_f16_bits(12, 15);
        memcpy(p + 2 * i, &h, 2);
    } else {
        uint16_t h = small ? rng_bf16_bits(118, 122) : rng_bf16_bits(122, 127);
        memcpy(p + 2 * i, &h, 2);
    }
}

static void make_float_weight(test_weight *tw, sp_wtype type, int64_t rows,
                              int64_t cols, int skew) {
    memset(tw, 0, sizeof *tw);
    const size_t n = (size_t)(rows * cols);
    const size_t es = type == SP_W_F32 ? 4 : 2;
    tw->data_buf = malloc(n * es + 8);
    tw->dense = malloc(n * sizeof(float));
    tw->mag = malloc(n * sizeof(float));
    assert_true(tw->data_buf && tw->dense && tw->mag);
    uint8_t *d = tw->data_buf + skew;
    for (size_t i = 0; i < n; i++) {
        float v;
        if (type == SP_W_F32) {
            v = rng_unit();
            memcpy(d + 4 * i, &v, 4);
        } else {
            uint16_t h = type == SP_W_F16 ? rng_f16_bits(10, 15)
                                          : rng_bf16_bits(122, 127);
            memcpy(d + 2 * i, &h, 2);
            v = type == SP_W_F16 ? ref_f16(h) : ref_bf16(h);
        }
        tw->dense[i] = v;
        tw->mag[i] = fabsf(v);
    }
    tw->w = (sp_weight){.type = type, .rows = rows, .cols = cols, .data = d};
}

/* Pack code q of element c at bits [c*bits, (c+1)*bits) of the row's bit
 * stream, one bit at a time (MLX's layout). */
static void pack_code(uint8_t *row, int64_t c, int bits, uint32_t q) {
    for (int b = 0; b < bits; b++) {
        const uint64_t bit = (uint64_t)c * (uint64_t)bits + (uint64_t)b;
        if ((q >> b) & 1u) row[bit / 8] |= (uint8_t)(1u << (bit % 8));
    }
}

static void make_affine_weight(test_weight *tw, int64_t rows, int64_t cols,
                               int bits, int gs, sp_dtype qt, int skew) {
    memset(tw, 0, sizeof *tw);
    const size_t row_bytes = (size_t)cols * (size_t)bits / 8;
    const size_t groups = (size_t)(rows * (cols / gs));
    const size_t qs = qt == SP_DTYPE_F32 ? 4 : 2;
    tw->data_buf = calloc(row_bytes * (size_t)rows + 8, 1);
    tw->scale_buf = malloc(groups * qs + 8);
    tw->bias_buf = malloc(groups * qs + 8);
    tw->dense = malloc((size_t)(rows * cols) * sizeof(float));
    tw->mag = malloc((size_t)(rows * cols) * sizeof(float));
    assert_true(tw->data_buf && tw->scale_buf && tw->bias_buf && tw->dense &&
                tw->mag);
    uint8_t *d = tw->data_buf + skew;
    uint8_t *sc = tw->scale_buf + skew, *bi = tw->bias_buf + 2 * skew;
    for (size_t g = 0; g < groups; g++) {
        put_qparam(qt, sc, g, 1);
        put_qparam(qt, bi, g, 0);
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            const uint32_t q = rng_u32() & ((1u << bits) - 1u);
            pack_code(d + (size_t)r * row_bytes, c, bits, q);
            const size_t g = (size_t)(r * (cols / gs) + c / gs);
            const double s = qparam_value(qt, sc, g);
            const double b = qparam_value(qt, bi, g);
            tw->dense[r * cols + c] = (float)(s * q + b);
            tw->mag[r * cols + c] = (float)(fabs(s * q) + fabs(b));
        }
    }
    tw->w = (sp_weight){.type = SP_W_AFFINE, .rows = rows, .cols = cols,
                        .data = d, .bits = bits, .group_size = gs,
                        .qparam_dtype = qt, .scales = sc, .biases = bi};
}

/* E2M1 code q (OCP MX: sign, 2 exponent bits of bias 1, 1 mantissa bit).
 * Code 8 (-0) decodes as +0, as in ggml's table (MLX gives -0, which no sum
 * tells apart). */
static double ref_e2m1(int q) {
    const int e = (q >> 1) & 3, m = q & 1;
    const double mag = e ? ldexp(1.0 + 0.5 * m, e - 1) : 0.5 * m;
    return q & 8 ? 0.0 - mag : mag;
}

/* MLX mxfp4: codes packed as 4-bit affine ones, one E8M0 byte per 32.
 * Exponents from `e_lo` to `e_hi` (the edges 0, 1 and 254 decode too). */
static void make_mxfp4_weight(test_weight *tw, int64_t rows, int64_t cols,
                              int e_lo, int e_hi, int skew) {
    memset(tw, 0, sizeof *tw);
    const size_t row_bytes = (size_t)cols / 2, groups = (size_t)(rows * (cols / 32));
    tw->data_buf = calloc(row_bytes * (size_t)rows + 8, 1);
    tw->scale_buf = malloc(groups + 8);
    tw->dense = malloc((size_t)(rows * cols) * sizeof(float));
    tw->mag = malloc((size_t)(rows * cols) * sizeof(float));
    assert_true(tw->data_buf && tw->scale_buf && tw->dense && tw->mag);
    uint8_t *d = tw->data_buf + skew, *sc = tw->scale_buf + skew;
    for (size_t g = 0; g < groups; g++)
        sc[g] = (uint8_t)(e_lo + (int)(rng_u32() % (uint32_t)(e_hi - e_lo + 1)));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const int q = (int)(rng_u32() & 15u);
            pack_code(d + (size_t)r * row_bytes, c, 4, (uint32_t)q);
            const int e = sc[(size_t)(r * (cols / 32) + c / 32)];
            const float v = (float)(ref_e2m1(q) * ldexp(1.0, e - 127));
            tw->dense[r * cols + c] = v;
            tw->mag[r * cols + c] = fabsf(v);
        }
    tw->w = (sp_weight){.type = SP_W_MXFP4, .rows = rows, .cols = cols,
                        .data = d, .bits = 4, .group_size = 32, .scales = sc};
}

static void free_weight(test_weight *tw) {
    free(tw->data_buf);
    free(tw->scale_buf);
    free(tw->bias_buf);
    free(tw->dense);
    free(tw->mag);
}

/* --------------------------------------------------------------- checking */

static sp_pool *pools[3]; /* NULL, 2 threads, 3 threads */

static int setup_pools(void **state) {
    (void)state;
    pools[0] = NULL;
    pools[1] = sp_pool_create(2);
    pools[2] = sp_pool_create(3);
    /* exact kernels, whatever SPINDLE_MATMUL_INT8 / SPINDLE_MATMUL_BF16 */
    sp_mm_int8_force(false);
    sp_mm_bf16_force(false);
    return pools[1] && pools[2] ? 0 : -1;
}

static int teardown_pools(void **state) {
    (void)state;
    sp_pool_destroy(pools[1]);
    sp_pool_destroy(pools[2]);
    return 0;
}

static void check_close(const float *y, const double *ref, const double *mag,
                        int64_t n, int64_t cols, const char *what) {
    const double tol_scale = 1e-5 * sqrt((double)cols);
    for (int64_t i = 0; i < n; i++) {
        const double err = fabs((double)y[i] - ref[i]);
        if (!(err <= tol_scale * mag[i] + 1e-30))
            fail_msg("%s: element %lld: got %.9g want %.9g (tol %.3g)", what,
                     (long long)i, (double)y[i], ref[i], tol_scale * mag[i]);
    }
}

/* sp_matmul (every pool) and sp_matmul_reference against the double
 * reference for n_tokens random activation rows. */
static void check_matmul(const test_weight *tw, int n_tokens,
                         const char *what) {
    const int64_t rows = tw->w.rows, cols = tw->w.cols;
    float *x = malloc((size_t)(n_tokens * cols) * sizeof *x);
    float *y = malloc((size_t)(n_tokens * rows) * sizeof *y);
    double *ref = malloc((size_t)(n_tokens * rows) * sizeof *ref);
    double *mag = malloc((size_t)(n_tokens * rows) * sizeof *mag);
    assert_true(x && y && ref && mag);
    for (int64_t i = 0; i < n_tokens * cols; i++) x[i] = rng_unit();
    for (int t = 0; t < n_tokens; t++) {
        for (int64_t r = 0; r < rows; r++) {
            double acc = 0, m = 0;
            for (int64_t c = 0; c < cols; c++) {
                acc += (double)tw->dense[r * cols + c] * x[t * cols + c];
                m += (double)tw->mag[r * cols + c] * fabs(x[t * cols + c]);
            }
            ref[t * rows + r] = acc;
            mag[t * rows + r] = m;
        }
    }
    char label[200];
    for (int lv = 0; lv < SP_SIMD_COUNT; lv++) {
        if (!sp_simd_available((sp_simd_level)lv)) continue;
        assert_true(sp_simd_force((sp_simd_level)lv));
        for (int p = 0; p < 3; p++) {
            for (int64_t i = 0; i < n_tokens * rows; i++) y[i] = NAN;
            sp_matmul(pools[p], &tw->w, x, n_tokens, y);
            snprintf(label, sizeof label, "%s tokens=%d pool=%d simd=%s", what,
                     n_tokens, sp_pool_size(pools[p]),
                     sp_simd_name((sp_simd_level)lv));
            check_close(y, ref, mag, n_tokens * rows, cols, label);
        }
    }
    sp_simd_force(sp_simd_supported());
    for (int64_t i = 0; i < n_tokens * rows; i++) y[i] = NAN;
    sp_matmul_reference(&tw->w, x, n_tokens, y);
    snprintf(label, sizeof label, "%s tokens=%d reference", what, n_tokens);
    check_close(y, ref, mag, n_tokens * rows, cols, label);
    free(x);
    free(y);
    free(ref);
    free(mag);
}

/* sp_weight_row and the SIMD span decoders: bit-exact for float types; for
 * affine within one rounding of each of s*q and +b. */
static void check_rows(const test_weight *tw, const char *what) {
    const int64_t cols = tw->w.cols;
    float *out = malloc((size_t)cols * sizeof *out);
    assert_non_null(out);
    for (int lv = 0; lv < SP_SIMD_COUNT; lv++) {
        if (!sp_simd_available((sp_simd_level)lv)) continue;
        assert_true(sp_simd_force((sp_simd_level)lv));
        const sp_mm_kernels *k = sp_mm_active();
        for (int64_t r = 0; r < tw->w.rows; r++) {
            for (int64_t c = 0; c < cols; c++) out[c] = NAN;
            if (!k || !k->decode(&tw->w, r, 0, cols, out))
                sp_weight_row(&tw->w, r, out);
            for (int64_t c = 0; c < cols; c++) {
                const float want = tw->dense[r * cols + c];
                const int ok = tw->w.type == SP_W_AFFINE
                                   ? fabsf(out[c] - want) <=
                                         0x1p-23f * tw->mag[r * cols + c]
                                   : memcmp(&out[c], &want, 4) == 0;
                if (!ok)
                    fail_msg("%s simd=%s: row %lld col %lld: got %.9g want %.9g",
                             what, sp_simd_name((sp_simd_level)lv),
                             (long long)r, (long long)c, (double)out[c],
                             (double)want);
            }
        }
    }
    sp_simd_force(sp_simd_supported());
    free(out);
}

static const int64_t test_rows[] = {1, 3, 17, 33};
/* 1-4 take the fused row kernels, 5 and 9 the tiled GEMM with partial
 * token blocks. */
static const int test_tokens[] = {1, 2, 3, 4, 5, 9};
#define N_TEST_TOKENS (int)(sizeof test_tokens / sizeof test_tokens[0])

static void test_float_types(void **state) {
    (void)state;
    static const sp_wtype types[] = {SP_W_F32, SP_W_F16, SP_W_BF16};
    static const int64_t cols_list[] = {1, 7, 13, 100, 600};
    char what[128];
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t ri = 0; ri < 4; ri++)
            for (size_t ci = 0; ci < 5; ci++)
                for (int skew = 0; skew < 2; skew++) {
                    test_weight tw;
                    make_float_weight(&tw, types[ti], test_rows[ri],
                                      cols_list[ci], skew);
                    snprintf(what, sizeof what, "type=%d rows=%lld cols=%lld skew=%d",
                             (int)types[ti], (long long)test_rows[ri],
                             (long long)cols_list[ci], skew);
                    check_rows(&tw, what);
                    for (int k = 0; k < N_TEST_TOKENS; k++)
                        check_matmul(&tw, test_tokens[k], what);
                    free_weight(&tw);
                }
}

static void test_affine(void **state) {
    (void)state;
    static const int bits_list[] = {2, 3, 4, 5, 6, 8};
    static const int gs_list[] = {32, 64, 128};
    static const sp_dtype qts[] = {SP_DTYPE_F32, SP_DTYPE_F16, SP_DTYPE_BF16};
    char what[160];
    int n = 0;
    for (size_t bi = 0; bi < 6; bi++)
        for (size_t gi = 0; gi < 3; gi++)
            for (size_t qi = 0; qi < 3; qi++)
                for (size_t ri = 0; ri < 4; ri++) {
                    /* One group, three groups, and a width that crosses the
                     * kernels' 512-column tile. */
                    const int gs = gs_list[gi];
                    const int64_t cols_list[] = {gs, 3 * gs, 640};
                    for (size_t ci = 0; ci < 3; ci++) {
                        const int skew = (n++) % 3 == 1;
                        test_weight tw;
                        make_affine_weight(&tw, test_rows[ri], cols_list[ci],
                                           bits_list[bi], gs, qts[qi], skew);
                        snprintf(what, sizeof what,
                                 "affine bits=%d gs=%d qdtype=%d rows=%lld cols=%lld skew=%d",
                                 bits_list[bi], gs, (int)qts[qi],
                                 (long long)test_rows[ri],
                                 (long long)cols_list[ci], skew);
                        check_rows(&tw, what);
                        for (int k = 0; k < N_TEST_TOKENS; k++)
                            check_matmul(&tw, test_tokens[k], what);
                        free_weight(&tw);
                    }
                }
}

/* MLX mxfp4: decoded bit for bit (exponent edges included), products within
 * the f32 bound of every path (fused rows, tiles, each level). */
static void test_mxfp4(void **state) {
    (void)state;
    static const int64_t cols_list[] = {32, 96, 640};
    char what[160];
    for (size_t ri = 0; ri < 4; ri++)
        for (size_t ci = 0; ci < 3; ci++) {
            const int skew = (int)((ri + ci) % 2);
            test_weight tw;
            make_mxfp4_weight(&tw, test_rows[ri], cols_list[ci], 0, 254, skew);
            snprintf(what, sizeof what, "mxfp4 decode rows=%lld cols=%lld",
                     (long long)test_rows[ri], (long long)cols_list[ci]);
            check_rows(&tw, what);
            free_weight(&tw);
            make_mxfp4_weight(&tw, test_rows[ri], cols_list[ci], 118, 130, skew);
            snprintf(what, sizeof what, "mxfp4 rows=%lld cols=%lld skew=%d",
                     (long long)test_rows[ri], (long long)cols_list[ci], skew);
            check_rows(&tw, what);
            for (int k = 0; k < N_TEST_TOKENS; k++)
                check_matmul(&tw, test_tokens[k], what);
            free_weight(&tw);
        }
}

/* sp_weight_row_block: each block of a stacked weight (an expert of a
 * [3 * 17][cols] tensor) multiplies and decodes exactly as the same rows of
 * the whole weight, bit for bit, in decode and prefill. */
static void check_row_blocks(const test_weight *tw, const char *what) {
    const int64_t rows = tw->w.rows, cols = tw->w.cols, per = rows / 3;
    static const int tokens[] = {1, 5};
    float *x = malloc((size_t)(9 * cols) * sizeof(float));
    float *full = malloc((size_t)(9 * rows) * sizeof(float));
    float *part = malloc((size_t)(9 * rows) * sizeof(float));
    float *row = malloc((size_t)cols * sizeof(float));
    float *want = malloc((size_t)cols * sizeof(float));
    assert_true(x && full && part && row && want);
    fill_uniform(x, (int)(9 * cols), -1.0f, 1.0f);
    for (int ti = 0; ti < 2; ti++) {
        const int nt = tokens[ti];
        sp_matmul(pools[1], &tw->w, x, nt, full);
        for (int64_t e = 0; e < 3; e++) {
            sp_weight b = sp_weight_row_block(&tw->w, e * per, per);
            assert_int_equal(b.rows, per);
            sp_matmul(pools[1], &b, x, nt, part);
            for (int t = 0; t < nt; t++)
                for (int64_t r = 0; r < per; r++)
                    if (part[t * per + r] != full[t * rows + e * per + r])
                        fail_msg("%s: block %lld row %lld token %d: %g vs %g",
                                 what, (long long)e, (long long)r, t,
                                 part[t * per + r],
                                 full[t * rows + e * per + r]);
            sp_weight_row(&b, per - 1, row);
            sp_weight_row(&tw->w, e * per + per - 1, want);
            assert_memory_equal(row, want, (size_t)cols * sizeof(float));
        }
    }
    free(x), free(full), free(part), free(row), free(want);
}

static void test_row_blocks(void **state) {
    (void)state;
    static const sp_wtype types[] = {SP_W_F32, SP_W_F16, SP_W_BF16};
    test_weight tw;
    for (size_t ti = 0; ti < 3; ti++) {
        make_float_weight(&tw, types[ti], 3 * 17, 640, 1);
        check_row_blocks(&tw, "float");
        free_weight(&tw);
    }
    static const int bits_list[] = {3, 4, 8};
    for (size_t bi = 0; bi < 3; bi++) {
        make_affine_weight(&tw, 3 * 17, 640, bits_list[bi], 64,
                           SP_DTYPE_BF16, 1);
        check_row_blocks(&tw, "affine");
        free_weight(&tw);
    }
    make_mxfp4_weight(&tw, 3 * 17, 640, 118, 130, 1);
    check_row_blocks(&tw, "mxfp4");
    free_weight(&tw);
}

/* Every f16 bit pattern, through sp_weight_row, bit for bit (NaNs: sign
 * and payload, the quiet bit aside). */
static void test_f16_all_values(void **state) {
    (void)state;
    uint16_t *h = malloc(65536 * sizeof *h);
    float *out = malloc(65536 * sizeof *out);
    assert_true(h && out);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    sp_weight w = {.type = SP_W_F16, .rows = 1, .cols = 65536, .data = h};
    sp_weight_row(&w, 0, out);
    for (uint32_t i = 0; i < 65536; i++) {
        const float want = ref_f16((uint16_t)i);
        uint32_t got_bits, want_bits;
        memcpy(&got_bits, &out[i], 4);
        memcpy(&want_bits, &want, 4);
        /* Signalling NaNs may come back quiet (as F16C hardware does). */
        if (isnan(want)) {
            got_bits &= ~0x00400000u;
            want_bits &= ~0x00400000u;
        }
        if (got_bits != want_bits)
            fail_msg("f16 0x%04x: got %a want %a", i, (double)out[i],
                     (double)want);
    }
    free(h);
    free(out);
}

/* A larger case with many row tiles per thread and both paths. */
static void test_large(void **state) {
    (void)state;
    test_weight tw;
    make_affine_weight(&tw, 301, 1536, 4, 64, SP_DTYPE_BF16, 1);
    check_matmul(&tw, 1, "large affine");
    check_matmul(&tw, 7, "large affine");
    free_weight(&tw);
    make_float_weight(&tw, SP_W_BF16, 257, 1030, 0);
    check_matmul(&tw, 1, "large bf16");
    check_matmul(&tw, 3, "large bf16");
    /* several full token blocks of the GEMM micro-kernel plus a tail */
    check_matmul(&tw, 23, "large bf16");
    free_weight(&tw);
    make_float_weight(&tw, SP_W_F32, 70, 777, 1);
    check_matmul(&tw, 40, "large f32");
    free_weight(&tw);
    /* Aligned f32 rows are used in place, the tokens in L2-sized blocks
     * (84 tokens at 777 columns): two whole blocks and a partial one. */
    make_float_weight(&tw, SP_W_F32, 70, 777, 0);
    check_matmul(&tw, 200, "large f32 in place, token blocks");
    free_weight(&tw);
}

/* A prefill of 37 tokens (six full token blocks of the GEMM micro-kernel
 * and a tail) with an odd row count (a row tile, a partial one and partial
 * packed panels) for every type the SIMD tables decode: float rows, and
 * 4/8-bit affine rows with each group size and scale type. */
static void test_prefill(void **state) {
    (void)state;
    static const sp_wtype types[] = {SP_W_F32, SP_W_F16, SP_W_BF16};
    static const int gs_list[] = {32, 64, 128};
    static const sp_dtype qts[] = {SP_DTYPE_F32, SP_DTYPE_F16, SP_DTYPE_BF16};
    char what[96];
    test_weight tw;
    for (int ti = 0; ti < 3; ti++) {
        make_float_weight(&tw, types[ti], 45, 300, ti % 2);
        snprintf(what, sizeof what, "prefill type=%d", (int)types[ti]);
        check_matmul(&tw, 37, what);
        free_weight(&tw);
    }
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gi = 0; gi < 3; gi++) {
            make_affine_weight(&tw, 45, 384, bits, gs_list[gi], qts[gi], gi == 1);
            snprintf(what, sizeof what, "prefill affine bits=%d gs=%d qdtype=%d",
                     bits, gs_list[gi], (int)qts[gi]);
            check_matmul(&tw, 37, what);
            free_weight(&tw);
        }
}

/* The SIMD tile products on their own (matmul_ggml.c calls them with its
 * own tiles): row counts across several packed panels, column counts off
 * every vector width and across the packing block, strided operands, and
 * both store and accumulate modes, against a double reference. */
static void test_tile_kernels(void **state) {
    (void)state;
    static const int nrs[] = {1, 5, 16, 31, 32, 33, 70};
    static const int nts[] = {1, 6, 7, 13};
    static const int64_t kns[] = {1, 15, 17, 128, 131, 300};
    const int64_t ldt = 311, ldx = 305, ldy = 80;
    float *tile = malloc(70 * ldt * sizeof *tile);
    float *x = malloc(13 * ldx * sizeof *x);
    float *y = malloc(13 * ldy * sizeof *y);
    float *y0 = malloc(13 * ldy * sizeof *y0);
    assert_true(tile && x && y && y0);
    for (int64_t i = 0; i < 70 * ldt; i++) tile[i] = rng_unit();
    for (int64_t i = 0; i < 13 * ldx; i++) x[i] = rng_unit();
    for (int64_t i = 0; i < 13 * ldy; i++) y0[i] = rng_unit();
    /* variants: the tile of every SIMD level, then the opt-in bf16 tile,
     * which rounds activations and (exact for bf16 weights, not for these
     * random f32 tiles) the tile to bf16: 2^-8 relative each per product */
    const int has_bf16 = sp_mm_bf16_force(false) && sp_mm_bf16_force(true);
    sp_mm_bf16_force(false);
    for (int lv = 1; lv <= SP_SIMD_COUNT; lv++) {
        const int bf16 = lv == SP_SIMD_COUNT; /* on the CPU's top level */
        if (bf16 ? !has_bf16 : !sp_simd_available((sp_simd_level)lv)) continue;
        assert_true(sp_simd_force(bf16 ? sp_simd_supported() : (sp_simd_level)lv));
        const sp_mm_kernels *k = sp_mm_active();
        const double rel = bf16 ? 0x1p-7 + 0x1p-16 : 0.0;
        for (size_t a = 0; a < 7; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 6; c++)
                    for (int accumulate = 0; accumulate < 2; accumulate++) {
                        const int nr = nrs[a], nt = nts[b];
                        const int64_t kn = kns[c];
                        memcpy(y, y0, 13 * ldy * sizeof *y);
                        (bf16 ? sp_mm_tile_bf16 : k->tile)(
                            tile, ldt, nr, x, ldx, nt, kn, y, ldy, accumulate);
                        for (int t = 0; t < 13; t++)
                            for (int i = 0; i < ldy; i++) {
                                const float got = y[t * ldy + i];
                                if (t >= nt || i >= nr) { /* untouched */
                                    if (memcmp(&got, &y0[t * ldy + i], 4))
                                        fail_msg("tile simd=%d wrote outside",
                                                 lv);
                                    continue;
                                }
                                double want = accumulate ? y0[t * ldy + i] : 0;
                                double mag = fabs(want);
                                for (int64_t j = 0; j < kn; j++) {
                                    want += (double)tile[i * ldt + j] *
                                            x[t * ldx + j];
                                    mag += fabs((double)tile[i * ldt + j] *
                                                x[t * ldx + j]);
                                }
                                if (!(fabs(got - want) <=
                                      (rel + 1e-5 * sqrt((double)kn + 1)) * mag))
                                    fail_msg("tile simd=%d nr=%d nt=%d kn=%lld "
                                             "acc=%d: [%d][%d] got %.9g want %.9g",
                                             lv, nr, nt, (long long)kn,
                                             accumulate, t, i, (double)got, want);
                            }
                    }
    }
    sp_simd_force(sp_simd_supported());
    free(tile);
    free(x);
    free(y);
    free(y0);
}

/* sp_matmul with SPINDLE_MATMUL_BF16's tile switched on: bf16 weights
 * above SP_MM_SMALL_TOKENS tokens, within the bf16-activation bound
 * 2^-8 sum |w x| (plus f32 accumulation) of the exact product. */
static void test_bf16_opt_in(void **state) {
    (void)state;
    if (!sp_mm_bf16_force(true)) {
        skip();
        return;
    }
    sp_mm_bf16_force(false);
    test_weight tw;
    make_float_weight(&tw, SP_W_BF16, 70, 777, 1);
    const int nt = 13;
    const int64_t rows = 70, cols = 777;
    float *x = malloc(nt * cols * sizeof *x);
    float *y = malloc(nt * rows * sizeof *y);
    float *y_exact = malloc(nt * rows * sizeof *y);
    assert_true(x && y && y_exact);
    for (int64_t i = 0; i < nt * cols; i++) x[i] = rng_unit();
    sp_matmul(pools[1], &tw.w, x, nt, y_exact);
    assert_true(sp_mm_bf16_force(true));
    assert_true(sp_mm_bf16_active());
    sp_matmul(pools[1], &tw.w, x, nt, y);
    sp_mm_bf16_force(false);
    int differs = 0;
    for (int t = 0; t < nt; t++)
        for (int64_t r = 0; r < rows; r++) {
            double want = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                want += (double)tw.dense[r * cols + c] * x[t * cols + c];
                mag += fabs((double)tw.dense[r * cols + c] * x[t * cols + c]);
            }
            const float got = y[t * rows + r];
            differs |= got != y_exact[t * rows + r];
            if (!(fabs(got - want) <= (0x1p-8 + 1e-5 * sqrt((double)cols)) * mag))
                fail_msg("bf16 tile: [%d][%lld] got %.9g want %.9g", t,
                         (long long)r, (double)got, want);
        }
    assert_true(differs); /* the opt-in path really ran */
    free(x);
    free(y);
    free(y_exact);
    free_weight(&tw);
}

/* Descriptors the kernels cannot handle yield NaNs, not wild reads. */
static void test_unusable_weight(void **state) {
    (void)state;
    uint8_t data[64] = {0};
    float qp[4] = {1, 1, 1, 1};
    float x[64] = {0}, y[2], row[64];
    const sp_weight bad[] = {
        {.type = SP_W_AFFINE, .rows = 2, .cols = 32, .data = data, .bits = 7,
         .group_size = 32, .qparam_dtype = SP_DTYPE_F32, .scales = qp,
         .biases = qp},
        {.type = SP_W_AFFINE, .rows = 2, .cols = 32, .data = data, .bits = 4,
         .group_size = 0, .qparam_dtype = SP_DTYPE_F32, .scales = qp,
         .biases = qp},
        {.type = SP_W_AFFINE, .rows = 2, .cols = 48, .data = data, .bits = 4,
         .group_size = 32, .qparam_dtype = SP_DTYPE_F32, .scales = qp,
         .biases = qp},
        {.type = SP_W_AFFINE, .rows = 2, .cols = 32, .data = data, .bits = 4,
         .group_size = 32, .qparam_dtype = SP_DTYPE_I8, .scales = qp,
         .biases = qp},
        {.type = SP_W_F32, .rows = 2, .cols = 32, .data = NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        y[0] = y[1] = 0;
        sp_matmul(pools[1], &bad[i], x, 1, y);
        assert_true(isnan(y[0]) && isnan(y[1]));
        y[0] = y[1] = 0;
        sp_matmul_reference(&bad[i], x, 1, y);
        assert_true(isnan(y[0]) && isnan(y[1]));
        row[0] = 0;
        sp_weight_row(&bad[i], 0, row);
        assert_true(isnan(row[0]));
    }
    /* A row index out of range. */
    const sp_weight ok = {.type = SP_W_F32, .rows = 2, .cols = 4, .data = qp};
    row[0] = 0;
    sp_weight_row(&ok, 2, row);
    assert_true(isnan(row[0]));
}

/* The int8-activation row kernels through sp_matmul, at every level that
 * has one (avx2, avxvnni, avx512; AArch64: dotprod, i8mm). Bound: rounding x_j to dx * round(x_j / dx), dx = max|x| / 127 over each
 * 128-column chunk, moves each term by at most |s q_j| dx / 2 (0.51 allows
 * for the rounded 1 / dx), on top of the f32 tolerance of check_close. */
static void test_int8_affine(void **state) {
    (void)state;
    if (!sp_mm_int8_force(true)) {
        skip();
        return;
    }
#if defined(__aarch64__)
    static const sp_simd_level int8_levels[] = {SP_SIMD_DOTPROD, SP_SIMD_I8MM,
                                                SP_SIMD_I8MM};
#else
    static const sp_simd_level int8_levels[] = {SP_SIMD_AVX2, SP_SIMD_AVXVNNI,
                                                SP_SIMD_AVX512};
#endif
    static const int bits_list[] = {4, 8};
    static const int gs_list[] = {32, 64, 128};
    static const sp_dtype qts[] = {SP_DTYPE_F32, SP_DTYPE_F16, SP_DTYPE_BF16};
    static const int64_t cols_list[] = {128, 384};
    static const int64_t rows_list[] = {1, 3, 17};
    int n = 0;
    for (size_t bi = 0; bi < 2; bi++)
    for (size_t gi = 0; gi < 3; gi++)
    for (size_t qi = 0; qi < 3; qi++)
    for (size_t ci = 0; ci < 2; ci++)
    for (size_t ri = 0; ri < 3; ri++)
    for (int nt = 1; nt <= 4; nt++) {
        test_weight tw;
        const int64_t rows = rows_list[ri], cols = cols_list[ci];
        make_affine_weight(&tw, rows, cols, bits_list[bi], gs_list[gi],
                           qts[qi], (n++) % 2);
        float *x = malloc((size_t)(nt * cols) * sizeof *x);
        float *y = malloc((size_t)(nt * rows) * sizeof *y);
        assert_true(x && y);
        for (int64_t i = 0; i < nt * cols; i++) x[i] = rng_unit();
        for (int p = 0; p < 6; p++) {
            const sp_simd_level lv = int8_levels[p / 2];
            if (!sp_simd_force(lv)) continue;
            assert_true(sp_mm_int8_force(true) && sp_mm_int8_active());
            sp_matmul(pools[p % 2], &tw.w, x, nt, y);
            for (int t = 0; t < nt; t++)
                for (int64_t r = 0; r < rows; r++) {
                    double ref = 0, mag = 0, qerr = 0;
                    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
                        double amax = 0, m = 0;
                        for (int64_t c = c0; c < c0 + 128; c++) {
                            const double xv = x[t * cols + c];
                            const double wv = tw.dense[r * cols + c];
                            ref += wv * xv;
                            mag += tw.mag[r * cols + c] * fabs(xv);
                            m += tw.mag[r * cols + c];
                            amax = fmax(amax, fabs(xv));
                        }
                        qerr += 0.51 * (amax / 127) * m;
                    }
                    const double got = y[t * rows + r];
                    const double tol = qerr + 1e-5 * sqrt((double)cols) * mag;
                    if (!(fabs(got - ref) <= tol))
                        fail_msg("int8 %s bits=%d gs=%d q=%d rows=%lld cols=%lld "
                                 "t=%d r=%lld: got %.9g want %.9g tol %.3g",
                                 sp_simd_name(lv), bits_list[bi], gs_list[gi], (int)qts[qi],
                                 (long long)rows, (long long)cols, t,
                                 (long long)r, got, ref, tol);
                }
        }
        free(x);
        free(y);
        free_weight(&tw);
    }
    sp_mm_int8_force(false);
    sp_simd_force(sp_simd_supported());
}

/* 9..16 tokens at precision fast where no int8 GEMM runs (AVX2, AVX-VNNI,
 * AArch64) go through the int8 row kernels in two passes instead of the f32
 * tiles (matmul.c's sp_mm_rows_pass), so each token gets exactly the bits
 * it gets alone. */
static void test_int8_rows_in_passes(void **state) {
    (void)state;
#if defined(__aarch64__)
    static const sp_simd_level int8_levels[] = {SP_SIMD_DOTPROD, SP_SIMD_I8MM};
#else
    static const sp_simd_level int8_levels[] = {SP_SIMD_AVX2, SP_SIMD_AVXVNNI};
#endif
    const int64_t rows = 37, cols = 256;
    float x[16 * 256], all[16 * 37], one[37];
    for (int64_t i = 0; i < 16 * cols; i++) x[i] = rng_unit();
    int checked = 0;
    for (int bits = 4; bits <= 8; bits += 4) {
        test_weight tw;
        make_affine_weight(&tw, rows, cols, bits, 64, SP_DTYPE_BF16, 0);
        for (size_t li = 0; li < 2; li++) {
            if (!sp_simd_force(int8_levels[li]) || !sp_mm_int8_force(true))
                continue;
            sp_mm_precision_force(SP_PRECISION_FAST);
            for (int nt = 9; nt <= 16; nt++) {
                sp_matmul(pools[nt % 2], &tw.w, x, nt, all);
                for (int t = 0; t < nt; t++) {
                    sp_matmul(pools[1], &tw.w, x + t * cols, 1, one);
                    if (memcmp(one, all + t * rows, sizeof one) != 0)
                        fail_msg("%s bits=%d: token %d of %d differs from "
                                 "its one-token product",
                                 sp_simd_name(int8_levels[li]), bits, t, nt);
                }
            }
            checked++;
        }
        free_weight(&tw);
    }
    sp_mm_precision_force(SP_PRECISION_HIGH);
    sp_mm_int8_force(false);
    sp_simd_force(sp_simd_supported());
    if (!checked) skip();
}

/* Levels above the CPU's, and those of another ISA, are refused; the
 * scalar level always exists, and every other level has a kernel table. */
static void test_simd_levels(void **state) {
    (void)state;
    const sp_simd_level top = sp_simd_supported();
    assert_true(sp_simd_force(SP_SIMD_SCALAR));
    assert_null(sp_mm_active());
    assert_true(sp_simd_available(top));
    for (int lv = 0; lv < SP_SIMD_COUNT; lv++) {
        const sp_simd_level l = (sp_simd_level)lv;
#if defined(__x86_64__)
        assert_int_equal(sp_simd_available(l),
                         l == SP_SIMD_AVXVNNI ? sp_cpu_features_get()->avxvnni
                                              : lv <= (int)top);
#elif defined(__aarch64__)
        assert_int_equal(sp_simd_available(l),
                         l == SP_SIMD_SCALAR || (lv >= SP_SIMD_NEON && lv <= (int)top));
#endif
        assert_int_equal(sp_simd_force(l), sp_simd_available(l));
        if (!sp_simd_available(l)) continue;
        assert_int_equal(sp_simd_current(), lv);
        if (l != SP_SIMD_SCALAR) {
            assert_non_null(sp_mm_active());
            /* (the AArch64 levels share the NEON f32 kernels) */
            assert_string_equal(sp_mm_active()->name,
                                sp_simd_neon_active() ? "neon" : sp_simd_name(l));
        }
    }
    assert_false(sp_simd_force(SP_SIMD_COUNT));
    assert_true(sp_simd_force(top));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simd_levels),
        cmocka_unit_test(test_f16_all_values),
        cmocka_unit_test(test_float_types),
        cmocka_unit_test(test_affine),
        cmocka_unit_test(test_mxfp4),
        cmocka_unit_test(test_row_blocks),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_prefill),
        cmocka_unit_test(test_tile_kernels),
        cmocka_unit_test(test_bf16_opt_in),
        cmocka_unit_test(test_int8_affine),
        cmocka_unit_test(test_int8_rows_in_passes),
        cmocka_unit_test(test_unusable_weight),
    };
    return cmocka_run_group_tests(tests, setup_pools, teardown_pools);
}
