/* The log handler (log.h): one per process, called under a lock so that a
 * handler replaced by spindle_set_log is never called afterwards. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static spindle_log_fn handler;
static void *handler_user;

void spindle_set_log(spindle_log_fn fn, void *user) {
    pthread_mutex_lock(&lock);
    handler = fn;
    handler_user = user;
    pthread_mutex_unlock(&lock);
}

const char *spindle_log_level_name(spindle_log_level level) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    return (unsigned)level < sizeof names / sizeof *names ? names[level] : NULL;
}

void sp_log(spindle_log_level level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&lock);
    if (handler) handler(level, line, handler_user);
    pthread_mutex_unlock(&lock);
}
