/* spindle pull: a repository's chosen files into the Hugging Face cache,
 * laid out as huggingface_hub lays them out (blobs named by ETag, snapshot
 * entries as relative symlinks to them, refs/main naming the commit), or
 * found there when offline. */
#include "hub/hub.h"
#include "hub/hub_http.h"

#include "artifacts/config.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/mapped_file.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* A transfer that breaks off is resumed this many times before giving up. */
#define DOWNLOAD_ATTEMPTS 5

static char *str_printf(const char *fmt, ...) SP_PRINTF(1, 2);
static char *str_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") ||
                 !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

static bool file_exists(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

/* ---- verification ------------------------------------------------------ */

/* The digest huggingface_hub's ETag names: SHA-256 of the content for
 * LFS files (64 hex digits), the git blob id, SHA-1 of "blob <size>\0"
 * and the content, for small ones (40 hex digits). */
static spindle_status verify_blob(const char *path, const char *etag,
                                  uint64_t size, const char *name,
                                  spindle_error *err) {
    size_t etag_len = strlen(etag);
    bool sha256 = etag_len == 64, git_sha1 = etag_len == 40;
    FILE *f = fopen(path, "rb");
    if (!f) return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot read the download", name);
    fseeko(f, 0, SEEK_END);
    uint64_t actual = (uint64_t)ftello(f);
    rewind(f);
    if (size && actual != size) {
        fclose(f);
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: corrupted download (%llu bytes, the Hub says %llu); removed",
                       name, (unsigned long long)actual, (unsigned long long)size);
    }
    if (!sha256 && !git_sha1) {
        fclose(f);
        return SPINDLE_OK; /* an ETag that is no digest: the size is all */
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestInit_ex(md, sha256 ? EVP_sha256() : EVP_sha1(), NULL);
    if (ok && git_sha1) {
        char head[40];
        int n = snprintf(head, sizeof head, "blob %llu", (unsigned long long)actual);
        ok = EVP_DigestUpdate(md, head, (size_t)n + 1);
    }
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = malloc(CHUNK);
    ok = ok && buf;
    size_t n;
    while (ok && (n = fread(buf, 1, CHUNK, f)) > 0) ok = EVP_DigestUpdate(md, buf, n);
    ok = ok && !ferror(f);
    free(buf);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned digest_len = 0;
    ok = ok && EVP_DigestFinal_ex(md, digest, &digest_len);
    EVP_MD_CTX_free(md);
    fclose(f);
    if (!ok) return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot hash the download", name);
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    for (unsigned i = 0; i < digest_len; i++) sprintf(hex + 2 * i, "%02x", digest[i]);
    if (strcasecmp(hex, etag))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: corrupted download (%s %s, the Hub says %s); removed",
                       name, sha256 ? "SHA-256" : "git blob id", hex, etag);
    return SPINDLE_OK;
}

/* ---- one file ---------------------------------------------------------- */

static spindle_status http_status_error(long status, const char *what,
                                        bool have_token, spindle_error *err) {
    if (status == 401 || status == 403)
        return sp_fail(err, SPINDLE_ERR_IO, "%s: HTTP %ld, access denied (%s)", what,
                       status, have_token ? "HF_TOKEN does not grant access"
                                          : "a gated or private repository: set HF_TOKEN");
    if (status == 404)
        return sp_fail(err, SPINDLE_ERR_IO, "%s: HTTP 404, not found on the Hub", what);
    if (status == 429)
        return sp_fail(err, SPINDLE_ERR_IO, "%s: HTTP 429, rate limited by the Hub; try again later",
                       what);
    return sp_fail(err, SPINDLE_ERR_IO, "%s: HTTP %ld from the Hub", what, status);
}

/* Download `location` into blobs/<etag>.incomplete, resuming what is there,
 * then verify it and move it to blobs/<etag>. */
