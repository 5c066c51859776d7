/* Read-only memory mapping of a whole file. Weights stay in the page cache
 * and are shared between processes; nothing is copied. */
#ifndef SP_BASE_MAPPED_FILE_H
#define SP_BASE_MAPPED_FILE_H

#include <stddef.h>
#include "spindle.h"

typedef struct sp_mapped_file {
    char *path;          /* owned copy */
    const unsigned char *data;
    size_t size;
} sp_mapped_file;

/* Map `path`. An empty file maps to data == NULL, size == 0. */
spindle_status sp_map_file(const char *path, sp_mapped_file *out,
                           spindle_error *err);
void sp_unmap_file(sp_mapped_file *file);

/* Read a whole (small) text file into a NUL-terminated heap buffer. */
spindle_status sp_read_text_file(const char *path, char **out, size_t *len,
                                 spindle_error *err);

bool sp_file_exists(const char *path);
bool sp_dir_exists(const char *path);
/* malloc'd "a/b" (no doubled slash). NULL on allocation failure. */
char *sp_path_join(const char *dir, const char *name);

#endif
