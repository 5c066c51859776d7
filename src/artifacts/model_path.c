/* Model argument → directory: a path, or a repo id in the local HF cache. */
#include "artifacts/config.h"
#include "base/error.h"
#include "base/mapped_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sp_hub_cache_dir(void) {
    const char *v = getenv("HF_HUB_CACHE");
    if (v && *v) return strdup(v);
    v = getenv("HF_HOME");
    if (v && *v) return sp_path_join(v, "hub");
    v = getenv("HOME");
    if (!v || !*v) return NULL;
    return sp_path_join(v, ".cache/huggingface/hub");
}

/* A repo id is "org/name" (or "name"): no leading '/', '.', no "..". */
static bool looks_like_repo_id(const char *s) {
    if (!*s || *s == '/' || *s == '.' || strstr(s, "..")) return false;
    int slashes = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '/') slashes++;
        else if (!(*p == '-' || *p == '_' || *p == '.' ||
                   (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                   (*p >= 'A' && *p <= 'Z')))
            return false;
    }
    return slashes <= 1;
}

spindle_status sp_resolve_model_path(const char *arg, char **dir,
                                     spindle_error *err) {
    *dir = NULL;
    if (!arg || !*arg)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "no model given");
    if (sp_dir_exists(arg)) {
        *dir = strdup(arg);
        return *dir ? SPINDLE_OK : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    if (!looks_like_repo_id(arg))
        return sp_fail(err, SPINDLE_ERR_IO, "%s: no such model directory", arg);

    char *hub = sp_hub_cache_dir();
    if (!hub) return sp_fail(err, SPINDLE_ERR_IO,
                             "%s: not a directory, and no HF cache location "
                             "(set HF_HUB_CACHE or HF_HOME)", arg);
    /* models--org--name */
    size_t n = strlen(arg);
    char *folder = malloc(8 + 2 * n + 1);
    if (!folder) { free(hub); return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory"); }
    char *w = folder + sprintf(folder, "models--");
    for (const char *p = arg; *p; p++) {
        if (*p == '/') { *w++ = '-'; *w++ = '-'; }
        else *w++ = *p;
    }
    *w = '\0';
    char *repo = sp_path_join(hub, folder);
    char *refs = repo ? sp_path_join(repo, "refs/main") : NULL;
    free(folder);
    spindle_status st = SPINDLE_OK;
    char *commit = NULL;
    if (!refs) {
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    } else if (!sp_dir_exists(repo)) {
        st = sp_fail(err, SPINDLE_ERR_IO,
                     "%s: not a directory and not in the HF cache (%s)", arg,
                     hub);
    } else if ((st = sp_read_text_file(refs, &commit, NULL, err)) == SPINDLE_OK) {
        commit[strcspn(commit, " \r\n\t")] = '\0';
        if (!*commit || strchr(commit, '/') || strstr(commit, "..")) {
            st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: malformed commit hash",
                         refs);
        } else {
            char snap_rel[600];
            snprintf(snap_rel, sizeof snap_rel, "snapshots/%s", commit);
            char *snap = sp_path_join(repo, snap_rel);
            if (!snap) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
            else if (!sp_dir_exists(snap)) {
                st = sp_fail(err, SPINDLE_ERR_IO, "%s: snapshot missing", snap);
                free(snap);
            } else *dir = snap;
        }
    }
    free(commit);
    free(refs);
    free(repo);
    free(hub);
    return st;
}
