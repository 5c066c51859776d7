/* Images named by http(s) URLs, fetched by the server when
 * --allow-remote-media lets it (remote_media.c, over libcurl). A server
 * that fetches what clients name can be made to reach hosts they cannot
 * (request forgery), so the option names the hosts it may fetch from,
 * redirects are not followed, and each fetch is bounded in bytes and
 * time. */
#ifndef SP_SERVER_REMOTE_MEDIA_H
#define SP_SERVER_REMOTE_MEDIA_H

#include <stdbool.h>
#include <stddef.h>

/* libcurl's process-wide set-up, once before any fetch (and its end);
 * false when libcurl cannot start. */
bool sp_remote_media_init(void);
void sp_remote_media_cleanup(void);

typedef struct sp_remote_media_policy {
    const char *hosts;     /* comma-separated host names or addresses, or "*" */
    size_t max_bytes;      /* a body past this is refused */
    int timeout_s;         /* the whole fetch, connection included */
} sp_remote_media_policy;

/* The body of `url` (an http or https URL whose host the policy names)
 * into *bytes (malloc'd, *n bytes) on a 2xx answer. Otherwise false,
 * *bytes NULL, and `why` one line naming the problem: a URL that does not
 * parse, another scheme, a host not allowed, a failed connection or
 * timeout, a status other than 2xx (a redirect included), an empty or too
 * large body. Thread-safe. */
bool sp_remote_media_fetch(const char *url, const sp_remote_media_policy *policy,
                           unsigned char **bytes, size_t *n, char *why, size_t why_cap);

#endif
