/* The identity of a model's files: every persisted state (checkpoints,
 * saved slots, prompt caches) carries it and is refused under another.
 *
 * fingerprint = XXH3-128 over "spindle-fingerprint-v1", the hash of
 * config.json (directories) and, per weight file (*.safetensors of a
 * directory, sorted by name; or the one .gguf file): its name, size, the
 * hash of its header and the hash of its whole content. So a re-quantized,
 * converted or edited file gives another fingerprint, and the same files
 * give the same one across restarts and machines.
 *
 * The content hash reads the whole file once; it is then cached in
 * "<file>.xxh3" beside the file, or, where that directory is not
 * writable, in $SPINDLE_CACHE_DIR, else $XDG_CACHE_HOME/spindle/content-
 * hashes, else ~/.cache/spindle/content-hashes (named by a hash of the
 * file's absolute path). A cache entry counts only while the file's size,
 * mtime and header hash are those it was taken with. */
#ifndef SP_ARTIFACTS_FINGERPRINT_H
#define SP_ARTIFACTS_FINGERPRINT_H

#include "spindle.h"

#define SP_FINGERPRINT_HEX 32

/* `path`: a model directory or a .gguf file. out: 32 lowercase hex digits
 * and a NUL. */
spindle_status sp_fingerprint_path(const char *path,
                                   char out[SP_FINGERPRINT_HEX + 1],
                                   spindle_error *err);

#endif