static spindle_status download_blob(const char *location, const char *token,
                                    const char *blob, const char *etag,
                                    uint64_t size, const char *name,
                                    const sp_hub_options *opts, spindle_error *err) {
    char *partial = str_printf("%s.incomplete", blob);
    if (!partial) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = SPINDLE_OK;
    for (int attempt = 0; attempt < DOWNLOAD_ATTEMPTS; attempt++) {
        FILE *f = fopen(partial, "a+b");
        if (!f) {
            st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot create (%s)", partial, strerror(errno));
            break;
        }
        fseeko(f, 0, SEEK_END);
        uint64_t have = (uint64_t)ftello(f);
        if (size && have > size) { /* longer than the file: start again */
            if (ftruncate(fileno(f), 0) == 0) have = 0;
        }
        long status = 0;
        bool retry = false;
        if (size && have == size) {
            fclose(f);
            st = SPINDLE_OK;
            break;
        }
        st = sp_hub_http_body(location, token, f, have, size, name, opts, &status, &retry, err);
        fclose(f);
        if (st == SPINDLE_OK && status == 416) { /* a range past the end: start again */
            if (truncate(partial, 0) != 0) break;
            continue;
        }
        if (st == SPINDLE_OK && (status < 200 || status >= 300)) {
            st = http_status_error(status, name, token && *token, err);
            retry = status == 429 || status >= 500;
        }
        if (st == SPINDLE_OK || !retry) break;
    }
    if (st == SPINDLE_OK) {
        st = verify_blob(partial, etag, size, name, err);
        if (st != SPINDLE_OK) unlink(partial); /* nothing bad stays in the cache */
        else if (rename(partial, blob) != 0)
            st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot rename (%s)", blob, strerror(errno));
    }
    free(partial);
    return st;
}

/* snapshots/<commit>/NAME -> ../../blobs/ETAG, one more "../" per folder
 * in NAME, as huggingface_hub links them. */
static spindle_status link_snapshot(const char *snapshot, const char *name,
                                    const char *etag, spindle_error *err) {
    char *path = sp_path_join(snapshot, name);
    if (!path) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    char *slash = strrchr(path, '/');
    *slash = '\0';
    bool dir_ok = sp_make_dirs(path);
    *slash = '/';
    sp_strbuf target = {0};
    sp_strbuf_add(&target, "../../", 6);
    for (const char *p = name; (p = strchr(p, '/')); p++) sp_strbuf_add(&target, "../", 3);
    sp_strbuf_printf(&target, "blobs/%s", etag);
    spindle_status st = SPINDLE_OK;
    if (!dir_ok) st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot create its folder", path);
    else if (target.oom) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    else {
        unlink(path);
        if (symlink(target.p, path) != 0)
            st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot link (%s)", path, strerror(errno));
    }
    sp_strbuf_free(&target);
    free(path);
    return st;
}

typedef struct pull_ctx {
    const char *endpoint, *token, *repo, *commit, *repo_dir, *snapshot;
    const sp_hub_options *opts;
} pull_ctx;

static char *escape_path(const char *name) {
    sp_strbuf out = {0};
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        char *part = curl_easy_escape(NULL, p, (int)n);
        if (part) sp_strbuf_add(&out, part, strlen(part));
        else out.oom = true;
        curl_free(part);
        p += n;
        if (*p == '/') sp_strbuf_addc(&out, *p++);
    }
    if (out.oom) {
        sp_strbuf_free(&out);
        return NULL;
    }
    return out.p;
}

