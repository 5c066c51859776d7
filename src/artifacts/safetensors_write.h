/* Writing a safetensors file: the tensors are declared first (the header
 * holds every offset), then their bytes are streamed in declaration order,
 * so a tensor never has to be materialized whole.
 *
 * Output goes to a temporary file next to the destination and is renamed
 * over it only after everything was written and synced: a failure part-way
 * leaves any previous file intact and no partial file behind. */
#ifndef SP_ARTIFACTS_SAFETENSORS_WRITE_H
#define SP_ARTIFACTS_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include "spindle.h"
#include "compute/tensor.h"

typedef struct sp_st_writer sp_st_writer;

spindle_status sp_st_writer_new(const char *path, sp_st_writer **out,
                                spindle_error *err);
/* Declare the next tensor (before sp_st_writer_begin). Names are unique. */
spindle_status sp_st_writer_add(sp_st_writer *w, const char *name,
                                sp_dtype dtype, int ndim,
                                const int64_t *shape, spindle_error *err);
/* A "__metadata__" string entry (before sp_st_writer_begin). */
spindle_status sp_st_writer_meta(sp_st_writer *w, const char *key,
                                 const char *value, spindle_error *err);
/* Write the header; data follows through sp_st_writer_write. */
spindle_status sp_st_writer_begin(sp_st_writer *w, spindle_error *err);
/* Append bytes of the declared tensors, in order; a call may span tensors
 * but never go past the last one. */
spindle_status sp_st_writer_write(sp_st_writer *w, const void *data, size_t n,
                                  spindle_error *err);
/* Check every declared byte was written, sync, rename into place, free. */
spindle_status sp_st_writer_finish(sp_st_writer *w, spindle_error *err);
/* Remove the temporary file and free (NULL is fine; after finish, no-op
 * is not needed: finish frees). */
void sp_st_writer_abort(sp_st_writer *w);

/* Write a small file atomically (temporary file, fsync, rename). */
spindle_status sp_write_file_atomic(const char *path, const void *data,
                                    size_t n, spindle_error *err);

#endif
