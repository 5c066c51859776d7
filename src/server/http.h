/* Starting and stopping the HTTP daemon (http.c). */
#ifndef SP_SERVER_HTTP_H
#define SP_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "server/state.h"

/* Listen on s->opts.host:port (port 0: any free port); `bound` receives
 * "HOST:PORT" as bound. False after printing why on stderr. */
bool sp_http_start(sp_server *s, char *bound, size_t bound_size);
/* Stop accepting connections; those open go on. */
void sp_http_stop_listening(sp_server *s);
/* Close every connection and join the daemon's threads. */
void sp_http_stop(sp_server *s);

#endif
