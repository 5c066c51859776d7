/* SP_DEBUG_CHECK(cond): an internal invariant, such as a state transition
 * that a state machine's table allows, checked where SPINDLE_DEBUG_CHECKS is
 * defined (the sanitizer build) or NDEBUG is not (a Debug build). A broken
 * one is a bug in Spindle, never the caller's input, so it stops the
 * process at once, naming the condition and the line: the one place
 * library code may print and abort. Elsewhere the condition is compiled
 * but never evaluated. */
#ifndef SP_BASE_CHECK_H
#define SP_BASE_CHECK_H

#if defined(SPINDLE_DEBUG_CHECKS) || !defined(NDEBUG)
#include <stdio.h>
#include <stdlib.h>

static inline void sp_debug_check_failed(const char *cond, const char *file, int line) {
    fprintf(stderr, "%s:%d: internal check failed: %s\n", file, line, cond);
    abort();
}

#define SP_DEBUG_CHECK(cond) \
    ((cond) ? (void)0 : sp_debug_check_failed(#cond, __FILE__, __LINE__))
#else
#define SP_DEBUG_CHECK(cond) ((void)(0 && (cond)))
#endif

#endif
