/* The HTTP layer over libmicrohttpd: one thread per connection (so a
 * handler may wait for the engine), routing by method and path, the API
 * key, CORS, the body limit and read deadline, and the reply helpers that
 * every route uses (state.h). */
#include "server/api_anthropic.h"
#include "server/api_response.h"
#include "server/http.h"
#include "server/model_set.h"
#include "server/state.h"
#include "base/log.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* One request's state between MHD's calls of the access handler. */
typedef struct http_request {
    sp_strbuf body;
    bool too_large;
    bool too_slow;        /* past --read-timeout: the connection is closed */
    struct timespec start;
} http_request;

/* The rows of routes.def. */
typedef struct route_entry {
    sp_route route;
    const char *method;   /* GET routes also answer HEAD */
    const char *path, *also;
    sp_route_handler handler;
    bool api_key;
} route_entry;

static const route_entry routes[] = {
#define SP_ROUTE(name, method, path, also, metric, handler, api_key)                   \
    {SP_ROUTE_##name, method, path, also, handler, api_key},
#include "server/routes.def"
};

/* Whether `url` is `path`, or starts with what precedes a final "{id}". */
static bool path_matches(const char *path, const char *url) {
    size_t n = strlen(path);
    if (n >= 4 && !strcmp(path + n - 4, "{id}")) return !strncmp(url, path, n - 4);
    return !strcmp(url, path);
}

/* Whether row r answers `method` (GET rows answer HEAD too; OPTIONS is
 * answered by the first row of the path). */
static bool method_matches(const route_entry *r, const char *method) {
    return !strcmp(r->method, method) ||
           (!strcmp(r->method, "GET") && !strcmp(method, "HEAD"));
}

/* The first row with a path that `url` matches and that takes `method`,
 * else the first with that path (which refuses the method); that path in
 * *path. */
static const route_entry *find_route(const char *url, const char *method, const char **path) {
    const route_entry *first = NULL;
    const char *first_path = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const route_entry *r = &routes[i];
        const char *p = path_matches(r->path, url) ? r->path
                        : r->also && path_matches(r->also, url) ? r->also : NULL;
        if (!p) continue;
        if (method_matches(r, method)) {
            *path = p;
            return r;
        }
        if (!first) {
            first = r;
            first_path = p;
        }
    }
    *path = first_path;
    return first;
}

static double seconds_since(const struct timespec *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + (now.tv_nsec - t->tv_nsec) * 1e-9;
}

/* ------------------------------------------------------------ replies */

static void add_common_headers(sp_server *s, struct MHD_Response *r, int status) {
    if (s->opts.cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", s->opts.cors_origin);
        if (strcmp(s->opts.cors_origin, "*")) MHD_add_response_header(r, "Vary", "Origin");
    }
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
}

static enum MHD_Result queue(sp_server *s, struct MHD_Connection *c, sp_route route,
                             int status, struct MHD_Response *r) {
    if (!r) return MHD_NO;
    add_common_headers(s, r, status);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    sp_metrics_count_request(s->metrics, route, status);
    if (s->opts.log_requests)
        sp_log(SPINDLE_LOG_INFO, "%s %d", sp_route_name(route), status);
    return rc;
}

enum MHD_Result sp_reply(sp_server *s, struct MHD_Connection *c, sp_route route,
                         int status, const char *content_type, const char *body,
                         size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (r) MHD_add_response_header(r, "Content-Type", content_type);
    return queue(s, c, route, status, r);
}

enum MHD_Result sp_reply_json(sp_server *s, struct MHD_Connection *c, sp_route route,
                              int status, char *json) {
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        return sp_reply(s, c, route, 503, "application/json", oom, sizeof oom - 1);
    }
    enum MHD_Result rc = sp_reply(s, c, route, status, "application/json", json, strlen(json));
    free(json);
    return rc;
}

enum MHD_Result sp_reply_error(sp_server *s, struct MHD_Connection *c, sp_route route,
                               const sp_api_error *e) {
    bool anthropic = route == SP_ROUTE_MESSAGES || route == SP_ROUTE_COUNT_TOKENS;
    return sp_reply_json(s, c, route, e->http_status,
                         anthropic ? sp_anthropic_error_json(e) : sp_api_error_json(e));
}

enum MHD_Result sp_reply_stream(sp_server *s, struct MHD_Connection *c, sp_route route,
                                MHD_ContentReaderCallback reader, void *cls,
                                MHD_ContentReaderFreeCallback free_cls) {
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, cls, free_cls);
    if (!r) {
        free_cls(cls);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return queue(s, c, route, 200, r);
}

