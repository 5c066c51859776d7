/* sp_attention_latent (src/compute/attention/attention_latent.c) against a
 * naive double reference: n_heads queries over one KV head's rows, scores
 * over the whole row, values the rows' first v_dim elements. The rows sit
 * in a paged view whose blocks are out of order, and the contexts span
 * several of the kernel's key ranges, so the merge of a token's ranges is
 * checked; each cache element type; the pool's threads give the serial
 * run's bits. Unsupported arguments (a window, sinks) are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/ops.h"
#include "compute/threadpool.h"
#include "runtime/kv_cache.h"

#include "test_util.h"

enum { BLOCK = 32 };

static double widen(const unsigned char *buf, size_t i, sp_kv_dtype type) {
    if (type == SP_KV_F32) return ((const float *)buf)[i];
    const uint16_t h = ((const uint16_t *)buf)[i];
    return type == SP_KV_BF16 ? ref_bf16_value(h) : ref_f16_value(h);
}

typedef struct latent_case {
    int n_keys, n_q, n_heads, head_dim, v_dim;
    sp_kv_dtype type;
} latent_case;

static void run_case(const latent_case *c, sp_pool *pool) {
    const int n_blocks = (c->n_keys + BLOCK - 1) / BLOCK;
    const int hd = c->head_dim, vd = c->v_dim, H = c->n_heads;
    const size_t es = sp_kv_elem_size(c->type);
    unsigned char *slab = calloc((size_t)n_blocks * BLOCK * hd, es);
    int32_t *table = malloc((size_t)n_blocks * sizeof *table);
    /* block b of the sequence is slab block n_blocks - 1 - b */
    for (int b = 0; b < n_blocks; b++) table[b] = n_blocks - 1 - b;
    float *row = malloc((size_t)hd * sizeof *row);
    for (int p = 0; p < c->n_keys; p++) {
        fill_uniform(row, hd, -1.0f, 1.0f);
        const size_t at = ((size_t)table[p / BLOCK] * BLOCK + p % BLOCK) * hd;
        sp_kv_convert(slab + at * es, row, (size_t)hd, c->type);
    }
    const size_t qn = (size_t)c->n_q * H * hd, on = (size_t)c->n_q * H * vd;
    float *q = malloc(qn * sizeof *q), *out = malloc(on * sizeof *out),
          *serial = malloc(on * sizeof *serial);
    fill_uniform(q, (int)qn, -1.0f, 1.0f);
    const sp_attention_args a = {
        .q = q, .out = out, .n_q = c->n_q,
        .first_pos = c->n_keys - c->n_q, .n_heads = H, .n_kv_heads = 1,
        .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
        .kv = {.k = slab, .head_stride = (int64_t)BLOCK * hd, .type = c->type,
               .blocks = table, .block_rows = BLOCK, .n_blocks = n_blocks,
               .block_stride = (int64_t)BLOCK * hd}};
    float *partials = malloc(sp_attention_latent_partials(&a, vd) *
                             sizeof *partials);
    sp_attention_args s = a;
    s.out = serial;
    assert_int_equal(sp_attention_latent(NULL, &s, vd, partials, NULL),
                     SPINDLE_OK);
    assert_int_equal(sp_attention_latent(pool, &a, vd, partials, NULL),
                     SPINDLE_OK);
    assert_memory_equal(out, serial, on * sizeof *out);
    double *sc = malloc((size_t)c->n_keys * sizeof *sc);
    for (int t = 0; t < c->n_q; t++)
        for (int h = 0; h < H; h++) {
            const float *qh = q + ((size_t)t * H + h) * hd;
            const int last = a.first_pos + t;
            double m = -INFINITY, z = 0.0;
            for (int j = 0; j <= last; j++) {
                const size_t at =
                    ((size_t)table[j / BLOCK] * BLOCK + j % BLOCK) * hd;
                double d = 0.0;
                for (int i = 0; i < hd; i++)
                    d += (double)qh[i] * widen(slab, at + i, c->type);
                sc[j] = d * a.scale;
                if (sc[j] > m) m = sc[j];
            }
            for (int j = 0; j <= last; j++) z += (sc[j] = exp(sc[j] - m));
            for (int i = 0; i < vd; i++) {
                double acc = 0.0;
                for (int j = 0; j <= last; j++) {
                    const size_t at =
                        ((size_t)table[j / BLOCK] * BLOCK + j % BLOCK) * hd;
                    acc += sc[j] * widen(slab, at + i, c->type);
                }
                assert_close(out[((size_t)t * H + h) * vd + i], acc / z,
                             2e-5, 1e-4, i);
            }
        }
    free(sc);
    free(partials);
    free(q);
    free(out);
    free(serial);
    free(row);
    free(table);
    free(slab);
}

static void test_against_reference(void **state) {
    (void)state;
    sp_pool *pool = sp_pool_create(2);
    const sp_kv_dtype types[] = {SP_KV_F32, SP_KV_BF16, SP_KV_F16};
    /* 1 key, one range; 300 keys, three ranges (decode and a chunk); rows
     * of MLA's shape (512 + 64) */
    const latent_case cases[] = {
        {1, 1, 4, 24, 16, SP_KV_F32},   {300, 1, 4, 24, 16, SP_KV_F32},
        {300, 40, 3, 40, 32, SP_KV_F32}, {130, 2, 8, 576, 512, SP_KV_F32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (size_t k = 0; k < 3; k++) {
            latent_case c = cases[i];
            c.type = types[k];
            run_case(&c, pool);
        }
    sp_pool_destroy(pool);
}

static void test_unsupported(void **state) {
    (void)state;
    float q[8] = {0}, out[8], partials[64], k[BLOCK * 8] = {0};
    int32_t table[1] = {0};
    const sp_attention_args good = {
        .q = q, .out = out, .n_q = 1, .first_pos = 0, .n_heads = 1,
        .n_kv_heads = 1, .head_dim = 8, .scale = 1.0f,
        .kv = {.k = k, .head_stride = BLOCK * 8, .type = SP_KV_F32,
               .blocks = table, .block_rows = BLOCK, .n_blocks = 1,
               .block_stride = BLOCK * 8}};
    assert_int_equal(sp_attention_latent(NULL, &good, 4, partials, NULL),
                     SPINDLE_OK);
    sp_attention_args a = good;
    a.window = 4;
    spindle_error err = {0};
    assert_int_equal(sp_attention_latent(NULL, &a, 4, partials, &err),
                     SPINDLE_ERR_UNSUPPORTED);
    a = good;
    a.n_kv_heads = 2;
    assert_int_equal(sp_attention_latent(NULL, &a, 4, partials, &err),
                     SPINDLE_ERR_ARGUMENT);
    a = good;
    a.first_pos = BLOCK;   /* past the one block */
    assert_int_equal(sp_attention_latent(NULL, &a, 4, partials, &err),
                     SPINDLE_ERR_ARGUMENT);
    assert_int_equal(sp_attention_latent(NULL, &good, 9, partials, &err),
                     SPINDLE_ERR_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
