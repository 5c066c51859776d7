/* A file's bytes (mapped_file.h): a mapping of the file, or a copy into
 * private memory backed by 2 MiB transparent huge pages; and whole-file
 * reads. */
#include "base/mapped_file.h"
#include "base/error.h"
#include "base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local sp_map_mode tls_map_mode = SP_MAP_FILE;

/* Under AddressSanitizer the bytes between the end of the file and the end
 * of its mapping (zeros the kernel pads the last page with, or the rest of
 * the copy's huge pages) are poisoned, so a parser reading past the file is
 * reported instead of silently seeing zeros. Unpoisoned before unmapping:
 * the address range may be reused. */
#if defined(__SANITIZE_ADDRESS__)
#define SP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SP_ASAN 1
#endif
#endif
#ifdef SP_ASAN
#include <sanitizer/asan_interface.h>
#define SP_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define SP_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SP_POISON(p, n) ((void)(p), (void)(n))
#define SP_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static size_t sp_page_round(size_t n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

sp_map_mode sp_map_mode_set(sp_map_mode mode) {
    const sp_map_mode old = tls_map_mode;
    tls_map_mode = mode;
    return old;
}

#define SP_HUGE_PAGE ((size_t)2 << 20)

/* Anonymous memory for `size` bytes starting on a 2 MiB boundary (so the
 * kernel can back all of it with huge pages); *len is what to munmap. */
static void *sp_alloc_huge(size_t size, size_t *len) {
    const size_t want = (size + SP_HUGE_PAGE - 1) / SP_HUGE_PAGE * SP_HUGE_PAGE;
    const size_t span = want + SP_HUGE_PAGE;
    unsigned char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    const uintptr_t start = ((uintptr_t)raw + SP_HUGE_PAGE - 1) &
                            ~(uintptr_t)(SP_HUGE_PAGE - 1);
    unsigned char *p = (unsigned char *)start;
    if (p > raw) munmap(raw, (size_t)(p - raw));
    const size_t tail = (size_t)(raw + span - (p + want));
    if (tail) munmap(p + want, tail);
#ifdef MADV_HUGEPAGE
    madvise(p, want, MADV_HUGEPAGE); /* advisory: fine if refused */
#endif
    *len = want;
    return p;
}

/* Bytes the kernel reports as available (MemAvailable), 0 if unknown. */
static size_t sp_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (size_t)kib * 1024u;
}

/* The SP_MAP_MEMORY path: read the whole file, then make it read-only. */
static spindle_status sp_copy_file(int fd, const char *path, size_t align_at,
                                   sp_mapped_file *out, spindle_error *err) {
    size_t len = 0;
    /* Shift the copy so that file offset align_at starts a cache line. */
    const size_t pad = (64 - align_at % 64) % 64;
    unsigned char *base = sp_alloc_huge(out->size + pad, &len);
    unsigned char *p = base ? base + pad : NULL;
    if (!p)
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "%s: cannot allocate %zu bytes for the weights", path,
                       out->size);
    size_t got = 0;
    while (got < out->size) {
        const ssize_t r = pread(fd, p + got, out->size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            const int e = r < 0 ? errno : 0;
            munmap(base, len);
            return sp_fail(err, SPINDLE_ERR_IO, "%s: read failed at byte %zu: %s",
                           path, got, e ? strerror(e) : "unexpected end of file");
        }
        got += (size_t)r;
    }
    mprotect(base, len, PROT_READ); /* weights are never written */
    SP_POISON(p + out->size, len - pad - out->size);
    out->data = p;
    out->copy_base = base;
    out->copy_len = len;
    return SPINDLE_OK;
}

spindle_status sp_map_file(const char *path, sp_mapped_file *out,
                           spindle_error *err) {
    return sp_map_file_at(path, 0, out, err);
}

spindle_status sp_map_file_at(const char *path, size_t align_at,
                              sp_mapped_file *out, spindle_error *err) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot open: %s", path,
                       strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sp_fail(err, SPINDLE_ERR_IO, "%s: not a regular file", path);
    }
    out->path = strdup(path);
    if (!out->path) {
        close(fd);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "%s: out of memory", path);
    }
    out->size = (size_t)st.st_size;
    /* A copy only where it fits comfortably: a model near the size of
     * memory is better paged from the file than pushed out by the OOM
     * killer. */
    const size_t avail = tls_map_mode == SP_MAP_MEMORY ? sp_mem_available() : 0;
    if (out->size > 0 && tls_map_mode == SP_MAP_MEMORY && out->size < avail / 2) {
        const spindle_status cs = sp_copy_file(fd, path, align_at, out, err);
        close(fd);
        if (cs != SPINDLE_OK) {
            free(out->path);
            out->path = NULL;
            out->size = 0;
        }
        return cs;
    }
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            free(out->path);
            out->path = NULL;
            return sp_fail(err, SPINDLE_ERR_IO, "%s: mmap failed: %s", path,
                           strerror(errno));
        }
        out->data = p;
        SP_POISON(out->data + out->size, sp_page_round(out->size) - out->size);
    }
    close(fd);
    return SPINDLE_OK;
}

void sp_unmap_file(sp_mapped_file *file) {
    if (!file) return;
    if (file->data) {
        void *base = file->copy_len ? file->copy_base : (void *)file->data;
        const size_t len = file->copy_len ? file->copy_len : sp_page_round(file->size);
        SP_UNPOISON(base, len);
        munmap(base, len);
    }
    free(file->path);
    memset(file, 0, sizeof *file);
}

spindle_status sp_read_text_file(const char *path, char **out, size_t *len,
                                 spindle_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot open: %s", path,
                       strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n + 1 < cap) break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) { free(buf); buf = NULL; break; }
        buf = bigger;
        cap *= 2;
    }
    bool failed = ferror(f);
    fclose(f);
    if (!buf) return sp_fail(err, SPINDLE_ERR_MEMORY, "%s: out of memory", path);
    if (failed) {
        free(buf);
        return sp_fail(err, SPINDLE_ERR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    /* Every text file Spindle reads (JSON, templates) must be UTF-8, as the
     * reference loaders require (Rust read_to_string, Python's json). */
    size_t bad = sp_utf8_invalid_at(buf, n);
    if (bad < n) {
        free(buf);
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: not valid UTF-8 (byte %zu)", path, bad);
    }
    *out = buf;
    if (len) *len = n;
    return SPINDLE_OK;
}

bool sp_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool sp_dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *sp_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    while (a > 1 && dir[a - 1] == '/') a--;
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}
