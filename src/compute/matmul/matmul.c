/* Matrix products y = x W^T against weights of every storage type.
 *
 * Work is split over output rows: each pool chunk is a contiguous block of
 * rows. With SIMD kernels (matmul_simd.h) and at most SP_MM_SMALL_TOKENS
 * tokens (SP_MM_DECODE_TOKENS for the int8 row kernels), fused kernels
 * stream the packed rows once. Otherwise rows are taken
 * SP_MM_ROWS at a time and columns SP_MM_COLS at a time: the tile of weights
 * is decoded once to f32 (on the stack, no allocation) and then dotted with
 * every token's activations, so the decode cost is shared by all tokens of a
 * prefill. The portable dot products keep independent partial sums per lane
 * so that gcc vectorizes them without -ffast-math. */
#include "compute/matmul/matmul.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "compute/matmul/matmul_int8_rows.h"
#include "compute/matmul/matmul_internal.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/ggml/matmul_ggml.h"
#include "compute/matmul/matmul_vnni_gemm.h"

#define SP_MM_ROWS 32   /* rows decoded per tile: a whole SIMD GEMM panel */
#define SP_MM_COLS 512  /* columns per tile: a multiple of every group size */
#define SP_MM_LANES 16  /* independent partial sums per dot */

static float sp_dot(const float *restrict a, const float *restrict x,
                    int64_t n) {
    float s[SP_MM_LANES] = {0};
    int64_t i = 0;
    /* Lane j sums elements j, j + LANES, ...: an order gcc may keep while
     * vectorizing (a single running sum would have to stay scalar). */
    for (; i + SP_MM_LANES <= n; i += SP_MM_LANES)
        for (int j = 0; j < SP_MM_LANES; j++) s[j] += a[i + j] * x[i + j];
    float t = 0;
    for (int j = 0; j < SP_MM_LANES; j++) t += s[j];
    for (; i < n; i++) t += a[i] * x[i];
    return t;
}

/* Portable tile product (same contract as sp_mm_kernels.tile). */
void sp_mm_tile_portable(const float *tile, int64_t ldt, int nr,
                             const float *x, int64_t ldx, int nt, int64_t kn,
                             float *y, int64_t ldy, bool accumulate) {
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (int64_t)t * ldx;
        float *yt = y + (int64_t)t * ldy;
        for (int i = 0; i < nr; i++) {
            const float d = sp_dot(tile + i * ldt, xt, kn);
            yt[i] = accumulate ? yt[i] + d : d;
        }
    }
}

typedef bool sp_int8_rows_fn(const sp_weight *w, const float *x, int n_tokens,
                             float *y, int64_t r0, int64_t r1, int levels);

/* The int8 row kernel of the level in use (while sp_mm_int8_active()):
 * AVX-512 VNNI where the CPU has it, else the ymm ones; dotprod (SDOT) on
 * AArch64. */
static sp_int8_rows_fn *sp_mm_int8_rows(void) {
#if defined(__x86_64__)
    switch (sp_simd_current()) {
    case SP_SIMD_AVX512:
        if (sp_cpu_features_get()->avx512vnni) return sp_mm_rows_vnni;
        return sp_mm_rows_int8_avx2;
    case SP_SIMD_AVXVNNI: return sp_mm_rows_int8_avxvnni;
    default: return sp_mm_rows_int8_avx2;
    }
#elif defined(__aarch64__)
    return sp_mm_rows_dotprod;
#else
    return sp_mm_rows_vnni; /* (covers nothing there) */
#endif
}

/* Whether that kernel covers w for n_tokens tokens and `levels`. */
static bool sp_mm_int8_rows_cover(const sp_weight *w, int n_tokens, int levels) {
#if defined(__aarch64__)
    return sp_mm_rows_dotprod_covers(w, n_tokens, levels);
#else
    return sp_int8_rows_cover(w, n_tokens, levels);
#endif
}

static void sp_fill_nan(float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = NAN;
}