bool sp_client_connected(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return false;
    char byte;
    ssize_t n = recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;   /* orderly close */
    return n > 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/* --------------------------------------------------------- the checks */

/* "Authorization: Bearer <key>", or Anthropic's "x-api-key: <key>",
 * compared in constant time. */
static bool authorized(sp_server *s, struct MHD_Connection *c) {
    const char *key = s->opts.api_key;
    if (!key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncmp(h, "Bearer ", 7)) h += 7;
    else if (!(h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"))) return false;
    size_t n = strlen(key), m = strlen(h);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(key[i] ^ (i < m ? h[i] : 0));
    return diff == 0;
}

static enum MHD_Result reply_preflight(sp_server *s, struct MHD_Connection *c,
                                       const route_entry *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    /* Every method of the rows that share r's path. */
    char methods[64] = "";
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        if (strcmp(routes[i].path, r->path)) continue;
        size_t at = strlen(methods);
        snprintf(methods + at, sizeof methods - at, "%s, ",
                 !strcmp(routes[i].method, "GET") ? "GET, HEAD" : routes[i].method);
    }
    strncat(methods, "OPTIONS", sizeof methods - strlen(methods) - 1);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            "Authorization, Content-Type, x-api-key, anthropic-version");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    return queue(s, c, r->route, 204, resp);
}

static enum MHD_Result reply_problem(sp_server *s, struct MHD_Connection *c, sp_route route,
                                     int status, const char *code, const char *msg) {
    sp_api_error e;
    sp_api_fail(&e, status, "invalid_request_error", NULL, code, "%s", msg);
    return sp_reply_error(s, c, route, &e);
}

/* Checks that need only the request line and headers: true with a reply
 * queued (its result in *rc), false when the request may go on. */
static bool refuse_early(sp_server *s, struct MHD_Connection *c, const route_entry *r,
                         const char *path, const char *method, const char *url,
                         enum MHD_Result *rc) {
    char msg[160];
    if (!r) {
        snprintf(msg, sizeof msg, "no route %.16s %.100s", method, url);
        *rc = reply_problem(s, c, SP_ROUTE_OTHER, 404, "not_found", msg);
        return true;
    }
    if (!strcmp(method, "OPTIONS") && s->opts.cors_origin) {
        *rc = reply_preflight(s, c, r);
        return true;
    }
    if (!method_matches(r, method)) {
        snprintf(msg, sizeof msg, "%s takes %s, not %.16s", path, r->method, method);
        *rc = reply_problem(s, c, r->route, 405, "method_not_allowed", msg);
        return true;
    }
    if (r->api_key && !authorized(s, c)) {
        sp_api_error e;
        sp_api_fail(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                    "Invalid or missing API key (send 'Authorization: Bearer KEY' or "
                    "'x-api-key: KEY')");
        *rc = sp_reply_error(s, c, r->route, &e);
        return true;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->opts.max_body_bytes) {
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->opts.max_body_bytes);
        *rc = reply_problem(s, c, r->route, 413, "request_too_large", msg);
        return true;
    }
    return false;
}

static enum MHD_Result dispatch(sp_server *s, struct MHD_Connection *c, const route_entry *r,
                                const char *url, http_request *rq) {
    char msg[96];
    if (rq->too_large) {
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->opts.max_body_bytes);
        return reply_problem(s, c, r->route, 413, "request_too_large", msg);
    }
    const sp_http_call call = {.route = r->route, .url = url,
                               .body = rq->body.p ? rq->body.p : "", .len = rq->body.len};
    if (s->models) return sp_model_set_dispatch(s, c, r->handler, &call);
    return r->handler(s, c, &call);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version,
                                 const char *upload, size_t *upload_size, void **con_cls) {
    sp_server *s = cls;
    (void)version;
    const char *path = NULL;
    const route_entry *r = find_route(url, method, &path);
    http_request *rq = *con_cls;
    if (!rq) {
        enum MHD_Result rc;
        if (refuse_early(s, c, r, path, method, url, &rc)) return rc;
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        rq->body.limit = s->opts.max_body_bytes;
        clock_gettime(CLOCK_MONOTONIC, &rq->start);
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_slow && s->opts.read_timeout_s > 0 &&
            seconds_since(&rq->start) > s->opts.read_timeout_s)
            rq->too_slow = true;
        if (!rq->too_large && !rq->too_slow && !sp_strbuf_add(&rq->body, upload, *upload_size))
            rq->too_large = true;
        *upload_size = 0;
        /* A client past the deadline is dropped now (MHD 0.9 cannot queue
         * an answer before the body has been read). */
        return rq->too_slow ? MHD_NO : MHD_YES;
    }
    return dispatch(s, c, r, url, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
    (void)cls;
    (void)c;
    (void)why;
    http_request *rq = *con_cls;
    if (!rq) return;
    sp_strbuf_free(&rq->body);
    free(rq);
    *con_cls = NULL;
}

bool sp_http_start(sp_server *s, char *bound, size_t bound_size) {
    const sp_server_options *o = &s->opts;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai) {
        sp_log(SPINDLE_LOG_ERROR, "--host %s: %s", o->host, gai_strerror(gai));
        return false;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, o->max_header_bytes,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        sp_log(SPINDLE_LOG_ERROR, "cannot listen on %s port %d: %s", o->host, o->port,
                strerror(errno ? errno : EADDRINUSE));
        freeaddrinfo(ai);
        return false;
    }
    char host[NI_MAXHOST] = "";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(ai);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(bound, bound_size, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
             info ? (unsigned)info->port : (unsigned)o->port);
    return true;
}

void sp_http_stop_listening(sp_server *s) {
    if (!s->daemon) return;
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void sp_http_stop(sp_server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
