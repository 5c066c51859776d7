/* Per-thread scratch memory of the kernels: one buffer per slot and thread,
 * grown on demand, never shrunk, freed when the thread exits. A slot is
 * owned by one kind of user, so that two users active on one thread at the
 * same time (a caller's per-call buffer read by the pool while its own
 * worker share runs) never hand out the same memory. */
#ifndef SP_COMPUTE_SCRATCH_H
#define SP_COMPUTE_SCRATCH_H

#include <stddef.h>

typedef enum sp_scratch_slot {
    SP_SCRATCH_AFFINE_ROWS, /* matmul_vnni.c: quantized activations */
    SP_SCRATCH_AFFINE_GEMM, /* matmul_vnni_gemm.c: the same, many tokens */
    SP_SCRATCH_GGML_ACTS,   /* ggml_gemm_vnni.c: every token, quantized */
    SP_SCRATCH_GGML_SPLIT,  /* matmul_ggml.c: activation parts, part sums */
    SP_SCRATCH_GGML_PREFILL_PARTS, /* ggml_gemm_vnni.c: one token's parts */
    SP_SCRATCH_LATENT_TILE, /* attention_latent.c: a tile of rows in f32 */
    SP_SCRATCH_SLOTS
} sp_scratch_slot;

/* This thread's buffer of `slot`, at least `bytes` long and 64-byte
 * aligned; its contents are kept only while it does not grow. NULL when out
 * of memory (the previous buffer stays valid) or for a bad slot. */
void *sp_scratch_get(sp_scratch_slot slot, size_t bytes);

#endif
