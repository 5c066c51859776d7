/* Helpers shared by the cmocka kernel tests: a xorshift64 generator (seeded
 * per test file, so each file's data stays reproducible on its own) and a
 * mixed absolute/relative closeness check. Include after <cmocka.h>.
 *
 * A test picks its seed by defining TEST_RNG_SEED before the include. */
#ifndef SP_TESTS_UNIT_TEST_UTIL_H
#define SP_TESTS_UNIT_TEST_UTIL_H

#include <math.h>
#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t rng_state = TEST_RNG_SEED;

/* The top 53 bits of the next xorshift64 state. */
static inline uint64_t rng_next53(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state >> 11;
}

static inline uint32_t rng_u32(void) { return (uint32_t)rng_next53(); }

/* Uniform in [-1, 1) at 32-bit resolution. */
static inline float rng_unit(void) {
    return (float)((double)rng_u32() / 4294967296.0 * 2.0 - 1.0);
}

/* Uniform in [lo, hi) at 53-bit resolution. */
static inline float frand(float lo, float hi) {
    double u = (double)rng_next53() / 9007199254740992.0;
    return (float)(lo + (hi - lo) * u);
}

static inline void fill_uniform(float *x, int n, float lo, float hi) {
    for (int i = 0; i < n; i++) x[i] = frand(lo, hi);
}

/* Random finite f16 / bf16 bit patterns with a biased exponent in
 * [exp_lo, exp_hi]; the sign, exponent and mantissa are drawn in that
 * order. */
static inline uint16_t rng_f16_bits(int exp_lo, int exp_hi) {
    uint32_t sign = rng_u32() & 1u;
    uint32_t e = (uint32_t)(exp_lo + (int)(rng_u32() % (uint32_t)(exp_hi - exp_lo + 1)));
    return (uint16_t)((sign << 15) | (e << 10) | (rng_u32() & 0x3ffu));
}

static inline uint16_t rng_bf16_bits(int exp_lo, int exp_hi) {
    uint32_t sign = rng_u32() & 1u;
    uint32_t e = (uint32_t)(exp_lo + (int)(rng_u32() % (uint32_t)(exp_hi - exp_lo + 1)));
    return (uint16_t)((sign << 15) | (e << 7) | (rng_u32() & 0x7fu));
}

/* The value of a bf16 / f16 bit pattern, from the formats' definitions
 * (sign, biased exponent, implicit bit, subnormals at the minimum exponent)
 * rather than from the library's converters. */
static inline double ref_bf16_value(uint16_t h) {
    const double sign = (h & 0x8000u) ? -1.0 : 1.0;
    const int e = (h >> 7) & 0xff, m = h & 0x7f;
    if (e == 0xff) return m ? NAN : sign * INFINITY;
    return sign * (e ? ldexp(128 + m, e - 134) : ldexp(m, -133));
}

static inline double ref_f16_value(uint16_t h) {
    const double sign = (h & 0x8000u) ? -1.0 : 1.0;
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return m ? NAN : sign * INFINITY;
    return sign * (e ? ldexp(1024 + m, e - 25) : ldexp(m, -24));
}

/* Fails the test unless |got - want| <= atol + rtol * |want| (NaN fails). */
static inline void assert_close(double got, double want, double atol,
                                double rtol, int i) {
    double err = fabs(got - want);
    if (!(err <= atol + rtol * fabs(want)))
        fail_msg("index %d: got %.9g want %.9g (err %.3g)", i, got, want, err);
}

#endif