static spindle_status fetch_file(const pull_ctx *c, const char *name,
                                 spindle_error *err) {
    char *in_snapshot = sp_path_join(c->snapshot, name);
    if (!in_snapshot) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    bool have = file_exists(in_snapshot);
    free(in_snapshot);
    if (have) return SPINDLE_OK;
    char *escaped = escape_path(name);
    char *url = escaped ? str_printf("%s/%s/resolve/%s/%s", c->endpoint, c->repo,
                                     c->commit, escaped) : NULL;
    free(escaped);
    if (!url) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    sp_hub_reply meta;
    spindle_status st = sp_hub_http_meta(url, c->token, true, &meta, err);
    if (st != SPINDLE_OK) {
        free(url);
        return st;
    }
    char *blob = NULL;
    if (meta.status >= 400 || meta.status < 200) {
        st = http_status_error(meta.status, name, c->token && *c->token, err);
    } else if (!meta.etag) {
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: the Hub sent no usable ETag", name);
    } else if (!(blob = str_printf("%s/blobs/%s", c->repo_dir, meta.etag))) {
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    } else if (!file_exists(blob)) {
        const char *token = sp_hub_same_host(url, meta.location) ? c->token : NULL;
        st = download_blob(meta.location, token, blob, meta.etag, meta.size, name,
                           c->opts, err);
    }
    if (st == SPINDLE_OK) st = link_snapshot(c->snapshot, name, meta.etag, err);
    free(blob);
    free(url);
    sp_hub_reply_free(&meta);
    return st;
}

/* ---- the repository ---------------------------------------------------- */

static spindle_status fetch_repo_info(const char *endpoint, const char *repo,
                                      const char *token, char **commit,
                                      char ***files, size_t *count,
                                      spindle_error *err) {
    char *url = str_printf("%s/api/models/%s/revision/main", endpoint, repo);
    if (!url) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    sp_hub_reply r;
    spindle_status st = sp_hub_http_meta(url, token, false, &r, err);
    free(url);
    if (st != SPINDLE_OK) return st;
    if (r.status != 200) st = http_status_error(r.status, repo, token && *token, err);
    else st = sp_hub_parse_repo_info(r.body.p ? r.body.p : "", r.body.len, commit, files,
                                     count, err);
    sp_hub_reply_free(&r);
    return st;
}

/* Every regular file under `dir` (following the snapshot's symlinks),
 * named relative to it. */
static bool list_files(const char *dir, const char *prefix, char ***files,
                       size_t *count) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool ok = true;
    struct dirent *e;
    while (ok && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *path = sp_path_join(dir, e->d_name);
        char *rel = *prefix ? str_printf("%s/%s", prefix, e->d_name) : strdup(e->d_name);
        struct stat s;
        if (!path || !rel) ok = false;
        else if (stat(path, &s) == 0 && S_ISDIR(s.st_mode)) ok = list_files(path, rel, files, count);
        else if (S_ISREG(s.st_mode)) {
            char **grown = realloc(*files, (*count + 1) * sizeof *grown);
            ok = grown != NULL;
            if (ok) {
                *files = grown;
                (*files)[(*count)++] = rel;
                rel = NULL;
            }
        }
        free(path);
        free(rel);
    }
    closedir(d);
    return ok;
}

static spindle_status cached_repo(const char *repo_dir, const char *repo,
                                  char **commit, char ***files, size_t *count,
                                  spindle_error *err) {
    char *refs = sp_path_join(repo_dir, "refs/main");
    if (!refs) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = file_exists(refs)
        ? sp_read_text_file(refs, commit, NULL, err)
        : sp_fail(err, SPINDLE_ERR_IO, "%s: not in the HF cache (%s), and offline", repo,
                  repo_dir);
    free(refs);
    if (st != SPINDLE_OK) return st;
    (*commit)[strcspn(*commit, " \r\n\t")] = '\0';
    char *snapshot = str_printf("%s/snapshots/%s", repo_dir, *commit);
    if (!snapshot || strchr(*commit, '/') || !list_files(snapshot, "", files, count))
        st = sp_fail(err, SPINDLE_ERR_IO, "%s: the cached snapshot cannot be read", repo);
    free(snapshot);
    return st;
}

static spindle_status pull_files(const pull_ctx *c, const sp_hub_selection *sel,
                                 spindle_error *err) {
    spindle_status st = SPINDLE_OK;
    for (size_t i = 0; i < sel->count && st == SPINDLE_OK; i++) {
        if (c->opts->offline) {
            char *p = sp_path_join(c->snapshot, sel->picked[i]);
            if (!p || !file_exists(p))
                st = sp_fail(err, SPINDLE_ERR_IO, "%s: %s is not in the HF cache, and offline",
                             c->repo, sel->picked[i]);
            free(p);
        } else {
            st = fetch_file(c, sel->picked[i], err);
        }
    }
    return st;
}

