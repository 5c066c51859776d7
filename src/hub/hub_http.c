/* The Hub's HTTP requests over libcurl. Redirects are not followed for
 * metadata (the Hub's answer carries the headers that matter, and the
 * redirect target is the content's location) and are followed for bodies.
 * The caller sends no token to a content host (sp_hub_same_host), and curl
 * drops a custom Authorization header when a followed redirect leaves the
 * host, so the token never reaches a content server. */
#include "hub/hub_http.h"

#include "base/error.h"

#include <curl/curl.h>
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Repository info is a few kilobytes per file; a larger answer is wrong. */
#define META_BODY_LIMIT (16u << 20)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

void sp_hub_reply_free(sp_hub_reply *r) {
    free(r->repo_commit);
    free(r->etag);
    free(r->location);
    sp_strbuf_free(&r->body);
    memset(r, 0, sizeof *r);
}

typedef struct header_state {
    char *linked_etag, *etag, *linked_size, *content_length, *repo_commit;
} header_state;

/* `line` is "Name: value" (no NUL); replaces *slot when Name matches. */
static void take_header(const char *line, size_t n, const char *name,
                        char **slot) {
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) || line[k] != ':') return;
    const char *v = line + k + 1;
    size_t m = n - k - 1;
    while (m && (*v == ' ' || *v == '\t')) v++, m--;
    while (m && (v[m - 1] == '\r' || v[m - 1] == '\n' || v[m - 1] == ' ')) m--;
    char *copy = malloc(m + 1);
    if (!copy) return;
    memcpy(copy, v, m);
    copy[m] = '\0';
    free(*slot);
    *slot = copy;
}

static void header_state_clear(header_state *h) {
    free(h->linked_etag);
    free(h->etag);
    free(h->linked_size);
    free(h->content_length);
    free(h->repo_commit);
    memset(h, 0, sizeof *h);
}

static size_t on_header(char *line, size_t size, size_t count, void *user) {
    header_state *h = user;
    size_t n = size * count;
    /* a new status line (after a redirect or 100) starts a new header set */
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) header_state_clear(h);
    take_header(line, n, "X-Linked-Etag", &h->linked_etag);
    take_header(line, n, "ETag", &h->etag);
    take_header(line, n, "X-Linked-Size", &h->linked_size);
    take_header(line, n, "Content-Length", &h->content_length);
    take_header(line, n, "X-Repo-Commit", &h->repo_commit);
    return n;
}

static size_t on_meta_body(char *data, size_t size, size_t count, void *user) {
    sp_strbuf *b = user;
    return sp_strbuf_add(b, data, size * count) ? size * count : 0;
}

static uint64_t parse_size(const char *s) {
    if (!s || !isdigit((unsigned char)*s)) return 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    return *end ? 0 : (uint64_t)v;
}

static struct curl_slist *auth_headers(const char *token, spindle_status *st,
                                       spindle_error *err) {
    struct curl_slist *list = curl_slist_append(NULL, "Accept-Encoding: identity");
    if (list && token && *token) {
        if (strpbrk(token, "\r\n")) {
            curl_slist_free_all(list);
            *st = sp_fail(err, SPINDLE_ERR_ARGUMENT, "HF_TOKEN: contains a line break");
            return NULL;
        }
        char *line = malloc(strlen(token) + 32);
        if (line) sprintf(line, "Authorization: Bearer %s", token);
        struct curl_slist *grown = line ? curl_slist_append(list, line) : NULL;
        free(line);
        if (!grown) curl_slist_free_all(list);
        list = grown;
    }
    if (!list) *st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return list;
}

static CURL *new_handle(const char *url, struct curl_slist *headers,
                        header_state *h) {
    pthread_once(&curl_once, curl_init_once);
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "spindle/" SPINDLE_VERSION);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a stalled transfer (under 1 byte/s for 60 s) breaks off and resumes */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    return c;
}

