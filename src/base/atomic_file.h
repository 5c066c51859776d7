/* Files that are either wholly the old version or wholly the new one:
 * written to a temporary file in the same directory, fsynced, renamed over
 * the destination, and the directory fsynced. A crash at any point leaves
 * the previous file (and at worst a stray "<path>.tmp-XXXXXX"). */
#ifndef SP_BASE_ATOMIC_FILE_H
#define SP_BASE_ATOMIC_FILE_H

#include <stddef.h>
#include "spindle.h"

/* Write the n parts, in order, as `path`. `pause_env` (may be NULL) names
 * an environment variable that, when set to a number of milliseconds,
 * sleeps between the fsync and the rename: the tests' window for killing
 * a writer mid-write. */
spindle_status sp_atomic_write(const char *path, const void *const *parts,
                               const size_t *sizes, int n,
                               const char *pause_env, spindle_error *err);

/* mkdir -p; true when the directory exists afterwards. */
bool sp_make_dirs(const char *dir);

#endif
