/* CPU feature detection and the kernels' level / precision choice
 * (cpu_features.h). CPUID is read directly (<cpuid.h>, which gcc and clang
 * both ship) rather than through __builtin_cpu_supports, whose feature
 * names differ between the compilers. */
#include "compute/cpu_features.h"
#include "spindle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

static pthread_once_t sp_cpu_once = PTHREAD_ONCE_INIT;
static sp_cpu_features sp_cpu;
static sp_simd_level sp_simd_cpu = SP_SIMD_SCALAR;
static _Atomic int sp_simd_level_now = SP_SIMD_SCALAR;
static _Atomic int sp_precision_now = SP_PRECISION_FAST;
static _Atomic bool sp_int8_on = false;
static _Atomic bool sp_bf16_on = false;
/* A one-line message when SPINDLE_PRECISION or SPINDLE_SIMD names no mode /
 * level this build knows (written once, by sp_cpu_init); "" otherwise. */
static char sp_env_error[192];

#if defined(__x86_64__)
/* XCR0: which register states the OS saves on a context switch. (xgetbv is
 * written out because its intrinsic needs the xsave target.) */
static uint64_t sp_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static void sp_detect_x86(sp_cpu_features *f) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool osxsave = c >> 27 & 1u;
    const uint64_t xcr0 = osxsave ? sp_xcr0() : 0;
    const bool ymm = (xcr0 & 0x6) == 0x6;            /* SSE + AVX state */
    const bool zmm = ymm && (xcr0 & 0xE0) == 0xE0;   /* opmask + ZMM state */
    const bool avx = ymm && (c >> 28 & 1u);
    f->fma = avx && (c >> 12 & 1u);
    f->f16c = avx && (c >> 29 & 1u);
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = avx && (b >> 5 & 1u);
    f->avx512f = zmm && (b >> 16 & 1u);
    f->avx512dq = f->avx512f && (b >> 17 & 1u);
    f->avx512bw = f->avx512f && (b >> 30 & 1u);
    f->avx512vl = f->avx512f && (b >> 31 & 1u);
    const bool vnni = c >> 11 & 1u;
    bool bf16 = false;
    if (a >= 1) { /* sub-leaf 1 exists */
        __cpuid_count(7, 1, a, b, c, d);
        bf16 = a >> 5 & 1u;
        /* AVX-VNNI extends the AVX2 level (VEX, ymm state only) */
        f->avxvnni = f->avx2 && f->fma && f->f16c && (a >> 4 & 1u);
    }
#if defined(SP_EMULATE_AVXVNNI) && SP_EMULATE_AVXVNNI
    /* test builds: vpdpbusd emulated with AVX2 (simd_dpbusd.h) */
    f->avxvnni = f->avx2 && f->fma && f->f16c;
#endif
    /* The VNNI and BF16 kernels are AVX-512-level kernels: offer them only
     * together with that level's own features. */
    const bool level512 = f->avx512f && f->avx512bw && f->avx512dq &&
                          f->avx512vl && f->fma && f->f16c;
    f->avx512vnni = level512 && vnni;
    f->avx512bf16 = level512 && bf16;
}
#endif

#if defined(__aarch64__)
/* Advanced SIMD is mandatory in ARMv8-A; the dot-product (ARMv8.2, SDOT)
 * and int8 matrix-multiply (ARMv8.6, SMMLA) extensions are reported by
 * the kernel in the auxiliary vector (Linux only: elsewhere plain NEON). */
static void sp_detect_arm(sp_cpu_features *f) {
    f->neon = true;
#if defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f->dotprod = (hw & (1ul << 20)) != 0;                /* HWCAP_ASIMDDP */
    f->i8mm = f->dotprod && (hw2 & (1ul << 13)) != 0;    /* HWCAP2_I8MM */
#endif
}
#endif

