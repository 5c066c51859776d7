/* Helpers shared by the x86 decode kernels of ggml weights
 * (ggml_dot_avx2.c, ggml_dot_vnni.c, ggml_dot_kquants_vnni.c). Include it
 * after the file's `#pragma GCC target(...)` (which must enable f16c) and
 * <immintrin.h>, inside the file's x86 guard. */
#ifndef SP_COMPUTE_GGML_DOT_X86_H
#define SP_COMPUTE_GGML_DOT_X86_H

#include <stdint.h>
#include <string.h>

#define SP_INLINE static inline __attribute__((always_inline))

/* The f16 at p (any alignment) as f32. */
SP_INLINE float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Calls call(n) with the token count nt (1..4) as a constant, so that the
 * per-token loops of an inlined row kernel unroll. */
#define SP_NT_SWITCH(call, nt)                                                 \
    switch (nt) {                                                              \
    case 1: call(1); break;                                                    \
    case 2: call(2); break;                                                    \
    case 3: call(3); break;                                                    \
    default: call(4); break;                                                   \
    }

#endif
