/* The part of cmocka's API that the compute unit tests use, so that
 * tests/unit/test_*.c build unchanged for a cross target that has no
 * cmocka (scripts/test_arm64.sh puts this directory ahead of the system
 * headers). Each test runs under setjmp: a failed assertion prints where
 * and why and ends that test, skip() ends it as skipped, and the group's
 * result is the number of failed tests, as with cmocka. */
#ifndef SP_TESTS_ARM64_CMOCKA_H
#define SP_TESTS_ARM64_CMOCKA_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef void (*cm_test_fn)(void **state);
typedef int (*cm_fixture_fn)(void **state);

struct CMUnitTest {
    const char *name;
    cm_test_fn test_func;
};

#define cmocka_unit_test(f) {#f, f}

enum { CM_FAILED = 1, CM_SKIPPED = 2 };
static jmp_buf cm_test_exit;

static void cm_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void cm_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    longjmp(cm_test_exit, CM_FAILED);
}

#define fail_msg(...) cm_fail(__FILE__, __LINE__, __VA_ARGS__)
#define skip() longjmp(cm_test_exit, CM_SKIPPED)
#define print_message(...) printf(__VA_ARGS__)
#define assert_true(c) \
    do { if (!(c)) cm_fail(__FILE__, __LINE__, "assertion failed: %s", #c); } while (0)
#define assert_false(c) assert_true(!(c))
#define assert_null(p) assert_true((p) == NULL)
#define assert_non_null(p) assert_true((p) != NULL)
#define assert_int_equal(a, b)                                               \
    do {                                                                     \
        const long long cm_a = (long long)(a), cm_b = (long long)(b);        \
        if (cm_a != cm_b)                                                    \
            cm_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b,    \
                    cm_a, cm_b);                                             \
    } while (0)
#define assert_string_equal(a, b) assert_true(strcmp((a), (b)) == 0)
#define assert_memory_equal(a, b, n) assert_true(memcmp((a), (b), (n)) == 0)

static int cm_run_group(const char *group, const struct CMUnitTest *tests,
                        size_t n, cm_fixture_fn setup, cm_fixture_fn teardown) {
    void *state = NULL;
    if (setup && setup(&state) != 0) {
        fprintf(stderr, "[  ERROR   ] %s: group setup failed\n", group);
        return 1;
    }
    volatile int failed = 0; /* kept across longjmp */
    for (volatile size_t i = 0; i < n; i++) {
        const int how = setjmp(cm_test_exit);
        if (how == 0) tests[i].test_func(&state);
        failed += how == CM_FAILED;
        printf("[ %-8s ] %s\n",
               how == CM_FAILED ? "FAILED" : how == CM_SKIPPED ? "SKIPPED" : "OK",
               tests[i].name);
    }
    if (teardown) teardown(&state);
    printf("[ %-8s ] %s: %zu tests, %d failed\n", failed ? "FAILED" : "PASSED",
           group, n, failed);
    return failed;
}

#define cmocka_run_group_tests(tests, setup, teardown)                      \
    cm_run_group(#tests, (tests), sizeof(tests) / sizeof((tests)[0]),      \
                 (setup), (teardown))

#endif