static sp_simd_level sp_best_level(const sp_cpu_features *f) {
    if (f->i8mm) return SP_SIMD_I8MM;
    if (f->dotprod) return SP_SIMD_DOTPROD;
    if (f->neon) return SP_SIMD_NEON;
    if (f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->fma &&
        f->f16c)
        return SP_SIMD_AVX512;
    if (f->avxvnni) return SP_SIMD_AVXVNNI;
    if (f->avx2 && f->fma && f->f16c) return SP_SIMD_AVX2;
    return SP_SIMD_SCALAR;
}

/* The AArch64 levels, each a superset of the one before (so compared by
 * value only among themselves, whatever x86 levels the enum has). */
static bool sp_arm_level(int level) {
    return level == SP_SIMD_NEON || level == SP_SIMD_DOTPROD ||
           level == SP_SIMD_I8MM;
}

/* Whether `level` runs on a CPU whose best level is `cpu` (features f). */
static bool sp_level_runs(int level, sp_simd_level cpu,
                          const sp_cpu_features *f) {
    switch (level) {
    case SP_SIMD_SCALAR: return true;
    case SP_SIMD_AVX2:
        return cpu == SP_SIMD_AVX2 || cpu == SP_SIMD_AVXVNNI ||
               cpu == SP_SIMD_AVX512;
    case SP_SIMD_AVXVNNI: return f->avxvnni;
    case SP_SIMD_AVX512: return cpu == SP_SIMD_AVX512;
    case SP_SIMD_NEON:
    case SP_SIMD_DOTPROD:
    case SP_SIMD_I8MM: return sp_arm_level((int)cpu) && level <= (int)cpu;
    default: return false;
    }
}

/* The kernels each mode uses (tests and benchmarks can still switch them
 * one by one with the _force functions). */
static void sp_apply_precision(int p) {
    atomic_store(&sp_precision_now, p);
    atomic_store(&sp_int8_on, (sp_cpu.avx2 || sp_cpu.dotprod) &&
                                  p != SP_PRECISION_EXACT);
    atomic_store(&sp_bf16_on, sp_cpu.avx512bf16 && p == SP_PRECISION_FAST);
}

static void sp_cpu_init(void) {
#if defined(__x86_64__)
    sp_detect_x86(&sp_cpu);
#elif defined(__aarch64__)
    sp_detect_arm(&sp_cpu);
#endif
    sp_simd_cpu = sp_best_level(&sp_cpu);

    /* fast by default: the field judges numerics by the KL divergence of
     * the token distribution from exact math, and by that measure fast is
     * no worse than llama.cpp's default on the GGUF, bf16 and MLX affine
     * formats (high and exact stay for parity work). */
    int precision = SP_PRECISION_FAST;
    const char *prec = getenv("SPINDLE_PRECISION");
    if (prec) {
        bool known_mode = false;
        for (int p = SP_PRECISION_EXACT; p <= SP_PRECISION_FAST; p++)
            if (strcmp(prec, sp_mm_precision_name((sp_precision)p)) == 0) {
                precision = p;
                known_mode = true;
            }
        if (!known_mode)
            snprintf(sp_env_error, sizeof sp_env_error,
                     "SPINDLE_PRECISION='%.40s' is not a precision mode "
                     "(fast, high or exact)", prec);
    }
    sp_apply_precision(precision);

    sp_simd_level want = sp_simd_cpu;
    const char *env = getenv("SPINDLE_SIMD");
    bool known_level = env == NULL;
    if (env)
        for (int l = 0; l < SP_SIMD_COUNT; l++) {
            if (strcmp(env, sp_simd_name((sp_simd_level)l)) != 0) continue;
            known_level = true;
            if (l < (int)want && sp_level_runs(l, sp_simd_cpu, &sp_cpu))
                want = (sp_simd_level)l;
        }
    if (!known_level && !sp_env_error[0])
        snprintf(sp_env_error, sizeof sp_env_error,
                 "SPINDLE_SIMD='%.40s' is not an instruction set level "
                 "(scalar, avx2, avxvnni, avx512, neon, dotprod, i8mm)", env);
    atomic_store(&sp_simd_level_now, (int)want);
}

