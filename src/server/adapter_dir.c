/* The folder that POST /v1/load_lora_adapter may load from (--lora-dir):
 * a lora_path names an adapter inside it, and nothing outside it is ever
 * opened. The path must be relative, without a ".." component, and
 * resolve (symbolic links followed) inside the folder, and so must every
 * symbolic link directly inside the adapter's own directory (the loader
 * opens the files there). Every refusal reads the same, whether the path
 * is missing, outside, or a link out, so the route cannot be used to learn
 * anything about the file system outside the folder. */
#include "server/state.h"
#include "base/log.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool sp_adapter_dir_open(sp_adapters *t, const char *dir) {
    if (!dir) return true;
    t->root = realpath(dir, NULL);
    struct stat st;
    if (!t->root || stat(t->root, &st) || !S_ISDIR(st.st_mode)) {
        sp_log(SPINDLE_LOG_ERROR, "--lora-dir %s: not a directory", dir);
        return false;
    }
    return true;
}

/* Whether `path` (resolved) is strictly inside `root` (resolved). */
static bool inside(const char *root, const char *path) {
    size_t n = strlen(root);
    if (n == 1) return path[0] == '/' && path[1];   /* root is "/" */
    return !strncmp(path, root, n) && path[n] == '/' && path[n + 1];
}

static bool has_dotdot(const char *rel) {
    for (const char *p = rel; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') return true;
        p += n + (p[n] == '/');
    }
    return false;
}

/* Every symbolic link directly in directory `dir` resolves inside root. */
static bool links_stay_inside(const char *root, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool ok = true;
    struct dirent *de;
    while (ok && (de = readdir(d))) {
        char entry[PATH_MAX], *real;
        struct stat st;
        int n = snprintf(entry, sizeof entry, "%s/%s", dir, de->d_name);
        if (n < 0 || n >= (int)sizeof entry || lstat(entry, &st)) continue;
        if (!S_ISLNK(st.st_mode)) continue;
        real = realpath(entry, NULL);
        ok = real && inside(root, real);
        free(real);
    }
    closedir(d);
    return ok;
}

char *sp_adapter_dir_resolve(const sp_adapters *t, const char *rel) {
    if (!t->root || !rel[0] || rel[0] == '/' || has_dotdot(rel)) return NULL;
    char joined[PATH_MAX];
    int n = snprintf(joined, sizeof joined, "%s/%s", t->root, rel);
    if (n < 0 || n >= (int)sizeof joined) return NULL;
    char *real = realpath(joined, NULL);
    struct stat st;
    if (!real || !inside(t->root, real) || stat(real, &st) ||
        (S_ISDIR(st.st_mode) && !links_stay_inside(t->root, real))) {
        free(real);
        return NULL;
    }
    return real;
}

void sp_adapter_dir_hide_root(const sp_adapters *t, char *message) {
    size_t n = t->root ? strlen(t->root) : 0;
    if (n <= 1) return;
    for (char *p = message; (p = strstr(p, t->root));) {
        size_t cut = n + (p[n] == '/');
        memmove(p, p + cut, strlen(p + cut) + 1);
    }
}
