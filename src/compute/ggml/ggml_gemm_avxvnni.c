/* The AVX-VNNI instance of ggml_gemm_avx2.c (sp_ggml_gemm_avxvnni): the
 * same file, its block sums as VEX vpdpbusd on ymm. */
#define SP_GGML_AVXVNNI 1
#include "compute/ggml/ggml_gemm_avx2.c"
