/* HTTP(S) for the Hub over libcurl: a metadata request (the repository
 * info, a file's HEAD) and a file body appended to a partial download. */
#ifndef SP_HUB_HUB_HTTP_H
#define SP_HUB_HUB_HTTP_H

#include <stdint.h>
#include <stdio.h>

#include "base/strbuf.h"
#include "hub/hub.h"

/* What one response said; strings are malloc'd or NULL. */
typedef struct sp_hub_reply {
    long status;
    char *repo_commit;   /* X-Repo-Commit */
    char *etag;          /* X-Linked-Etag, else ETag (normalized) */
    uint64_t size;       /* X-Linked-Size, else Content-Length of a 2xx; 0: unknown */
    char *location;      /* absolute redirect target, else the URL asked */
    sp_strbuf body;      /* metadata requests only (capped) */
} sp_hub_reply;

void sp_hub_reply_free(sp_hub_reply *r);

/* GET (or HEAD when `head`) `url` without following redirects, with the
 * bearer token when one is given. A transfer failure is an error; any HTTP
 * status is a reply. */
spindle_status sp_hub_http_meta(const char *url, const char *token, bool head,
                                sp_hub_reply *reply, spindle_error *err);

/* Whether two absolute URLs name the same host and port. A file's content
 * on another host (the Hub's CDN, a signed URL) gets no token, as
 * huggingface_hub sends it none. */
bool sp_hub_same_host(const char *a, const char *b);

/* Append `url`'s body to `file` (open for read/write, positioned at its end,
 * holding `have` bytes), asking for the rest with a Range request when
 * `have` > 0 and starting over if the server sends the whole body.
 * `*status` is the final HTTP status; SPINDLE_ERR_IO with `*retry` set
 * means the transfer broke off and may be resumed. */
spindle_status sp_hub_http_body(const char *url, const char *token, FILE *file,
                                uint64_t have, uint64_t total, const char *name,
                                const sp_hub_options *opts, long *status,
                                bool *retry, spindle_error *err);

#endif