/* Which kernels run one product, chosen once per call by sp_mm_choose. */
typedef enum sp_mm_path {
    SP_MM_PATH_ROWS_INT8, /* few tokens, int8 activations (sp_mm_int8_rows) */
    SP_MM_PATH_ROWS,      /* few tokens, the level's fused rows */
    SP_MM_PATH_GEMM_INT8, /* many tokens, int8 activations (sp_mm_gemm_vnni) */
    SP_MM_PATH_TILES      /* f32 tiles: any usable weight */
} sp_mm_path;

typedef struct sp_mm_job {
    const sp_weight *w;
    const float *x;
    float *y;
    int n_tokens;
    bool direct; /* F32 rows are used in place (aligned data) */
    const sp_mm_kernels *k; /* NULL: portable */
    sp_mm_path path;
    int levels;             /* int8 parts per activation (the INT8 paths) */
    sp_int8_rows_fn *int8_rows; /* SP_MM_PATH_ROWS_INT8's kernel */
    bool bf16;              /* sp_mm_tile_bf16 instead of k->tile */
} sp_mm_job;

typedef void sp_tile_fn(const float *tile, int64_t ldt, int nr,
                        const float *x, int64_t ldx, int nt, int64_t kn,
                        float *y, int64_t ldy, bool accumulate);

/* Tokens per block when f32 weights are used in place: the block's
 * activations (tokens x cols floats) stay in a core's L2 while every row
 * tile of the thread's range passes over them, instead of all tokens
 * streaming from memory once per 32 rows (an encoder pass of 4,096 tokens
 * has 6-25 MB of activations per product). A multiple of the micro-kernels'
 * token count (6). Decoded weights keep one block: each tile's decode is
 * then shared by every token. */
static int64_t token_block(const sp_mm_job *job) {
    if (!job->direct) return job->n_tokens;
    int64_t tb = (256 * 1024 / (int64_t)sizeof(float)) / job->w->cols;
    tb = tb < 48 ? 48 : tb > 480 ? 480 : tb;
    return tb / 6 * 6;
}

/* Rows [r0, r1) times tokens [t, t + nt), tile by tile. */
static void sp_mm_range_tokens(const sp_mm_job *job, int64_t r0, int64_t r1,
                               int64_t t, int nt) {
    const sp_weight *w = job->w;
    const int64_t rows = w->rows, cols = w->cols;
    _Alignas(64) float tile[SP_MM_ROWS][SP_MM_COLS];
    const sp_mm_kernels *k = job->k;
    sp_tile_fn *tile_fn = job->bf16 ? sp_mm_tile_bf16
                          : k       ? k->tile
                                    : sp_mm_tile_portable;

    for (int64_t r = r0; r < r1; r += SP_MM_ROWS) {
        const int nr = r1 - r < SP_MM_ROWS ? (int)(r1 - r) : SP_MM_ROWS;
        for (int64_t k0 = 0; k0 < cols; k0 += SP_MM_COLS) {
            const int64_t kn = cols - k0 < SP_MM_COLS ? cols - k0 : SP_MM_COLS;
            const float *t0;
            int64_t ldt;
            if (job->direct) {
                t0 = (const float *)w->data + r * cols + k0;
                ldt = cols;
            } else {
                for (int i = 0; i < nr; i++)
                    if (!k || !k->decode(w, r + i, k0, kn, tile[i]))
                        sp_decode_span(w, r + i, k0, kn, tile[i]);
                t0 = tile[0];
                ldt = SP_MM_COLS;
            }
            tile_fn(t0, ldt, nr, job->x + t * cols + k0, cols, nt, kn,
                    job->y + t * rows + r, rows, k0 > 0);
        }
    }
}

/* Tiled path: decode a tile of rows once, then multiply it with every
 * token (of a block, for f32 weights in place), so the decode cost is
 * shared by all tokens of a prefill. */
static void sp_mm_range(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const sp_mm_job *job = ctx;
    const int64_t tb = token_block(job);
    for (int64_t t = 0; t < job->n_tokens; t += tb)
        sp_mm_range_tokens(job, r0, r1, t,
                           job->n_tokens - t < tb ? (int)(job->n_tokens - t)
                                                  : (int)tb);
}

