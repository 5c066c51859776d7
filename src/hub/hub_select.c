/* The Hub's names and answers, without the network: references, the choice
 * of files (llama.cpp's `-hf` rule), the repository-info JSON and ETags. */
#include "hub/hub.h"

#include "base/error.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static bool repo_char(char c) {
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

/* One half of ORG/NAME as the Hub allows it: 1-96 of [A-Za-z0-9._-], not
 * starting or ending with '-' or '.', no "--" or ".." (the cache folder
 * joins ORG and NAME with "--"). */
static bool repo_part_ok(const char *s, size_t n) {
    if (n == 0 || n > 96) return false;
    if (s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!repo_char(s[i])) return false;
        if (i && (s[i] == '-' || s[i] == '.') && s[i - 1] == s[i]) return false;
    }
    return true;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

spindle_status sp_hub_parse_ref(const char *text, char **repo, char **quant,
                                spindle_error *err) {
    *repo = *quant = NULL;
    if (!text) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "no Hub repository given");
    if (!strncmp(text, "hf://", 5)) text += 5;
    const char *colon = strchr(text, ':');
    size_t repo_len = colon ? (size_t)(colon - text) : strlen(text);
    const char *slash = memchr(text, '/', repo_len);
    if (!slash || !repo_part_ok(text, (size_t)(slash - text)) ||
        !repo_part_ok(slash + 1, repo_len - (size_t)(slash + 1 - text)))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "'%.200s': not a Hub repository (expected ORG/NAME[:QUANT], "
                       "letters, digits, '-', '_' and '.')", text);
    if (colon) {
        const char *q = colon + 1;
        size_t qn = strlen(q);
        bool ok = qn > 0 && qn <= 64;
        for (size_t i = 0; ok && i < qn; i++)
            ok = isalnum((unsigned char)q[i]) || q[i] == '_' || q[i] == '-';
        if (!ok)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "'%.200s': malformed quant tag (expected letters, digits, "
                           "'_' or '-' after ':', for example Q4_K_M)", text);
        *quant = strdup(q);
    }
    *repo = dup_n(text, repo_len);
    if (!*repo || (colon && !*quant)) {
        free(*repo);
        free(*quant);
        *repo = *quant = NULL;
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    return SPINDLE_OK;
}

bool sp_hub_safe_relative_path(const char *name) {
    if (!name || !*name || *name == '/' || strchr(name, '\\')) return false;
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
        if (*p == '/') p++;
        else break;
    }
    return name[strlen(name) - 1] != '/';
}

/* ---- llama.cpp's choice of GGUF files ---------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* A .gguf that is a model, not a projector, imatrix or draft head. */
static bool gguf_is_model(const char *path) {
    if (!ends_with(path, ".gguf")) return false;
    const char *b = base_name(path);
    static const char *const sidecars[] = {"mmproj", "imatrix", "mtp-",
                                           "eagle3-", "dflash-", "dspark-"};
    for (size_t i = 0; i < sizeof sidecars / sizeof *sidecars; i++)
        if (strstr(b, sidecars[i])) return false;
    return true;
}

/* NAME-00002-of-00005.gguf: the shared prefix (up to "-00002"), index,
 * count; a file that is not split is part 1 of 1 with the whole stem, and
 * a name that is not a .gguf is part 0 of 0. */
typedef struct split_info {
    size_t prefix_len;
    int index, count;
} split_info;

static split_info gguf_split(const char *path) {
    if (!ends_with(path, ".gguf")) return (split_info){0, 0, 0}; /* no part of anything */
    size_t n = strlen(path) - 5; /* without ".gguf" */
    split_info s = {n, 1, 1};
    /* "-DDDDD-of-DDDDD" is 15 characters */
    if (n > 15 && path[n - 15] == '-' && !strncasecmp(path + n - 9, "-of-", 4)) {
        bool digits = true;
        for (size_t i = 0; i < 5; i++)
            digits = digits && isdigit((unsigned char)path[n - 14 + i]) &&
                     isdigit((unsigned char)path[n - 5 + i]);
        if (digits) {
            s.prefix_len = n - 15;
            s.index = atoi(path + n - 14);
            s.count = atoi(path + n - 5);
        }
    }
    return s;
}

/* The bits of the quant tag ending a GGUF name: Q4_K_M -> 4, F16 -> 16. */
static int quant_bits_of_tag(const char *tag, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (isdigit((unsigned char)tag[i])) return atoi(tag + i);
    return 0;
}

static int gguf_quant_bits(const char *path) {
    split_info s = gguf_split(path);
    size_t end = s.prefix_len, start = end;
    while (start > 0 && (isalnum((unsigned char)path[start - 1]) || path[start - 1] == '_'))
        start--;
    if (start == 0 || start == end || (path[start - 1] != '-' && path[start - 1] != '.'))
        return 0;
    return quant_bits_of_tag(path + start, end - start);
}

/* `tag` followed by '.' or '-' anywhere in `path`, ignoring case. */
static bool has_tag(const char *path, const char *tag) {
    size_t n = strlen(tag);
    for (const char *p = path; *p; p++)
        if (!strncasecmp(p, tag, n) && (p[n] == '.' || p[n] == '-')) return true;
    return false;
}

static long find_model(const char *const *files, size_t n, const char *tag) {
    for (size_t i = 0; i < n; i++)
        if (gguf_is_model(files[i]) && (!tag || has_tag(files[i], tag)) &&
            gguf_split(files[i]).index == 1)
            return (long)i;
    return -1;
}

/* The mmproj beside the model (its folder or one above), the deepest such
 * folder first, then the quantization closest to the model's. */
