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

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_BASE_H */
