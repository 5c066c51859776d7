/* Run-time choice of the matmul kernels: the CPU's best level, lowered by
 * SPINDLE_SIMD=scalar|avx2|avx512 (scalar|neon on AArch64), so that CI can
 * exercise every fallback on one machine, chosen once; and the numerics mode SPINDLE_PRECISION=exact|high|
 * fast (matmul_simd.h), which decides whether the int8-activation kernels
 * (matmul_vnni*.c: high and fast) and the bf16-activation prefill tile
 * (matmul_bf16dot.c: fast only) are used. */
#include "compute/matmul/matmul_simd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t sp_simd_once = PTHREAD_ONCE_INIT;
static _Atomic int sp_simd_level_now = SP_SIMD_SCALAR;
static sp_simd_level sp_simd_cpu = SP_SIMD_SCALAR;
static bool sp_cpu_vnni = false;
static _Atomic bool sp_int8_on = false;
static bool sp_cpu_bf16 = false;
static _Atomic bool sp_bf16_on = false;
static _Atomic int sp_precision_now = SP_PRECISION_HIGH;


static sp_simd_level sp_detect(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return SP_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return SP_SIMD_AVX2;
#elif defined(__aarch64__)
    return SP_SIMD_NEON; /* Advanced SIMD is mandatory in ARMv8-A */
#endif
    return SP_SIMD_SCALAR;
}

/* Whether `level` runs on a CPU whose best level is `cpu`. */
static bool sp_level_runs(int level, sp_simd_level cpu) {
    switch (level) {
    case SP_SIMD_SCALAR: return true;
    case SP_SIMD_AVX2: return cpu == SP_SIMD_AVX2 || cpu == SP_SIMD_AVX512;
    case SP_SIMD_AVX512: return cpu == SP_SIMD_AVX512;
    case SP_SIMD_NEON: return cpu == SP_SIMD_NEON;
    default: return false;
    }
}

static void sp_simd_init(void) {
    sp_simd_cpu = sp_detect();
#if defined(__x86_64__)
    sp_cpu_vnni = sp_simd_cpu == SP_SIMD_AVX512 &&
                  __builtin_cpu_supports("avx512vnni");
#endif
#if defined(__x86_64__)
    sp_cpu_bf16 = sp_simd_cpu == SP_SIMD_AVX512 &&
                  __builtin_cpu_supports("avx512bf16");
#endif
    const char *prec = getenv("SPINDLE_PRECISION");
    if (prec)
        for (int p = SP_PRECISION_EXACT; p <= SP_PRECISION_FAST; p++)
            if (strcmp(prec, sp_mm_precision_name((sp_precision)p)) == 0)
                atomic_store(&sp_precision_now, p);
    /* The kernels each mode uses (tests and benchmarks can still switch
     * them one by one with the _force functions). */
    const int mode = atomic_load(&sp_precision_now);
    atomic_store(&sp_int8_on, sp_cpu_vnni && mode != SP_PRECISION_EXACT);
    atomic_store(&sp_bf16_on, sp_cpu_bf16 && mode == SP_PRECISION_FAST);
    sp_simd_level want = sp_simd_cpu;
    const char *env = getenv("SPINDLE_SIMD");
    if (env) {
        for (int l = 0; l < SP_SIMD_COUNT; l++)
            if (strcmp(env, sp_simd_name((sp_simd_level)l)) == 0 &&
                l < (int)want && sp_level_runs(l, sp_simd_cpu))
                want = (sp_simd_level)l;
    }
    atomic_store(&sp_simd_level_now, (int)want);
}

const char *sp_simd_name(sp_simd_level level) {
    switch (level) {
    case SP_SIMD_SCALAR: return "scalar";
    case SP_SIMD_AVX2: return "avx2";
    case SP_SIMD_AVX512: return "avx512";
    case SP_SIMD_NEON: return "neon";
    case SP_SIMD_COUNT: break;
    }
    return "?";
}

sp_simd_level sp_simd_supported(void) {
    pthread_once(&sp_simd_once, sp_simd_init);
    return sp_simd_cpu;
}

sp_simd_level sp_simd_current(void) {
    pthread_once(&sp_simd_once, sp_simd_init);
    return (sp_simd_level)atomic_load(&sp_simd_level_now);
}

bool sp_simd_available(sp_simd_level level) {
    return sp_level_runs((int)level, sp_simd_supported());
}

bool sp_simd_force(sp_simd_level level) {
    if (!sp_simd_available(level)) return false;
    atomic_store(&sp_simd_level_now, (int)level);
    return true;
}

const sp_mm_kernels *sp_mm_active(void) {
    switch (sp_simd_current()) {
#if defined(__x86_64__)
    case SP_SIMD_AVX512: return &sp_mm_kernels_avx512;
    case SP_SIMD_AVX2: return &sp_mm_kernels_avx2;
#elif defined(__aarch64__)
    case SP_SIMD_NEON: return &sp_mm_kernels_neon;
#endif
    default: return NULL;
    }
}


bool sp_mm_int8_active(void) {
    return sp_simd_current() == SP_SIMD_AVX512 && atomic_load(&sp_int8_on);
}

bool sp_mm_int8_force(bool on) {
    pthread_once(&sp_simd_once, sp_simd_init);
    if (on && !sp_cpu_vnni) return false;
    atomic_store(&sp_int8_on, on);
    return true;
}

bool sp_mm_bf16_active(void) {
    return sp_simd_current() == SP_SIMD_AVX512 && atomic_load(&sp_bf16_on);
}

bool sp_mm_bf16_force(bool on) {
    pthread_once(&sp_simd_once, sp_simd_init);
    if (on && !sp_cpu_bf16) return false;
    atomic_store(&sp_bf16_on, on);
    return true;
}

const char *sp_mm_precision_name(sp_precision p) {
    switch (p) {
    case SP_PRECISION_EXACT: return "exact";
    case SP_PRECISION_HIGH: return "high";
    case SP_PRECISION_FAST: return "fast";
    }
    return "?";
}

sp_precision sp_mm_precision(void) {
    pthread_once(&sp_simd_once, sp_simd_init);
    return (sp_precision)atomic_load(&sp_precision_now);
}

int sp_mm_act_levels(void) {
    switch (sp_mm_precision()) {
    case SP_PRECISION_EXACT: return 0;
    case SP_PRECISION_HIGH: return 3;
    case SP_PRECISION_FAST: return 1;
    }
    return 0;
}

void sp_mm_precision_force(sp_precision p) {
    pthread_once(&sp_simd_once, sp_simd_init);
    if (p < SP_PRECISION_EXACT || p > SP_PRECISION_FAST) return;
    atomic_store(&sp_precision_now, (int)p);
    atomic_store(&sp_int8_on, sp_cpu_vnni && p != SP_PRECISION_EXACT);
    atomic_store(&sp_bf16_on, sp_cpu_bf16 && p == SP_PRECISION_FAST);
}
