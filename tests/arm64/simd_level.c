/* Prints the matmul kernel level chosen at start and the kernel table in
 * use ("portable" for none), so that scripts/test_arm64.sh can check how
 * SPINDLE_SIMD maps on AArch64. */
#include <stdio.h>

#include "compute/matmul/matmul_simd.h"

int main(void) {
    const sp_mm_kernels *k = sp_mm_active();
    printf("%s %s\n", sp_simd_name(sp_simd_current()), k ? k->name : "portable");
    return 0;
}
