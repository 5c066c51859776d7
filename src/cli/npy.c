/* .npy writer (npy.h). */
#include "cli/npy.h"

#include <stdio.h>

bool sp_write_npy(const char *path, const float *x, int rows, int cols) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    char shape[48], header[128];
    if (rows > 0) snprintf(shape, sizeof shape, "(%d, %d)", rows, cols);
    else snprintf(shape, sizeof shape, "(%d,)", cols);
    int len = snprintf(header, sizeof header,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }",
                       shape);
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned short hl = (unsigned short)(len + pad + 1);
    unsigned char hl_le[2] = {(unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    fwrite(hl_le, 1, 2, f);
    fwrite(header, 1, (size_t)len, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    /* x86-64 and arm64 are little-endian */
    fwrite(x, sizeof(float), (size_t)(rows > 0 ? rows : 1) * (size_t)cols, f);
    return fclose(f) == 0;
}