static long find_mmproj(const char *const *files, size_t n, const char *model) {
    size_t model_dir = (size_t)(base_name(model) - model);
    int model_bits = gguf_quant_bits(model);
    long best = -1;
    size_t best_depth = 0;
    int best_diff = 0;
    for (size_t i = 0; i < n; i++) {
        const char *f = files[i];
        if (!ends_with(f, ".gguf") || !strstr(f, "mmproj")) continue;
        size_t dir = (size_t)(base_name(f) - f);
        if (dir > model_dir || strncmp(f, model, dir)) continue;
        int diff = abs(gguf_quant_bits(f) - model_bits);
        if (best < 0 || dir > best_depth || (dir == best_depth && diff < best_diff)) {
            best = (long)i;
            best_depth = dir;
            best_diff = diff;
        }
    }
    return best;
}

static bool add_pick(sp_hub_selection *s, const char *name) {
    char **grown = realloc(s->picked, (s->count + 1) * sizeof *grown);
    if (!grown) return false;
    s->picked = grown;
    return (s->picked[s->count] = strdup(name)) ? (s->count++, true) : false;
}

static bool pick_gguf(const char *const *files, size_t n, long model,
                      sp_hub_selection *out) {
    split_info ms = gguf_split(files[model]);
    out->primary = 0;
    if (!add_pick(out, files[model])) return false;
    for (size_t i = 0; ms.count > 1 && i < n; i++) {
        split_info s = gguf_split(files[i]);
        if ((long)i != model && s.count == ms.count && s.prefix_len == ms.prefix_len &&
            !strncmp(files[i], files[model], ms.prefix_len) && !add_pick(out, files[i]))
            return false;
    }
    long mmproj = find_mmproj(files, n, files[model]);
    return mmproj < 0 || add_pick(out, files[mmproj]);
}

spindle_status sp_hub_select(const char *const *files, size_t n,
                             const char *quant, sp_hub_selection *out,
                             spindle_error *err) {
    *out = (sp_hub_selection){NULL, 0, -1};
    bool gguf = false;
    for (size_t i = 0; i < n && !gguf; i++) gguf = gguf_is_model(files[i]);
    bool ok = true;
    if (gguf) {
        long model = -1;
        if (quant) model = find_model(files, n, quant);
        else {
            model = find_model(files, n, "Q4_K_M");
            if (model < 0) model = find_model(files, n, "Q8_0");
            if (model < 0) model = find_model(files, n, NULL);
        }
        if (model < 0)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "no GGUF file with quant tag '%.64s' in the repository",
                           quant ? quant : "");
        ok = pick_gguf(files, n, model, out);
    } else if (quant) {
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "quant tag '%.64s' given, but the repository has no GGUF files",
                       quant);
    } else {
        for (size_t i = 0; i < n && ok; i++) ok = add_pick(out, files[i]);
    }
    if (!ok) {
        sp_hub_selection_free(out);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    return SPINDLE_OK;
}

void sp_hub_free_list(char **list, size_t count) {
    for (size_t i = 0; list && i < count; i++) free(list[i]);
    free(list);
}

void sp_hub_selection_free(sp_hub_selection *s) {
    sp_hub_free_list(s->picked, s->count);
    *s = (sp_hub_selection){NULL, 0, -1};
}

/* ---- the Hub's answers ------------------------------------------------- */

/* A commit hash: hexadecimal, 7 to 64 characters (it names a folder). */
static bool commit_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 7 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

spindle_status sp_hub_parse_repo_info(const char *json, size_t len,
                                      char **commit, char ***files,
                                      size_t *count, spindle_error *err) {
    *commit = NULL;
    *files = NULL;
    *count = 0;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return sp_fail(err, SPINDLE_ERR_FORMAT, "Hub repository info: not JSON");
    spindle_status st = SPINDLE_OK;
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(root, "sha");
    const cJSON *siblings = cJSON_GetObjectItemCaseSensitive(root, "siblings");
    if (!cJSON_IsString(sha) || !commit_ok(sha->valuestring)) {
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "Hub repository info: no commit hash (\"sha\")");
    } else if (!cJSON_IsArray(siblings)) {
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "Hub repository info: no file list (\"siblings\")");
    } else {
        int n = cJSON_GetArraySize(siblings);
        *files = calloc((size_t)n + 1, sizeof **files);
        *commit = strdup(sha->valuestring);
        if (!*files || !*commit) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        const cJSON *item;
        cJSON_ArrayForEach(item, siblings) {
            if (st != SPINDLE_OK) break;
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "rfilename");
            if (!cJSON_IsString(name) || !sp_hub_safe_relative_path(name->valuestring))
                st = sp_fail(err, SPINDLE_ERR_FORMAT,
                             "Hub repository info: a file name that is not a safe "
                             "relative path");
            else if (!((*files)[*count] = strdup(name->valuestring)))
                st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
            else (*count)++;
        }
    }
    cJSON_Delete(root);
    if (st != SPINDLE_OK) {
        sp_hub_free_list(*files, *count);
        free(*commit);
        *commit = NULL;
        *files = NULL;
        *count = 0;
    }
    return st;
}

char *sp_hub_normalize_etag(const char *value) {
    if (!value) return NULL;
    while (*value == ' ' || *value == '\t') value++;
    if (!strncmp(value, "W/", 2)) value += 2;
    size_t n = strcspn(value, "\r\n");
    while (n && (value[n - 1] == ' ' || value[n - 1] == '\t')) n--;
    if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
        value++;
        n -= 2;
    }
    if (n == 0 || n > 128) return NULL;
    /* the ETag names a blob file: letters, digits, '-' and '_' only */
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)value[i]) && value[i] != '-' && value[i] != '_')
            return NULL;
    return dup_n(value, n);
}
