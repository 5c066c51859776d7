/* The library's messages to a person (spindle_set_log, include/spindle/
 * base.h): formatted here and handed to the program's handler, never
 * printed. */
#ifndef SP_BASE_LOG_H
#define SP_BASE_LOG_H

#include "base/error.h"

/* Format one line (no trailing newline; cut at 1 KiB) and pass it to the
 * installed handler, if any. Thread-safe. */
void sp_log(spindle_log_level level, const char *fmt, ...) SP_PRINTF(2, 3);

#endif
