/* Model fingerprints (fingerprint.h) over libxxhash's XXH3-128: an identity,
 * not a defence against forgery, so the fastest well-distributed 128-bit
 * hash wins (the content hash runs at memory speed; SHA-256 would take
 * several seconds per GB the first time). */
#include "artifacts/fingerprint.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/mapped_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define GGUF_HEADER_BYTES 65536u
#define READ_CHUNK (1u << 20)

static void hex128(XXH128_hash_t h, char out[SP_FINGERPRINT_HEX + 1]) {
    snprintf(out, SP_FINGERPRINT_HEX + 1, "%016" PRIx64 "%016" PRIx64,
             (uint64_t)h.high64, (uint64_t)h.low64);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Bytes [0, n) of fd, hashed; n bounded by the caller. */
static spindle_status hash_prefix(int fd, uint64_t n, const char *path,
                                  XXH128_hash_t *out, spindle_error *err) {
    XXH3_state_t *st = XXH3_createState();
    unsigned char *buf = malloc(READ_CHUNK);
    if (!st || !buf) {
        XXH3_freeState(st);
        free(buf);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    XXH3_128bits_reset(st);
    spindle_status rc = SPINDLE_OK;
    for (uint64_t at = 0; at < n;) {
        size_t want = n - at < READ_CHUNK ? (size_t)(n - at) : READ_CHUNK;
        ssize_t got = pread(fd, buf, want, (off_t)at);
        if (got <= 0) {
            rc = sp_fail(err, SPINDLE_ERR_IO, "%s: read failed while hashing", path);
            break;
        }
        XXH3_128bits_update(st, buf, (size_t)got);
        at += (uint64_t)got;
    }
    *out = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    free(buf);
    return rc;
}

/* The header's extent: safetensors' 8-byte length + JSON; a GGUF file's
 * first 64 KiB (magic, version, counts and the start of the metadata). */
static uint64_t header_bytes(int fd, uint64_t size, bool gguf) {
    if (gguf) return size < GGUF_HEADER_BYTES ? size : GGUF_HEADER_BYTES;
    unsigned char le[8];
    if (size < 8 || pread(fd, le, 8, 0) != 8) return size;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | le[i];
    return n > size - 8 ? size : 8 + n;
}

/* ------------------------------------------------- the content hash cache */

static char *cache_dir_path(void) {
    const char *v = getenv("SPINDLE_CACHE_DIR");
    if (v && *v) return strdup(v);
    v = getenv("XDG_CACHE_HOME");
    if (v && *v) return sp_path_join(v, "spindle/content-hashes");
    v = getenv("HOME");
    return v && *v ? sp_path_join(v, ".cache/spindle/content-hashes") : NULL;
}

/* Where the cache entry of `path` lives: beside it (side) or in the cache
 * directory (made on demand when `make`). */
static char *entry_path(const char *path, bool side, bool make) {
    if (side) {
        size_t n = strlen(path);
        char *p = malloc(n + 6);
        if (p) memcpy(p, path, n), memcpy(p + n, ".xxh3", 6);
        return p;
    }
    char *dir = cache_dir_path(), abs[PATH_MAX], name[40];
    if (!dir) return NULL;
    if (!realpath(path, abs)) snprintf(abs, sizeof abs, "%s", path);
    snprintf(name, sizeof name, "%016" PRIx64 ".xxh3",
             (uint64_t)XXH3_64bits(abs, strlen(abs)));
    if (make) sp_make_dirs(dir);
    char *p = sp_path_join(dir, name);
    free(dir);
    return p;
}

static void entry_line(char *line, size_t cap, const struct stat *sb,
                       const char *header_hex, const char *content_hex) {
    snprintf(line, cap,
             "spindle-content-hash v1 xxh3-128 %s size %" PRIu64
             " mtime %lld.%09ld header %s\n",
             content_hex, (uint64_t)sb->st_size, (long long)sb->st_mtim.tv_sec,
             (long)sb->st_mtim.tv_nsec, header_hex);
}

/* The cached content hash of path, if an entry matches its size, mtime and
 * header hash. */
static bool cache_lookup(const char *path, const struct stat *sb,
                         const char *header_hex, char content_hex[33]) {
    for (int side = 1; side >= 0; side--) {
        char *ep = entry_path(path, side, false), line[256] = "", want[256];
        FILE *f = ep ? fopen(ep, "r") : NULL;
        free(ep);
        if (!f) continue;
        bool ok = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        char hex[33] = "";
        if (!ok || sscanf(line, "spindle-content-hash v1 xxh3-128 %32[0-9a-f]", hex) != 1 ||
            strlen(hex) != 32)
            continue;
        entry_line(want, sizeof want, sb, header_hex, hex);
        if (!strcmp(line, want)) {
            memcpy(content_hex, hex, 33);
            return true;
        }
    }
    return false;
}

/* Best effort: beside the file, else in the cache directory. */
static void cache_store(const char *path, const struct stat *sb,
                        const char *header_hex, const char *content_hex) {
    char line[256];
    entry_line(line, sizeof line, sb, header_hex, content_hex);
    const void *parts[1] = {line};
    size_t sizes[1] = {strlen(line)};
    for (int side = 1; side >= 0; side--) {
        char *ep = entry_path(path, side, true);
        bool ok = ep && sp_atomic_write(ep, parts, sizes, 1, NULL, NULL) == SPINDLE_OK;
        free(ep);
        if (ok) return;
    }
}

/* ------------------------------------------------------------ per file */

/* Feed one weight file's name, size, header hash and content hash. */
static spindle_status add_weight_file(XXH3_state_t *fp, const char *path,
                                      const char *name, bool gguf,
                                      spindle_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0) close(fd);
        return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot open for the fingerprint", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    XXH128_hash_t header, content;
    char header_hex[33], content_hex[33];
    spindle_status st = hash_prefix(fd, header_bytes(fd, size, gguf), path,
                                    &header, err);
    if (!st) {
        hex128(header, header_hex);
        if (!cache_lookup(path, &sb, header_hex, content_hex)) {
            st = hash_prefix(fd, size, path, &content, err);
            if (!st) {
                hex128(content, content_hex);
                cache_store(path, &sb, header_hex, content_hex);
            }
        }
    }
    close(fd);
    if (st) return st;
    XXH3_128bits_update(fp, name, strlen(name) + 1);
    XXH3_128bits_update(fp, &size, sizeof size);
    XXH3_128bits_update(fp, header_hex, 32);
    XXH3_128bits_update(fp, content_hex, 32);
    return SPINDLE_OK;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.safetensors names of dir, sorted; NULL with *n = 0 when none. */
static char **weight_names(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    int cap = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (!ends_with(de->d_name, ".safetensors")) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            if (!grown) break;
            names = grown;
        }
        if (!(names[*n] = strdup(de->d_name))) break;
        (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(names, (size_t)*n, sizeof *names, compare_names);
    return names;
}

static spindle_status add_directory(XXH3_state_t *fp, const char *dir,
                                    spindle_error *err) {
    char *config = sp_path_join(dir, "config.json");
    char *text = NULL;
    size_t len = 0;
    spindle_status st = config ? sp_read_text_file(config, &text, &len, err)
                               : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    free(config);
    if (st) return st;
    XXH128_hash_t h = XXH3_128bits(text, len);
    free(text);
    XXH3_128bits_update(fp, "config.json", 12);
    XXH3_128bits_update(fp, &h, sizeof h);
    int n = 0;
    char **names = weight_names(dir, &n);
    if (n == 0) st = sp_fail(err, SPINDLE_ERR_IO, "%s: no .safetensors files", dir);
    for (int i = 0; i < n; i++) {
        char *path = sp_path_join(dir, names[i]);
        if (!st) st = path ? add_weight_file(fp, path, names[i], false, err)
                           : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        free(path);
        free(names[i]);
    }
    free(names);
    return st;
}

spindle_status sp_fingerprint_path(const char *path,
                                   char out[SP_FINGERPRINT_HEX + 1],
                                   spindle_error *err) {
    out[0] = '\0';
    XXH3_state_t *fp = XXH3_createState();
    if (!fp) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    XXH3_128bits_reset(fp);
    XXH3_128bits_update(fp, "spindle-fingerprint-v1", 23);
    spindle_status st;
    if (sp_dir_exists(path)) {
        st = add_directory(fp, path, err);
    } else {
        /* A fixed name: renaming the one file keeps its identity. */
        st = add_weight_file(fp, path, "model.gguf", true, err);
    }
    if (!st) hex128(XXH3_128bits_digest(fp), out);
    XXH3_freeState(fp);
    return st;
}
