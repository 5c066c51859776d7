/* The AVX-VNNI instance of ggml_dot_avx2.c's decode kernels
 * (sp_ggml_rows_q8_avxvnni): the same file, its u8 x s8 lane sums as VEX
 * vpdpbusd on ymm. */
#define SP_GGML_AVXVNNI 1
#include "compute/ggml/ggml_dot_avx2.c"
