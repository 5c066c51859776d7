/* spindle/base.h: status codes, one-line errors and the memory the library
 * hands out. Part of the public API: include "spindle.h", whose opening
 * comment states the conventions every call here follows. */
#ifndef SPINDLE_BASE_H
#define SPINDLE_BASE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define SPINDLE_VERSION "0.1.0"

/* ------------------------------------------------------------------ errors */

typedef enum spindle_status {
    SPINDLE_OK = 0,
    SPINDLE_ERR_ARGUMENT,     /* the caller passed something invalid */
    SPINDLE_ERR_IO,           /* a file is missing or unreadable */
    SPINDLE_ERR_FORMAT,       /* a file is malformed (header, JSON, shapes) */
    SPINDLE_ERR_UNSUPPORTED,  /* valid input that Spindle does not handle */
    SPINDLE_ERR_MEMORY,       /* an allocation failed */
    SPINDLE_ERR_LIMIT,        /* a size, recursion or context limit was hit */
    SPINDLE_ERR_TEMPLATE,     /* a chat template failed to parse or render */
    SPINDLE_ERR_INTERNAL
} spindle_status;

typedef struct spindle_error {
    spindle_status status;
    char message[512];
} spindle_error;

/* Human-readable name of a status ("format error", ...): a static string.
 * Thread-safe. */
const char *spindle_status_name(spindle_status status);

/* Release memory returned by the library (token arrays, strings); NULL is
 * fine. Thread-safe. */
void spindle_free(void *ptr);

/* A one-line message naming the variable and its accepted values when
 * SPINDLE_PRECISION or SPINDLE_SIMD is set to a value this build does not
 * know (the library then runs as if it were unset); NULL when both are unset
 * or valid. A level the CPU lacks is not an error: SPINDLE_SIMD is a cap.
 * The string is static. Thread-safe. */
const char *spindle_environment_error(void);

/* --------------------------------------------------------------------- log
 * The library never writes to stdout or stderr. What it has to tell a
 * person and cannot return as an error (a prompt-cache file it refused and
 * deleted, a write that failed in the background) goes to the log handler
 * the program installs; with none installed it is dropped. */
typedef enum spindle_log_level {
    SPINDLE_LOG_ERROR = 0,  /* something failed that no caller sees */
    SPINDLE_LOG_WARN,       /* something was ignored or degraded */
    SPINDLE_LOG_INFO,       /* what a server operator wants to see */
    SPINDLE_LOG_DEBUG       /* detail for diagnosis */
} spindle_log_level;

/* One message: a single line of UTF-8 without a trailing newline, naming
 * what it is about ("prompt cache: PATH: ...") but not the level or the
 * program, which the handler adds as it sees fit. Borrowed for the call. */
typedef void (*spindle_log_fn)(spindle_log_level level, const char *message,
                               void *user);

/* Install `fn` (NULL: drop every message) with `user` for the whole
 * process. Thread-safe: handlers are called one at a time under a lock,
 * from whichever thread logs (the engine's, an HTTP connection's, the
 * prompt cache's writer), and once spindle_set_log returns the previous
 * handler is never called again. A handler must not call spindle_set_log
 * or anything that logs (it would wait for itself). */
void spindle_set_log(spindle_log_fn fn, void *user);
/* "error", "warn", "info", "debug" (static strings); NULL outside the
 * enum. Thread-safe. */
const char *spindle_log_level_name(spindle_log_level level);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_BASE_H */
