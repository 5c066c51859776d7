/* Helpers shared by the AArch64 decode kernels of ggml weights
 * (ggml_dot_neon.c, ggml_dot_kquants_neon.c), plain ARMv8-A: they inline
 * into the dotprod / i8mm regions of those files. (The row-loop macros
 * are those of ggml_dot_x86.h with an SP_NEON_ prefix; neither header is
 * seen by the other architecture's files.) */
#ifndef SP_COMPUTE_GGML_DOT_NEON_H
#define SP_COMPUTE_GGML_DOT_NEON_H

#include <stdint.h>
#include <string.h>

#define SP_NEON_INLINE static inline __attribute__((always_inline))

/* The f16 at p (any alignment) as f32 (FCVT: exact). */
SP_NEON_INLINE float sp_neon_f16_at(const uint8_t *p) {
    __fp16 h;
    memcpy(&h, p, 2);
    return (float)h;
}

/* Calls call(n) with the token count nt (1..SP_MM_DECODE_TOKENS) as a constant, so that the
 * per-token loops of an inlined row kernel unroll. */
#define SP_NEON_NT_SWITCH(call, nt)                                            \
    switch (nt) {                                                              \
    case 1: call(1); break;                                                    \
    case 2: call(2); break;                                                    \
    case 3: call(3); break;                                                    \
    case 4: call(4); break;                                                    \
    case 5: call(5); break;                                                    \
    case 6: call(6); break;                                                    \
    case 7: call(7); break;                                                    \
    default: call(8); break;                                                   \
    }

/* F(k, ...) for k = v in 0..5, k a constant (kernels inlined per block
 * kind). */
#define SP_NEON_CONST_KIND6(v, F, ...)                                         \
    ((v) == 0   ? F(0, __VA_ARGS__)                                            \
     : (v) == 1 ? F(1, __VA_ARGS__)                                            \
     : (v) == 2 ? F(2, __VA_ARGS__)                                            \
     : (v) == 3 ? F(3, __VA_ARGS__)                                            \
     : (v) == 4 ? F(4, __VA_ARGS__)                                            \
                : F(5, __VA_ARGS__))

/* For each row r in [r0, r1) of weight w (its bytes at `row`), ROW(n) with
 * the token count n_tokens (1..SP_MM_DECODE_TOKENS) as a constant n; ROW writes y + r,
 * strided by w->rows. */
#define SP_NEON_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW)                         \
    do {                                                                       \
        const size_t row_bytes_ = sp_ggml_row_size((w)->ggml_type, (w)->cols); \
        for (int64_t r = (r0); r < (r1); r++) {                                \
            const uint8_t *row = (const uint8_t *)(w)->data + (size_t)r * row_bytes_; \
            SP_NEON_NT_SWITCH(ROW, n_tokens)                                   \
        }                                                                      \
    } while (0)

#endif
