/* y = x W^T for ggml block-quantized weights, never expanding W to f32 in
 * memory.
 *
 * Few tokens (decode: n_tokens <= SP_MM_SMALL_TOKENS, or up to
 * SP_MM_DECODE_TOKENS at precision fast where the GEMM below does not
 * cover) stream one weight row
 * after the other (one sequential stream per thread reads DRAM about twice
 * as fast as interleaved row streams):
 *   - precision fast (sp_mm_act_levels() == 1): llama.cpp's own
 *     arithmetic: the activations are quantized once per call to the
 *     type's q8 partner and each block is an exact integer dot product
 *     (ggml_dot.h);
 *   - precision high (levels 3): the same kernels, each token's activations
 *     split into 3 int8 parts (ggml_act_split.c) run as 3 "tokens" of one
 *     call and added: the f32 product up to ~2^-21 of each block's
 *     largest value, at the cost of the integer kernels (llama.cpp's single
 *     rounding moves logits by tenths; bench/history/until-2026-12-07.md);
 *   - precision exact (levels 0): each row is decoded to f32 in L1-sized
 *     spans with ggml's bit-exact dequantizers and dotted with the f32
 *     activations (exact up to summation order).
 * More tokens (prefill), precision fast or high on AVX-512 VNNI, AVX-VNNI
 * or AVX2, q4_0 / q8_0 / q4_1 / q5_0 / q5_1 (and MXFP4 on AVX-512): every
 * token is quantized (fast) or split into 3 parts (high) once per call as
 * for decode and ggml_gemm_vnni.c (ggml_gemm_avx2.c) computes the same
 * per-block values in panels of rows (gg_use_gemm: on AVX2 / AVX-VNNI at
 * precision high only 2..5 tokens, a speculative verify or a small batch,
 * where one pass of its 3 parts beats the decode kernels' several).
 * The k-quants (Q2_K .. Q6_K) at precision fast from 2 SP_MM_DECODE_TOKENS + 1 tokens: the
 * activations quantized to q8_K once per call and ggml_gemm_kquants.c's
 * panels (AVX-512 VNNI, AVX-VNNI and AVX2).
 * Otherwise (prefill): each pool chunk is a contiguous block of rows,
 * decoded SP_GG_ROWS rows x SP_GG_COLS columns at a time into a stack tile,
 * and the tile is dotted with every token's f32 activations, so the decode
 * cost is shared by the whole prefill. */
#include "compute/ggml/matmul_ggml.h"

#include <math.h>
#include <stdint.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/ggml/ggml_quants.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/scratch.h"

#define SP_GG_ROWS 32
/* A multiple of every block size (32 and 256), so tile edges fall on block
 * boundaries. */
#define SP_GG_COLS 512

const char *sp_ggml_weight_check(const sp_weight *w) {
    if (!w || w->type != SP_W_GGML) return "not a ggml block weight";
    if (!w->data || w->rows <= 0 || w->cols <= 0) return "empty matrix";
    const sp_ggml_type_traits *tr = sp_ggml_traits(w->ggml_type);
    if (!tr || !tr->to_f32) return "no kernel for this ggml type";
    if (w->cols % tr->block_size != 0)
        return "rows are not whole blocks of the type";
    if ((uintptr_t)w->data % tr->align != 0 ||
        sp_ggml_row_size(w->ggml_type, w->cols) % tr->align != 0)
        return "blocks are not aligned in memory";
    return NULL;
}

bool sp_ggml_weight_usable(const sp_weight *w) {
    return sp_ggml_weight_check(w) == NULL;
}

typedef struct gg_job {
    const sp_weight *w;
    const sp_ggml_type_traits *tr;
    size_t row_bytes;
    const float *x;
    float *y;
    int n_tokens;
    const sp_mm_kernels *k; /* NULL: portable dot products */
    const sp_ggml_act *act; /* decode, integer path: quantized activations */
    float *parts;           /* precision high: per-part results, (levels x
                               gg_split_group tokens) x rows */
    int levels;             /* precision high: parts per token */
    const sp_ggml_acts *acts; /* prefill, integer path: every token, quantized */
    sp_simd_level level;
} gg_job;

