/* Remote images over libcurl (remote_media.h). The URL is parsed once, by
 * libcurl's own parser, and that parsed handle is what is fetched, so the
 * host checked is the host connected to. */
#include "server/remote_media.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool sp_remote_media_init(void) {
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

void sp_remote_media_cleanup(void) {
    curl_global_cleanup();
}

static bool fail(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return false;
}

/* Whether `host` is one of the comma-separated `hosts` (or they are "*"),
 * compared without case as DNS names are. */
static bool host_allowed(const char *hosts, const char *host) {
    if (!strcmp(hosts, "*")) return true;
    const size_t len = strlen(host);
    for (const char *at = hosts; *at;) {
        const char *end = strchr(at, ',');
        const size_t n = end ? (size_t)(end - at) : strlen(at);
        if (n == len && !strncasecmp(at, host, n)) return true;
        at += n + (end != NULL);
    }
    return false;
}

typedef struct body {
    unsigned char *p;
    size_t n, cap, max;
    bool too_large;
} body;

static size_t on_data(char *data, size_t size, size_t count, void *ctx) {
    body *b = ctx;
    const size_t add = size * count;
    if (add > b->max - b->n) {
        b->too_large = true;
        return 0;   /* libcurl stops with CURLE_WRITE_ERROR */
    }
    if (b->n + add > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->n + add) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) return 0;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, add);
    b->n += add;
    return add;
}

/* The URL parsed by libcurl, http(s) and its host allowed; NULL with why. */
static CURLU *checked_url(const char *url, const char *hosts, char *why, size_t cap) {
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL;
    bool ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK;
    if (!ok) fail(why, cap, "the image URL does not parse as a URL");
    else if (strcasecmp(scheme, "http") && strcasecmp(scheme, "https"))
        ok = fail(why, cap, "the image URL's scheme must be http or https");
    else if (!host_allowed(hosts, host))
        ok = fail(why, cap, "the image URL's host '%.80s' is not among the hosts "
                  "--allow-remote-media names", host);
    curl_free(scheme);
    curl_free(host);
    if (!ok) curl_url_cleanup(u);
    return ok ? u : NULL;
}

bool sp_remote_media_fetch(const char *url, const sp_remote_media_policy *policy,
                           unsigned char **bytes, size_t *n, char *why, size_t why_cap) {
    *bytes = NULL;
    *n = 0;
    CURLU *u = checked_url(url, policy->hosts, why, why_cap);
    if (!u) return false;
    CURL *h = curl_easy_init();
    if (!h) {
        curl_url_cleanup(u);
        return fail(why, why_cap, "out of memory for the image fetch");
    }
    body b = {.max = policy->max_bytes};
    const long timeout_ms = (long)policy->timeout_s * 1000;
    curl_easy_setopt(h, CURLOPT_CURLU, u);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);   /* a redirect could leave the hosts */
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);         /* timeouts without signals: threads */
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)policy->max_bytes);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "spindle");
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    curl_url_cleanup(u);
    bool ok = false;
    if (b.too_large || rc == CURLE_FILESIZE_EXCEEDED)
        fail(why, why_cap, "the image at the URL is larger than the server's limit of %zu "
             "bytes", policy->max_bytes);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        fail(why, why_cap, "fetching the image URL took longer than %d s", policy->timeout_s);
    else if (rc != CURLE_OK)
        fail(why, why_cap, "fetching the image URL failed: %s", curl_easy_strerror(rc));
    else if (status < 200 || status > 299)
        fail(why, why_cap, "fetching the image URL answered HTTP %ld%s", status,
             status >= 300 && status < 400 ? " (redirects are not followed)" : "");
    else if (!b.n)
        fail(why, why_cap, "the image URL's body is empty");
    else
        ok = true;
    if (!ok) {
        free(b.p);
        return false;
    }
    *bytes = b.p;
    *n = b.n;
    return true;
}
