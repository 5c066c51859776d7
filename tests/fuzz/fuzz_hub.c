/* The Hub client's parsers (src/hub/): a model reference, the repository
 * info JSON, an ETag header, and the choice of files from the listed names.
 *
 * Input: reference NUL repository-info JSON NUL ETag value.
 * Invariants: a parsed reference has one '/' and a quant tag of letters,
 * digits, '_' and '-'; every listed name is a safe relative path; the
 * selection's files come from the list and its primary is one of them; a
 * normalized ETag is non-empty without quotes or '/'. */
#include "fuzz_common.h"

#include "hub/hub.h"

static void check_selection(char **files, size_t n, const char *quant) {
    sp_hub_selection sel;
    spindle_error err = {0};
    if (sp_hub_select((const char *const *)files, n, quant, &sel, &err) != SPINDLE_OK) {
        FUZZ_CHECK(err.message[0], "a failed selection without a message");
        return;
    }
    FUZZ_CHECK(sel.primary < (long)sel.count, "primary %ld of %zu", sel.primary, sel.count);
    for (size_t i = 0; i < sel.count; i++) {
        bool listed = false;
        for (size_t k = 0; k < n && !listed; k++) listed = !strcmp(sel.picked[i], files[k]);
        FUZZ_CHECK(listed, "picked '%s' is not in the list", sel.picked[i]);
    }
    if (sel.primary >= 0)
        FUZZ_CHECK(strstr(sel.picked[sel.primary], ".gguf"), "primary '%s'",
                   sel.picked[sel.primary]);
    sp_hub_selection_free(&sel);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *parts[3];
    fuzz_split(data, size, parts, 3);
    spindle_error err = {0};
    char *repo = NULL, *quant = NULL;
    if (parts[0] && sp_hub_parse_ref(parts[0], &repo, &quant, &err) == SPINDLE_OK) {
        const char *slash = strchr(repo, '/');
        FUZZ_CHECK(slash && !strchr(slash + 1, '/'), "repo '%s'", repo);
        for (const char *q = quant; q && *q; q++)
            FUZZ_CHECK(*q == '_' || *q == '-' || (*q >= '0' && *q <= '9') ||
                           (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z'),
                       "quant '%s'", quant);
    }
    char *commit = NULL, **files = NULL;
    size_t count = 0;
    if (parts[1] && sp_hub_parse_repo_info(parts[1], strlen(parts[1]), &commit, &files,
                                           &count, &err) == SPINDLE_OK) {
        for (size_t i = 0; i < count; i++)
            FUZZ_CHECK(sp_hub_safe_relative_path(files[i]), "unsafe name '%s'", files[i]);
        check_selection(files, count, quant);
        check_selection(files, count, NULL);
    }
    char *etag = parts[2] ? sp_hub_normalize_etag(parts[2]) : NULL;
    if (etag) FUZZ_CHECK(*etag && !strpbrk(etag, "\"/ "), "etag '%s'", etag);
    free(etag);
    sp_hub_free_list(files, count);
    free(commit);
    free(repo);
    free(quant);
    for (int i = 0; i < 3; i++) free(parts[i]);
    return 0;
}
