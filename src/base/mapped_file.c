#include "base/mapped_file.h"
#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

spindle_status sp_map_file(const char *path, sp_mapped_file *out,
                           spindle_error *err) {
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
    }
    close(fd);
    return SPINDLE_OK;
}

void sp_unmap_file(sp_mapped_file *file) {
    if (!file) return;
    if (file->data) munmap((void *)file->data, file->size);
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
