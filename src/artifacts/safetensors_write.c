/* Safetensors writer (see safetensors_write.h). The data area has no gaps
 * (the format forbids holes), and the header is padded with spaces to a
 * multiple of 8 bytes so that the data area starts 8-byte aligned. */
#include "artifacts/safetensors_write.h"
#include "base/error.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct sp_st_writer {
    char *path, *tmp;
    FILE *f;
    cJSON *header, *meta;
    uint64_t total;     /* bytes declared */
    uint64_t written;   /* bytes of data written */
    bool begun;
};

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
}

/* A temporary file in the destination's directory (so rename is atomic). */
static spindle_status open_temp(const char *path, char **tmp, FILE **f,
                                spindle_error *err) {
    size_t n = strlen(path);
    *tmp = malloc(n + 16);
    if (!*tmp) return oom(err);
    memcpy(*tmp, path, n);
    memcpy(*tmp + n, ".tmp-XXXXXX", 12);
    int fd = mkstemp(*tmp);
    if (fd < 0) {
        spindle_status st = sp_fail(err, SPINDLE_ERR_IO, "%s: cannot create "
                                    "temporary file: %s", path, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return st;
    }
    /* mkstemp creates 0600; model files are meant to be shared. */
    (void)fchmod(fd, 0644);
    *f = fdopen(fd, "wb");
    if (!*f) {
        close(fd);
        unlink(*tmp);
        free(*tmp);
        *tmp = NULL;
        return oom(err);
    }
    return SPINDLE_OK;
}

/* Flush, sync and close `f`, then rename tmp over path. */
static spindle_status commit(FILE *f, const char *tmp, const char *path,
                             spindle_error *err) {
    int bad = fflush(f) != 0 || ferror(f);
    int e = errno;
    if (!bad && fsync(fileno(f)) != 0) bad = 1, e = errno;
    if (fclose(f) != 0 && !bad) bad = 1, e = errno;
    if (!bad && rename(tmp, path) != 0) bad = 1, e = errno;
    if (bad) {
        unlink(tmp);
        return sp_fail(err, SPINDLE_ERR_IO, "%s: write failed: %s", path,
                       strerror(e));
    }
    return SPINDLE_OK;
}

spindle_status sp_write_file_atomic(const char *path, const void *data,
                                    size_t n, spindle_error *err) {
    char *tmp;
    FILE *f;
    spindle_status st = open_temp(path, &tmp, &f, err);
    if (st) return st;
    if (n && fwrite(data, 1, n, f) != n) {
        fclose(f);
        unlink(tmp);
        free(tmp);
        return sp_fail(err, SPINDLE_ERR_IO, "%s: write failed: %s", path,
                       strerror(errno));
    }
    st = commit(f, tmp, path, err);
    free(tmp);
    return st;
}

spindle_status sp_st_writer_new(const char *path, sp_st_writer **out,
                                spindle_error *err) {
    *out = NULL;
    sp_st_writer *w = calloc(1, sizeof *w);
    if (!w) return oom(err);
    w->path = strdup(path);
    w->header = cJSON_CreateObject();
    w->meta = cJSON_CreateObject();
    if (!w->path || !w->header || !w->meta ||
        !cJSON_AddItemToObject(w->header, "__metadata__", w->meta)) {
        if (w->meta && !cJSON_GetObjectItem(w->header, "__metadata__"))
            cJSON_Delete(w->meta);
        cJSON_Delete(w->header);
        free(w->path);
        free(w);
        return oom(err);
    }
    *out = w;
    return SPINDLE_OK;
}

spindle_status sp_st_writer_meta(sp_st_writer *w, const char *key,
                                 const char *value, spindle_error *err) {
    if (w->begun)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s: metadata added after the header", w->path);
    if (!cJSON_AddStringToObject(w->meta, key, value)) return oom(err);
    return SPINDLE_OK;
}

spindle_status sp_st_writer_add(sp_st_writer *w, const char *name,
                                sp_dtype dtype, int ndim,
                                const int64_t *shape, spindle_error *err) {
    if (w->begun)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s: tensor '%s' declared after the header", w->path,
                       name);
    if (!strcmp(name, "__metadata__") ||
        cJSON_GetObjectItemCaseSensitive(w->header, name))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s: duplicate tensor name '%s'", w->path, name);
    if (ndim < 0 || ndim > 8 || dtype >= SP_DTYPE_COUNT)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s: tensor '%s' has an invalid dtype or rank",
                       w->path, name);
    uint64_t bytes = sp_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] && bytes > UINT64_MAX / 2 / (uint64_t)shape[d]))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "%s: tensor '%s' has an invalid shape", w->path,
                           name);
        bytes *= (uint64_t)shape[d];
    }
    if (bytes > UINT64_MAX / 2 - w->total)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "%s: file too large",
                       w->path);
    cJSON *t = cJSON_CreateObject(), *sh = cJSON_CreateArray(),
          *off = cJSON_CreateArray();
    bool ok = t && sh && off &&
              cJSON_AddStringToObject(t, "dtype", sp_dtype_name(dtype));
    for (int d = 0; ok && d < ndim; d++)
        ok = cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
    ok = ok && cJSON_AddItemToObject(t, "shape", sh);
    if (!ok) cJSON_Delete(sh);
    sh = NULL;
    /* cJSON numbers are doubles: exact up to 2^53 bytes, ample here. */
    ok = ok && cJSON_AddItemToArray(off, cJSON_CreateNumber((double)w->total)) &&
         cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(w->total + bytes)));
    ok = ok && cJSON_AddItemToObject(t, "data_offsets", off);
    if (!ok) {
        if (off && !cJSON_GetObjectItem(t, "data_offsets")) cJSON_Delete(off);
        cJSON_Delete(t);
        return oom(err);
    }
    if (!cJSON_AddItemToObject(w->header, name, t)) {
        cJSON_Delete(t);
        return oom(err);
    }
    w->total += bytes;
    return SPINDLE_OK;
}