spindle_status sp_hub_pull(const char *ref, const sp_hub_options *given,
                           char **local_path, spindle_error *err) {
    *local_path = NULL;
    sp_hub_options opts = given ? *given : (sp_hub_options){0};
    opts.offline = opts.offline || env_true("HF_HUB_OFFLINE");
    if (!opts.endpoint) opts.endpoint = getenv("HF_ENDPOINT");
    if (!opts.endpoint || !*opts.endpoint) opts.endpoint = "https://huggingface.co";
    if (!opts.token) opts.token = getenv("HF_TOKEN");
    char *repo = NULL, *quant = NULL, *cache = NULL, *endpoint = NULL, *repo_dir = NULL;
    char *commit = NULL, *snapshot = NULL, **files = NULL;
    size_t count = 0;
    sp_hub_selection sel = {NULL, 0, -1};
    spindle_status st = sp_hub_parse_ref(ref, &repo, &quant, err);
    if (st != SPINDLE_OK) return st;
    cache = opts.cache_dir ? strdup(opts.cache_dir) : sp_hub_cache_dir();
    endpoint = strdup(opts.endpoint);
    for (size_t n = endpoint ? strlen(endpoint) : 0; n && endpoint[n - 1] == '/'; n--)
        endpoint[n - 1] = '\0';
    char *slash = strchr(repo, '/');
    repo_dir = cache && endpoint
        ? str_printf("%s/models--%.*s--%s", cache, (int)(slash - repo), repo, slash + 1)
        : NULL;
    if (!repo_dir) {
        st = cache ? sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory")
                   : sp_fail(err, SPINDLE_ERR_ARGUMENT,
                             "no HF cache location (set HF_HOME or HF_HUB_CACHE)");
    } else if (opts.offline) {
        st = cached_repo(repo_dir, repo, &commit, &files, &count, err);
    } else {
        st = fetch_repo_info(endpoint, repo, opts.token, &commit, &files, &count, err);
    }
    if (st == SPINDLE_OK)
        st = sp_hub_select((const char *const *)files, count, quant, &sel, err);
    if (st == SPINDLE_OK && !(snapshot = str_printf("%s/snapshots/%s", repo_dir, commit)))
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (st == SPINDLE_OK && !opts.offline) {
        char *blobs = str_printf("%s/blobs", repo_dir);
        if (!blobs || !sp_make_dirs(blobs) || !sp_make_dirs(snapshot))
            st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot create the cache folders", repo_dir);
        free(blobs);
    }
    pull_ctx ctx = {endpoint, opts.token, repo, commit, repo_dir, snapshot, &opts};
    if (st == SPINDLE_OK) st = pull_files(&ctx, &sel, err);
    if (st == SPINDLE_OK && !opts.offline) {
        char *refs = str_printf("%s/refs/main", repo_dir);
        char *refs_dir = str_printf("%s/refs", repo_dir);
        const void *parts[] = {commit};
        size_t sizes[] = {strlen(commit)};
        if (!refs || !refs_dir || !sp_make_dirs(refs_dir))
            st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot create refs/", repo_dir);
        else st = sp_atomic_write(refs, parts, sizes, 1, NULL, err);
        free(refs);
        free(refs_dir);
    }
    if (st == SPINDLE_OK) {
        *local_path = sel.primary >= 0 ? sp_path_join(snapshot, sel.picked[sel.primary])
                                       : strdup(snapshot);
        if (!*local_path) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    sp_hub_selection_free(&sel);
    sp_hub_free_list(files, count);
    free(snapshot);
    free(commit);
    free(repo_dir);
    free(endpoint);
    free(cache);
    free(quant);
    free(repo);
    return st;
}