/* Decode, integer path: the rows of one pool chunk against the quantized
 * activations. */
static void gg_rows_q8(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const gg_job *job = ctx;
    sp_ggml_rows_q8(job->w, job->act, job->n_tokens, job->y, r0, r1,
                    job->level);
}

/* Precision high: tokens whose parts one kernel call takes (3 parts: 2
 * tokens, 6 "tokens" of the kernel), so a step of 8 rows reads each weight
 * row 4 times, not 8. */
static int gg_split_group(int levels, int n_tokens) {
    const int g = SP_MM_DECODE_TOKENS / levels;
    return g < n_tokens ? g : n_tokens;
}

/* Decode, precision high: the parts of gg_split_group tokens per kernel
 * call (one pass over the weights each), then added in part order. */
static void gg_rows_split(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const gg_job *job = ctx;
    const int64_t rows = job->w->rows;
    const int levels = job->levels;
    const int group = gg_split_group(levels, job->n_tokens);
    for (int t0 = 0; t0 < job->n_tokens; t0 += group) {
        const int nt = job->n_tokens - t0 < group ? job->n_tokens - t0 : group;
        sp_ggml_rows_q8(job->w, job->act + t0 * levels, nt * levels,
                        job->parts, r0, r1, job->level);
        for (int t = 0; t < nt; t++) {
            const float *part = job->parts + (int64_t)t * levels * rows;
            float *y = job->y + (int64_t)(t0 + t) * rows;
            for (int64_t r = r0; r < r1; r++) {
                float sum = part[r];
                for (int l = 1; l < levels; l++) sum += part[(int64_t)l * rows + r];
                y[r] = sum;
            }
        }
    }
}

/* Precision high, few tokens: the parts of every token and room for the
 * per-part results in this thread's scratch. False: no memory or a row the
 * quantizer refuses (the caller falls back to the f32 path). */
static bool gg_split(gg_job *job, int levels) {
    const sp_weight *w = job->w;
    const size_t acts = (size_t)levels * job->n_tokens * sizeof(sp_ggml_act);
    const size_t slots = (size_t)levels * gg_split_group(levels, job->n_tokens);
    unsigned char *buf = sp_scratch_get(
        SP_SCRATCH_GGML_SPLIT, acts + slots * w->rows * sizeof(float));
    if (!buf) return false;
    sp_ggml_act *act = (sp_ggml_act *)buf;
    const uint32_t at = sp_ggml_dot_act_type(w->ggml_type);
    for (int t = 0; t < job->n_tokens; t++)
        if (!sp_ggml_quantize_act_split(at, job->x + (int64_t)t * w->cols,
                                        w->cols, levels, act + t * levels))
            return false;
    job->act = act;
    job->parts = (float *)(buf + acts);
    job->levels = levels;
    return true;
}

/* Prefill, integer path (AVX-512 VNNI, AVX-VNNI or AVX2): a pool chunk of
 * rows against every quantized token. */
static void gg_rows_gemm(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const gg_job *job = ctx;
    if (sp_ggml_gemm_kquants_covered(job->w->ggml_type, job->w->cols, job->level))
        sp_ggml_gemm_kquants(job->w, job->acts, job->y, r0, r1, job->level);
    else if (job->level == SP_SIMD_AVX512)
        sp_ggml_gemm_vnni(job->w, job->acts, job->y, r0, r1);
    else
        sp_ggml_gemm_int8(job->w, job->acts, job->y, r0, r1, job->level);
}

/* Decode, f32 path: one row at a time, SP_GG_COLS columns decoded into an
 * L1 buffer and dotted with every token while they are still there. */
static void gg_rows_f32(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const gg_job *job = ctx;
    const sp_weight *w = job->w;
    const int64_t rows = w->rows, cols = w->cols, bs = job->tr->block_size;
    _Alignas(64) float span[SP_GG_COLS];
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *row =
            (const unsigned char *)w->data + (size_t)r * job->row_bytes;
        float sum[SP_MM_DECODE_TOKENS] = {0};
        for (int64_t k0 = 0; k0 < cols; k0 += SP_GG_COLS) {
            const int64_t kn = cols - k0 < SP_GG_COLS ? cols - k0 : SP_GG_COLS;
            job->tr->to_f32(row + (size_t)(k0 / bs) * job->tr->type_size, span,
                            kn);
            sp_ggml_span_dot(span, job->x + k0, cols, job->n_tokens, kn, sum,
                             job->level);
        }
        for (int t = 0; t < job->n_tokens; t++) job->y[(int64_t)t * rows + r] = sum[t];
    }
}