spindle_status sp_st_writer_begin(sp_st_writer *w, spindle_error *err) {
    if (w->begun)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "%s: header written twice",
                       w->path);
    if (!cJSON_GetArraySize(w->meta))
        cJSON_DeleteItemFromObject(w->header, "__metadata__");
    char *json = cJSON_PrintUnformatted(w->header);
    if (!json) return oom(err);
    size_t len = strlen(json), padded = (len + 7) & ~(size_t)7;
    spindle_status st = open_temp(w->path, &w->tmp, &w->f, err);
    if (st) {
        free(json);
        return st;
    }
    w->begun = true;
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    unsigned char hl[8];
    for (int i = 0; i < 8; i++) hl[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(hl, 1, 8, w->f) == 8 && fwrite(json, 1, len, w->f) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', w->f) != EOF;
    free(json);
    if (!ok)
        return sp_fail(err, SPINDLE_ERR_IO, "%s: write failed: %s", w->path,
                       strerror(errno));
    return SPINDLE_OK;
}

spindle_status sp_st_writer_write(sp_st_writer *w, const void *data, size_t n,
                                  spindle_error *err) {
    if (!w->begun || n > w->total - w->written)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s: more tensor data than declared", w->path);
    if (n && fwrite(data, 1, n, w->f) != n)
        return sp_fail(err, SPINDLE_ERR_IO, "%s: write failed: %s", w->path,
                       strerror(errno));
    w->written += n;
    return SPINDLE_OK;
}

static void writer_free(sp_st_writer *w) {
    cJSON_Delete(w->header);
    free(w->path);
    free(w->tmp);
    free(w);
}

void sp_st_writer_abort(sp_st_writer *w) {
    if (!w) return;
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp);
    }
    writer_free(w);
}

spindle_status sp_st_writer_finish(sp_st_writer *w, spindle_error *err) {
    spindle_status st;
    if (!w->begun && (st = sp_st_writer_begin(w, err))) {
        sp_st_writer_abort(w);
        return st;
    }
    if (w->written != w->total) {
        st = sp_fail(err, SPINDLE_ERR_ARGUMENT,
                     "%s: %llu of %llu tensor bytes written", w->path,
                     (unsigned long long)w->written,
                     (unsigned long long)w->total);
        sp_st_writer_abort(w);
        return st;
    }
    st = commit(w->f, w->tmp, w->path, err);
    w->f = NULL;
    writer_free(w);
    return st;
}
