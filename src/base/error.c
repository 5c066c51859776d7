/* One-line errors into the caller's spindle_error (error.h): sp_fail formats
 * the message and returns the status. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

spindle_status sp_fail(spindle_error *err, spindle_status status,
                       const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        /* Keep the one-line promise even when a file name holds a newline. */
        for (char *p = err->message; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        err->status = status;
    }
    return status;
}

void sp_error_clear(spindle_error *err) {
    if (err) {
        err->status = SPINDLE_OK;
        err->message[0] = '\0';
    }
}

const char *spindle_status_name(spindle_status status) {
    switch (status) {
    case SPINDLE_OK: return "ok";
    case SPINDLE_ERR_ARGUMENT: return "invalid argument";
    case SPINDLE_ERR_IO: return "i/o error";
    case SPINDLE_ERR_FORMAT: return "format error";
    case SPINDLE_ERR_UNSUPPORTED: return "unsupported";
    case SPINDLE_ERR_MEMORY: return "out of memory";
    case SPINDLE_ERR_LIMIT: return "limit exceeded";
    case SPINDLE_ERR_TEMPLATE: return "template error";
    case SPINDLE_ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}

void spindle_free(void *ptr) { free(ptr); }