/* The few-token int8-activation kernel of this architecture: AVX-512 VNNI
 * on x86-64, dotprod on AArch64 (each refuses everything elsewhere). */
#if defined(__aarch64__)
#define sp_mm_rows_int8 sp_mm_rows_dotprod
#define sp_mm_rows_int8_covers sp_mm_rows_dotprod_covers
#else
#define sp_mm_rows_int8 sp_mm_rows_vnni
#define sp_mm_rows_int8_covers sp_mm_rows_vnni_covers
#endif

/* Few tokens: the fused kernels stream each weight row once. (A kernel can
 * still refuse at run time, out of scratch memory: then the next path.) */
static void sp_mm_rows_range(void *ctx, int64_t r0, int64_t r1,
                             int thread_id) {
    const sp_mm_job *job = ctx;
    if (job->path == SP_MM_PATH_ROWS_INT8 &&
        job->int8_rows(job->w, job->x, job->n_tokens, job->y, r0, r1,
                       job->levels))
        return;
    if (job->k && job->k->rows(job->w, job->x, job->n_tokens, job->y, r0, r1))
        return;
    sp_mm_range(ctx, r0, r1, thread_id);
}

/* Many tokens, affine weights, int8 modes, AVX-512 VNNI: the GEMM takes the whole
 * block of rows (it packs its own panels). */
static void sp_mm_gemm_range(void *ctx, int64_t r0, int64_t r1,
                             int thread_id) {
    const sp_mm_job *job = ctx;
    if (!sp_mm_gemm_vnni(job->w, job->x, job->n_tokens, job->y, r0, r1,
                         job->levels))
        sp_mm_range(ctx, r0, r1, thread_id);
}

/* The kernels for w and n_tokens under the level and precision in use
 * (cpu_features.h). */
static sp_mm_path sp_mm_choose(const sp_weight *w, int n_tokens,
                               const sp_mm_kernels *k, int levels) {
    const bool int8 = k && sp_mm_int8_active();
    if (n_tokens <= SP_MM_DECODE_TOKENS && int8 &&
        sp_mm_int8_rows_cover(w, n_tokens, levels))
        return SP_MM_PATH_ROWS_INT8;
    if (n_tokens <= SP_MM_SMALL_TOKENS) {
        if (k && k->covers(w, n_tokens)) return SP_MM_PATH_ROWS;
        return SP_MM_PATH_TILES;
    }
    if (int8 && sp_mm_int8_gemm_active() &&
        sp_mm_gemm_vnni_covers(w, n_tokens, levels))
        return SP_MM_PATH_GEMM_INT8;
    return SP_MM_PATH_TILES;
}

/* Tokens of a first pass of the int8 row kernels, when running n_tokens in
 * two calls beats the one path sp_mm_choose gives them (0: one call).
 * Measured (bench/history/until-2026-12-07.md, "Batched decode"):
 *   - 5..8 tokens over rows the kernels take only 4 of (rows wider than
 *     their scratch holds for 8 tokens), against the int8 GEMM, whose
 *     weight packing pays off only for more tokens;
 *   - 9..16 tokens at precision fast where the alternative is the f32
 *     tiles (no int8 GEMM at the AVX2 and AVX-VNNI levels: a batched step
 *     of 9-16 sequences, a speculative verify of 9-16 rows): 2.2-2.6x the
 *     tiles' speed for 4-bit codes, 1.2x for 8-bit. At high, three parts
 *     over 8 tokens cost about what the tiles do (better or worse by the
 *     shape), so the tiles stay. */
static int sp_mm_rows_pass(const sp_weight *w, int n_tokens,
                           const sp_mm_job *job) {
    if (n_tokens > SP_MM_SMALL_TOKENS && n_tokens <= 2 * SP_MM_SMALL_TOKENS &&
        job->path == SP_MM_PATH_GEMM_INT8 &&
        sp_mm_choose(w, SP_MM_SMALL_TOKENS, job->k, job->levels) ==
            SP_MM_PATH_ROWS_INT8)
        return SP_MM_SMALL_TOKENS;
    if (n_tokens > SP_MM_DECODE_TOKENS && n_tokens <= 2 * SP_MM_DECODE_TOKENS &&
        job->path == SP_MM_PATH_TILES && job->levels == 1 &&
        sp_mm_choose(w, SP_MM_DECODE_TOKENS, job->k, job->levels) ==
            SP_MM_PATH_ROWS_INT8)
        return SP_MM_DECODE_TOKENS;
    return 0;
}

