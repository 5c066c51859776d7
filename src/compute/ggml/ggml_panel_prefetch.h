/* The prefill GEMMs' next weight panel (ggml_gemm_vnni.c, ggml_gemm_avx2.c,
 * ggml_gemm_kquants.c), fetched into L2 while the current one runs: a
 * panel's rows are as many separate streams, more than the hardware
 * prefetcher follows, so without it the packing of each panel waited on
 * DRAM (about a third of a Q8_0 prefill's GEMM time at 256 tokens under
 * perf). The lines are asked for a few at a time between micro-kernel
 * calls: all at once would fill the miss queue and stall. x86 only. */
#ifndef SP_COMPUTE_GGML_PANEL_PREFETCH_H
#define SP_COMPUTE_GGML_PANEL_PREFETCH_H

#include <stddef.h>
#include <stdint.h>
#include <xmmintrin.h>

typedef struct sp_panel_prefetch {
    const uint8_t *first; /* the panel's first row's first line */
    size_t row_bytes;     /* stride between its rows */
    int rows, lines;      /* rows (0: nothing to fetch), 64-byte lines per row */
    int step;             /* lines per sp_panel_prefetch_step */
    int done;             /* lines asked for so far (row-major) */
} sp_panel_prefetch;

/* A GEMM walks panels of mp rows of [r0, r1) by chunks of `chunk` units
 * (blocks or super-blocks of unit_bytes bytes; n_units per row), the
 * chunks of one row panel in order, then the next rows. The panel after
 * the one at rows r, units u0, its lines spread over `calls` steps. */
static inline sp_panel_prefetch sp_panel_prefetch_next(
    const uint8_t *data, size_t row_bytes, int64_t r, int64_t r1, int mp,
    int64_t u0, int64_t n_units, int64_t chunk, size_t unit_bytes, int calls) {
    const int64_t nu0 = u0 + chunk < n_units ? u0 + chunk : 0;
    const int64_t nr = nu0 ? r : r + mp;
    if (nr >= r1) return (sp_panel_prefetch){.rows = 0};
    const int rows = r1 - nr < mp ? (int)(r1 - nr) : mp;
    const int64_t units = n_units - nu0 < chunk ? n_units - nu0 : chunk;
    const uint8_t *first = data + (size_t)nr * row_bytes + (size_t)nu0 * unit_bytes;
    const size_t skew = (uintptr_t)first % 64;
    const int lines = (int)(((size_t)units * unit_bytes + skew + 63) / 64);
    calls = calls < 1 ? 1 : calls;
    return (sp_panel_prefetch){.first = first - skew, .row_bytes = row_bytes,
                               .rows = rows, .lines = lines,
                               .step = (rows * lines + calls - 1) / calls};
}

/* The next step's lines of the panel. */
static inline void sp_panel_prefetch_step(sp_panel_prefetch *p) {
    for (int n = p->step; n > 0 && p->done < p->rows * p->lines; n--, p->done++)
        _mm_prefetch((const char *)(p->first + (size_t)(p->done / p->lines) * p->row_bytes +
                                    (size_t)(p->done % p->lines) * 64),
                     _MM_HINT_T1);
}

#endif