spindle_status sp_hub_http_meta(const char *url, const char *token, bool head,
                                sp_hub_reply *reply, spindle_error *err) {
    memset(reply, 0, sizeof *reply);
    reply->body.limit = META_BODY_LIMIT;
    spindle_status st = SPINDLE_OK;
    struct curl_slist *headers = auth_headers(token, &st, err);
    if (!headers) return st;
    header_state h = {0};
    CURL *c = new_handle(url, headers, &h);
    if (!c) {
        curl_slist_free_all(headers);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    curl_easy_setopt(c, CURLOPT_NOBODY, head ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_meta_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply->body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK) {
        st = sp_fail(err, SPINDLE_ERR_IO, "%s: %s", url,
                     reply->body.overflow ? "answer too large" : curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply->status);
        char *redirect = NULL;
        curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &redirect);
        reply->location = strdup(redirect ? redirect : url);
        reply->repo_commit = h.repo_commit;
        h.repo_commit = NULL;
        reply->etag = sp_hub_normalize_etag(h.linked_etag ? h.linked_etag : h.etag);
        bool redirected = reply->status >= 300 && reply->status < 400;
        reply->size = h.linked_size ? parse_size(h.linked_size)
                      : redirected  ? 0 : parse_size(h.content_length);
        if (!reply->location) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    header_state_clear(&h);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    if (st != SPINDLE_OK) sp_hub_reply_free(reply);
    return st;
}

/* host:port of an absolute URL, malloc'd; NULL when it cannot be parsed */
static char *host_and_port(const char *url) {
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL, *out = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
        out = malloc(strlen(host) + strlen(port) + 2);
        if (out) sprintf(out, "%s:%s", host, port);
    }
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return out;
}

bool sp_hub_same_host(const char *a, const char *b) {
    char *ha = host_and_port(a), *hb = host_and_port(b);
    bool same = ha && hb && !strcasecmp(ha, hb);
    free(ha);
    free(hb);
    return same;
}

typedef struct body_state {
    CURL *curl;
    FILE *file;
    uint64_t have;
    bool checked_status;
    bool write_failed;
    const char *name;
    uint64_t total;
    const sp_hub_options *opts;
} body_state;

static size_t on_body(char *data, size_t size, size_t count, void *user) {
    body_state *b = user;
    size_t n = size * count;
    if (!b->checked_status) {
        b->checked_status = true;
        long status = 0;
        curl_easy_getinfo(b->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status == 200 && b->have > 0) {
            /* the server ignored the Range: the body starts at byte 0 */
            if (fflush(b->file) || ftruncate(fileno(b->file), 0) || fseek(b->file, 0, SEEK_SET)) {
                b->write_failed = true;
                return 0;
            }
            b->have = 0;
        } else if (status < 200 || status >= 300) {
            return n; /* an error page: read and dropped */
        }
    }
    long status = 0;
    curl_easy_getinfo(b->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status >= 300) return n;
    if (fwrite(data, 1, n, b->file) != n) {
        b->write_failed = true;
        return 0;
    }
    return n;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal; (void)ultotal; (void)ulnow;
    body_state *b = user;
    if (b->opts && b->opts->progress)
        b->opts->progress(b->name, b->have + (uint64_t)dlnow, b->total,
                          b->opts->progress_user);
    return 0;
}

spindle_status sp_hub_http_body(const char *url, const char *token, FILE *file,
                                uint64_t have, uint64_t total, const char *name,
                                const sp_hub_options *opts, long *status,
                                bool *retry, spindle_error *err) {
    *status = 0;
    *retry = false;
    spindle_status st = SPINDLE_OK;
    struct curl_slist *headers = auth_headers(token, &st, err);
    if (!headers) return st;
    header_state h = {0};
    CURL *c = new_handle(url, headers, &h);
    if (!c) {
        curl_slist_free_all(headers);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    body_state b = {c, file, have, false, false, name, total, opts};
    char range[48];
    if (have > 0) {
        snprintf(range, sizeof range, "%llu-", (unsigned long long)have);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &b);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (fflush(file) != 0 || b.write_failed) {
        st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot write the download", name);
    } else if (rc != CURLE_OK) {
        *retry = rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR ||
                 rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_GOT_NOTHING ||
                 rc == CURLE_SEND_ERROR || rc == CURLE_COULDNT_CONNECT;
        st = sp_fail(err, SPINDLE_ERR_IO, "%s: download broke off: %s", name,
                     curl_easy_strerror(rc));
    }
    header_state_clear(&h);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    return st;
}
