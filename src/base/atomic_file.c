/* Atomic whole-file writes (atomic_file.h). */
#include "base/atomic_file.h"
#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool write_all(int fd, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void pause_for(const char *env) {
    const char *v = env ? getenv(env) : NULL;
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* fsync the directory holding path, so the rename itself is durable. */
static void sync_parent(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

spindle_status sp_atomic_write(const char *path, const void *const *parts,
                               const size_t *sizes, int n,
                               const char *pause_env, spindle_error *err) {
    size_t len = strlen(path);
    char *tmp = malloc(len + 12);
    if (!tmp) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp-XXXXXX", 12);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot create: %s", path,
                       strerror(e));
    }
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = write_all(fd, parts[i], sizes[i]);
    int e = errno;
    if (ok && fsync(fd) != 0) ok = false, e = errno;
    if (close(fd) != 0 && ok) ok = false, e = errno;
    if (ok) pause_for(pause_env);
    if (ok && rename(tmp, path) != 0) ok = false, e = errno;
    if (!ok) {
        unlink(tmp);
        free(tmp);
        return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot write: %s", path,
                       strerror(e));
    }
    free(tmp);
    sync_parent(path);
    return SPINDLE_OK;
}

bool sp_make_dirs(const char *dir) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return false;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0777);
        *p = '/';
    }
    mkdir(buf, 0777);
    struct stat sb;
    return stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode);
}
