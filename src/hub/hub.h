/* Models from the Hugging Face Hub: `ORG/NAME[:QUANT]` references, which
 * files of a repository to fetch (llama.cpp's `-hf` rule for GGUF
 * repositories, everything for safetensors / MLX ones), and the download
 * into the Hugging Face cache layout
 *   $HF_HUB_CACHE/models--ORG--NAME/{blobs/<etag>, snapshots/<commit>/FILE,
 *                                    refs/main}
 * that huggingface_hub reads and writes. Nothing here prints: progress goes
 * to a callback. The functions are reentrant; one pull's cache directory
 * should not be written by two pulls at once. */
#ifndef SP_HUB_HUB_H
#define SP_HUB_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

/* "ORG/NAME" or "ORG/NAME:QUANT" (an optional "hf://" in front) into its
 * repository and quant tag (NULL when none). Both are malloc'd. A name
 * outside Hugging Face's character set, a missing or doubled '/', or a quant
 * tag that is not letters, digits and '_' is refused with a one-line error. */
spindle_status sp_hub_parse_ref(const char *text, char **repo, char **quant,
                                spindle_error *err);

/* The files of a repository to fetch. GGUF repositories (any model .gguf):
 * the file whose name carries the quant tag (default Q4_K_M, then Q8_0,
 * then the first model file), case-insensitively and followed by '.' or
 * '-', with all the parts of a split file (NAME-00001-of-00003.gguf) and
 * the closest-quant mmproj file beside it. Other repositories: every file.
 * `primary` is the index in `picked` of the file a model path names, or
 * -1 for a whole repository (the snapshot directory is the model). */
typedef struct sp_hub_selection {
    char **picked;
    size_t count;
    long primary;
} sp_hub_selection;

spindle_status sp_hub_select(const char *const *files, size_t n,
                             const char *quant, sp_hub_selection *out,
                             spindle_error *err);
void sp_hub_selection_free(sp_hub_selection *s);

/* The body of GET /api/models/{repo}/revision/{rev}: its commit ("sha")
 * and its files ("siblings"[].rfilename), each checked as a relative path
 * without "..". Every output is malloc'd. */
spindle_status sp_hub_parse_repo_info(const char *json, size_t len,
                                      char **commit, char ***files,
                                      size_t *count, spindle_error *err);
void sp_hub_free_list(char **list, size_t count);

/* An ETag header's value as huggingface_hub stores it: W/ and the quotes
 * stripped. NULL when the value is empty or could not name a file. */
char *sp_hub_normalize_etag(const char *value);

/* A relative file name of a repository that is safe to place under a
 * snapshot: no leading '/', no "." or ".." component, no backslash. */
bool sp_hub_safe_relative_path(const char *name);

/* Bytes of `file` received so far and the expected total (0: unknown). */
typedef void (*sp_hub_progress_fn)(const char *file, uint64_t done,
                                   uint64_t total, void *user);

typedef struct sp_hub_options {
    const char *endpoint;   /* NULL: $HF_ENDPOINT or https://huggingface.co */
    const char *token;      /* NULL: $HF_TOKEN; sent as a bearer token */
    const char *cache_dir;  /* NULL: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub */
    bool offline;           /* only the cache (also when HF_HUB_OFFLINE=1) */
    sp_hub_progress_fn progress;
    void *progress_user;
} sp_hub_options;

/* Fetch `ref` (sp_hub_parse_ref's form) into the cache, or find it there
 * when offline, and return the model's local path: the snapshot directory,
 * or the primary .gguf file inside it. Partial downloads are kept as
 * blobs/<etag>.incomplete and resumed with a Range request; a finished
 * file whose SHA-256 (or git blob hash) or size differs from the Hub's
 * ETag / X-Linked-Size is deleted and refused. */
spindle_status sp_hub_pull(const char *ref, const sp_hub_options *opts,
                           char **local_path, spindle_error *err);

#endif