static void gg_range(void *ctx, int64_t r0, int64_t r1, int thread_id) {
    (void)thread_id;
    const gg_job *job = ctx;
    const sp_weight *w = job->w;
    const int64_t rows = w->rows, cols = w->cols, bs = job->tr->block_size;
    const unsigned char *data = w->data;
    _Alignas(64) float tile[SP_GG_ROWS][SP_GG_COLS];

    for (int64_t r = r0; r < r1; r += SP_GG_ROWS) {
        const int nr = r1 - r < SP_GG_ROWS ? (int)(r1 - r) : SP_GG_ROWS;
        for (int64_t k0 = 0; k0 < cols; k0 += SP_GG_COLS) {
            const int64_t kn = cols - k0 < SP_GG_COLS ? cols - k0 : SP_GG_COLS;
            for (int i = 0; i < nr; i++) {
                const unsigned char *row =
                    data + (size_t)(r + i) * job->row_bytes +
                    (size_t)(k0 / bs) * job->tr->type_size;
                job->tr->to_f32(row, tile[i], kn);
            }
            (job->k ? job->k->tile : sp_mm_tile_portable)(
                tile[0], SP_GG_COLS, nr, job->x + k0, cols, job->n_tokens, kn,
                job->y + r, rows, k0 > 0);
        }
    }
}

/* Whether the integer prefill GEMM takes n_tokens tokens with `levels`
 * int8 parts each. AVX-512 VNNI: from SP_MM_SMALL_TOKENS + 1 (it beats the
 * decode kernels there: SmolLM2 Q4_1, 8 rows, precision high, S_TG about
 * 1.8x theirs). AVX2 / AVX-VNNI (bench/history/until-2026-12-07.md, "Few-row
 * GGUF matmuls on AVX2"): one part (fast), from SP_MM_SMALL_TOKENS + 1, the
 * decode kernels being cheaper below; precision high's 3 parts, from 2 to
 * SP_GG_INT8_HIGH_MAX tokens: its one pass over each panel costs half the
 * decode kernels' at 4 tokens (which read every weight row once per 2
 * tokens), while from 6 tokens the f32 tiles' per-token FMAs are cheaper
 * than 3 int8 parts. */
#define SP_GG_INT8_HIGH_MAX 5
static bool gg_use_gemm(const sp_weight *w, int n_tokens, int levels,
                        sp_simd_level level) {
    if (levels < 1 || levels > SP_GGML_SPLIT_MAX_LEVELS) return false;
    /* the k-quants: one part only, and past the decode kernels' two
     * passes (up to 2 SP_MM_DECODE_TOKENS), which give every token its
     * one-token product bit for bit, as a speculative verify or a batched
     * decode step wants */
    if (sp_ggml_gemm_kquants_covered(w->ggml_type, w->cols, level))
        return levels == 1 && n_tokens > 2 * SP_MM_DECODE_TOKENS;
    if (sp_ggml_vnni_active() && sp_ggml_gemm_covered(w->ggml_type, w->cols))
        return n_tokens > SP_MM_SMALL_TOKENS;
    if (!sp_ggml_gemm_int8_covered(w->ggml_type, w->cols, level)) return false;
    return levels == 1 ? n_tokens > SP_MM_SMALL_TOKENS
                       : n_tokens >= 2 && n_tokens <= SP_GG_INT8_HIGH_MAX;
}

