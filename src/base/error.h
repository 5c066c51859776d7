/* Error reporting shared by every module: one line of text in the caller's
 * spindle_error, and the status returned so that `return sp_fail(...)` reads
 * naturally. */
#ifndef SP_BASE_ERROR_H
#define SP_BASE_ERROR_H

#include "spindle.h"

#if defined(__GNUC__)
#define SP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SP_PRINTF(a, b)
#endif

/* Fill `err` (may be NULL) and return `status`. */
spindle_status sp_fail(spindle_error *err, spindle_status status,
                       const char *fmt, ...) SP_PRINTF(3, 4);

/* Reset `err` to SPINDLE_OK with an empty message. */
void sp_error_clear(spindle_error *err);

#endif
