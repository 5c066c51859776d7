/* .npy files of float32 rows, as numpy.save writes them (the logits that
 * `spindle run --dump-logits` writes for the tests). */
#ifndef SP_CLI_NPY_H
#define SP_CLI_NPY_H

#include <stdbool.h>

/* x: rows * cols floats; rows 0 writes a 1-D array of cols. */
bool sp_write_npy(const char *path, const float *x, int rows, int cols);

#endif