void sp_matmul_ggml(sp_pool *pool, const sp_weight *w, const float *x,
                    int n_tokens, float *y) {
    if (!w || !x || !y || n_tokens <= 0) return;
    if (!sp_ggml_weight_usable(w)) {
        for (int64_t i = 0; i < (int64_t)n_tokens * w->rows; i++) y[i] = NAN;
        return;
    }
    gg_job job = {
        .w = w,
        .tr = sp_ggml_traits(w->ggml_type),
        .row_bytes = sp_ggml_row_size(w->ggml_type, w->cols),
        .x = x,
        .y = y,
        .n_tokens = n_tokens,
        .k = sp_mm_active(),
        .level = sp_simd_current(),
    };
    const int threads = sp_pool_size(pool);
    int64_t grain = (w->rows + threads - 1) / threads;
    const int levels = sp_mm_act_levels();
    const bool gemm = gg_use_gemm(w, n_tokens, levels, job.level);
    /* 9..16 tokens at precision fast that no int8 GEMM covers (the
     * k-quants on AVX2): two passes of the decode kernels, not the f32
     * tiles (as matmul.c's sp_mm_rows_pass). */
    if (!gemm && levels == 1 && n_tokens > SP_MM_DECODE_TOKENS &&
        n_tokens <= 2 * SP_MM_DECODE_TOKENS &&
        sp_ggml_dot_covered(w->ggml_type, w->cols)) {
        sp_matmul_ggml(pool, w, x, SP_MM_DECODE_TOKENS, y);
        sp_matmul_ggml(pool, w, x + (size_t)SP_MM_DECODE_TOKENS * w->cols,
                       n_tokens - SP_MM_DECODE_TOKENS,
                       y + (size_t)SP_MM_DECODE_TOKENS * w->rows);
        return;
    }
    /* The decode kernels take 5..8 tokens only at precision fast where the
     * GEMM does not cover; precision high's f32 tiles beat their 3 parts
     * per token from 5 tokens (bench/history/until-2026-12-07.md "Batched
     * decode"). */
    const bool decode = !gemm && (n_tokens <= SP_MM_SMALL_TOKENS ||
                                  (n_tokens <= SP_MM_DECODE_TOKENS && levels == 1));
    if (decode && sp_ggml_dot_covered(w->ggml_type, w->cols)) {
        if (levels > 1 && levels <= SP_GGML_SPLIT_MAX_LEVELS &&
            gg_split(&job, levels)) {
            sp_pool_for(pool, w->rows, grain, gg_rows_split, &job);
            return;
        }
        if (levels != 1) {
            sp_pool_for(pool, w->rows, grain, gg_rows_f32, &job);
            return;
        }
        /* Quantized once here, read by every worker (the call is
         * synchronous, so the caller's thread-local scratch outlives it). */
        static _Thread_local sp_ggml_act act[SP_MM_DECODE_TOKENS];
        const uint32_t at = sp_ggml_dot_act_type(w->ggml_type);
        bool ok = true;
        for (int t = 0; t < n_tokens && ok; t++)
            ok = sp_ggml_quantize_act(at, x + (int64_t)t * w->cols, w->cols,
                                      &act[t]);
        if (ok) {
            job.act = act;
            sp_pool_for(pool, w->rows, grain, gg_rows_q8, &job);
            return;
        }
    }
    grain = (grain + SP_GG_ROWS - 1) / SP_GG_ROWS * SP_GG_ROWS;
    if (gemm) {
        /* quantized (fast) or split (high) once per call, tokens split over
         * the pool, into the caller's thread scratch, which outlives the
         * synchronous pool call; read by every worker */
        sp_ggml_acts acts;
        if (sp_ggml_quantize_acts(pool, sp_ggml_dot_act_type(w->ggml_type), x,
                                  n_tokens, w->cols, levels, &acts)) {
            job.acts = &acts;
            sp_pool_for(pool, w->rows, grain, gg_rows_gemm, &job);
            return;
        }
    }
    sp_pool_for(pool, w->rows, grain, gg_range, &job);
}

void sp_weight_row_ggml(const sp_weight *w, int64_t r, float *out) {
    if (!w || !out || w->cols <= 0) return;
    if (!sp_ggml_weight_usable(w) || r < 0 || r >= w->rows) {
        for (int64_t i = 0; i < w->cols; i++) out[i] = NAN;
        return;
    }
    const sp_ggml_type_traits *tr = sp_ggml_traits(w->ggml_type);
    const unsigned char *row = (const unsigned char *)w->data +
                               (size_t)r * sp_ggml_row_size(w->ggml_type,
                                                            w->cols);
    tr->to_f32(row, out, w->cols);
}