static void sp_cpu_ready(void) { pthread_once(&sp_cpu_once, sp_cpu_init); }

const char *spindle_environment_error(void) {
    sp_cpu_ready();
    return sp_env_error[0] ? sp_env_error : NULL;
}

const sp_cpu_features *sp_cpu_features_get(void) {
    sp_cpu_ready();
    return &sp_cpu;
}

const char *sp_simd_name(sp_simd_level level) {
    switch (level) {
    case SP_SIMD_SCALAR: return "scalar";
    case SP_SIMD_AVX2: return "avx2";
    case SP_SIMD_AVXVNNI: return "avxvnni";
    case SP_SIMD_AVX512: return "avx512";
    case SP_SIMD_NEON: return "neon";
    case SP_SIMD_DOTPROD: return "dotprod";
    case SP_SIMD_I8MM: return "i8mm";
    case SP_SIMD_COUNT: break;
    }
    return "?";
}

sp_simd_level sp_simd_supported(void) {
    sp_cpu_ready();
    return sp_simd_cpu;
}

sp_simd_level sp_simd_current(void) {
    sp_cpu_ready();
    return (sp_simd_level)atomic_load(&sp_simd_level_now);
}

bool sp_simd_available(sp_simd_level level) {
    return sp_level_runs((int)level, sp_simd_supported(), &sp_cpu);
}

bool sp_simd_force(sp_simd_level level) {
    if (!sp_simd_available(level)) return false;
    atomic_store(&sp_simd_level_now, (int)level);
    return true;
}

bool sp_simd_avx512_active(void) {
    return sp_simd_current() == SP_SIMD_AVX512;
}

bool sp_simd_avx2_active(void) {
    const sp_simd_level l = sp_simd_current();
    return l == SP_SIMD_AVX2 || l == SP_SIMD_AVXVNNI || l == SP_SIMD_AVX512;
}

bool sp_mm_int8_active(void) {
    const sp_simd_level l = sp_simd_current();
    return (l == SP_SIMD_AVX2 || l == SP_SIMD_AVXVNNI || l == SP_SIMD_AVX512 ||
            l == SP_SIMD_DOTPROD || l == SP_SIMD_I8MM) &&
           atomic_load(&sp_int8_on);
}

bool sp_mm_int8_gemm_active(void) {
    return sp_mm_int8_active() && sp_ggml_vnni_active();
}

bool sp_mm_int8_force(bool on) {
    sp_cpu_ready();
    if (on && !sp_cpu.avx2 && !sp_cpu.dotprod) return false;
    atomic_store(&sp_int8_on, on);
    return true;
}

bool sp_mm_bf16_active(void) {
    return sp_simd_avx512_active() && atomic_load(&sp_bf16_on);
}

bool sp_mm_bf16_force(bool on) {
    sp_cpu_ready();
    if (on && !sp_cpu.avx512bf16) return false;
    atomic_store(&sp_bf16_on, on);
    return true;
}

bool sp_ggml_vnni_active(void) {
    return sp_simd_avx512_active() && sp_cpu.avx512vnni;
}

bool sp_simd_neon_active(void) { return sp_arm_level((int)sp_simd_current()); }

const char *sp_mm_precision_name(sp_precision p) {
    switch (p) {
    case SP_PRECISION_EXACT: return "exact";
    case SP_PRECISION_HIGH: return "high";
    case SP_PRECISION_FAST: return "fast";
    }
    return "?";
}

sp_precision sp_mm_precision(void) {
    sp_cpu_ready();
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
    sp_cpu_ready();
    if (p < SP_PRECISION_EXACT || p > SP_PRECISION_FAST) return;
    sp_apply_precision((int)p);
}