const sp_mm_kernels *sp_mm_active(void) {
    switch (sp_simd_current()) {
#if defined(__x86_64__)
    case SP_SIMD_AVX512: return &sp_mm_kernels_avx512;
    case SP_SIMD_AVXVNNI: return &sp_mm_kernels_avxvnni;
    case SP_SIMD_AVX2: return &sp_mm_kernels_avx2;
#elif defined(__aarch64__)
    case SP_SIMD_NEON:
    case SP_SIMD_DOTPROD: /* (integer kernels of their own, same f32 ones) */
    case SP_SIMD_I8MM: return &sp_mm_kernels_neon;
#endif
    default: return NULL;
    }
}

const char *sp_matmul_check(const sp_weight *w) {
    if (!w) return "no weight";
    if (w->type == SP_W_GGML) return sp_ggml_weight_check(w);
    return sp_weight_usable(w) ? NULL
                               : "no kernel multiplies this type and shape";
}

void sp_matmul(sp_pool *pool, const sp_weight *w, const float *x,
               int n_tokens, float *y) {
    if (!w || !x || !y || n_tokens <= 0) return;
    if (w->type == SP_W_GGML) {
        sp_matmul_ggml(pool, w, x, n_tokens, y);
        return;
    }
    if (!sp_weight_usable(w)) {
        sp_fill_nan(y, (int64_t)n_tokens * w->rows);
        return;
    }
    sp_mm_job job = {
        .w = w,
        .x = x,
        .y = y,
        .n_tokens = n_tokens,
        .direct = w->type == SP_W_F32 &&
                  ((uintptr_t)w->data % _Alignof(float)) == 0,
        .k = sp_mm_active(),
        /* (the int8 kernels forced on in the exact mode: one level) */
        .levels = sp_mm_act_levels() > 0 ? sp_mm_act_levels() : 1,
        .int8_rows = sp_mm_int8_rows(),
    };
    job.path = sp_mm_choose(w, n_tokens, job.k, job.levels);
    const int pass = sp_mm_rows_pass(w, n_tokens, &job);
    if (pass > 0) {
        sp_matmul(pool, w, x, pass, y);
        sp_matmul(pool, w, x + (size_t)pass * w->cols, n_tokens - pass,
                  y + (size_t)pass * w->rows);
        return;
    }
    job.bf16 = job.k && w->type == SP_W_BF16 && sp_mm_bf16_active();
    /* One contiguous block of rows per thread, in whole row tiles. */
    const int threads = sp_pool_size(pool);
    int64_t grain = (w->rows + threads - 1) / threads;
    switch (job.path) {
    case SP_MM_PATH_ROWS_INT8:
    case SP_MM_PATH_ROWS:
        grain = (grain + 3) / 4 * 4;
        sp_pool_for(pool, w->rows, grain, sp_mm_rows_range, &job);
        return;
    case SP_MM_PATH_GEMM_INT8:
    case SP_MM_PATH_TILES:
        grain = (grain + SP_MM_ROWS - 1) / SP_MM_ROWS * SP_MM_ROWS;
        sp_pool_for(pool, w->rows, grain,
                    job.path == SP_MM_PATH_TILES ? sp_mm_range : sp_mm_gemm_range,
                    &job);
        return;
    }
}
void sp_weight_row(const sp_weight *w, int64_t r, float *out) {
    if (!w || !out || w->cols <= 0) return;
    if (w->type == SP_W_GGML) {
        sp_weight_row_ggml(w, r, out);
        return;
    }
    if (!sp_weight_usable(w) || r < 0 || r >= w->rows) {
        sp_fill_nan(out, w->cols);
        return;
    }
    sp_decode_span(w, r, 0, w->cols, out);
}
