/* LoRA adapters applied unmerged: y = W x + scale * B (A x).
 *
 * An adapter holds, per layer and projection it targets, A [rank][in] and
 * B [out][rank] as f32 matrices (sp_weight views over its own copies).
 * In a forward pass the base product runs once over all T rows, then for
 * each adapter present in the batch its rows are gathered, multiplied by
 * A and B once for the whole group (the S-LoRA / Punica grouping), scaled
 * per row and added back. Rows without an adapter are untouched. */
#ifndef SP_MODELS_LORA_H
#define SP_MODELS_LORA_H

#include <stdatomic.h>

#include "artifacts/adapter_config.h"
#include "models/blocks.h"

typedef struct sp_lora_pair {
    sp_weight a;   /* [rank][in] f32 */
    sp_weight b;   /* [out][rank] f32 */
} sp_lora_pair;

struct spindle_adapter {
    const spindle_model *model;
    atomic_int refs;
    uint32_t serial;       /* unique per load in the process (never 0) */
    sp_adapter_config cfg;
    float scale;
    /* [n_layers * SP_LORA_N_MODULES]; a pair with a.data NULL is absent */
    sp_lora_pair *pairs;
    int n_pairs;           /* present ones */
    float *storage;        /* every matrix, one allocation */
    /* What the adapter computes: XXH3-128 of its scale and every pair's
     * shape and values (sp_adapter_identity), set at load and stack. A
     * checkpoint records it, so a resume under another adapter is refused. */
    unsigned char identity[16];
};

/* Compute a->identity from its scale and pairs. */
void sp_adapter_identity(spindle_adapter *a);

/* Take one more reference (an engine request holding the adapter). */
void sp_adapter_retain(const spindle_adapter *a);
/* Drop one; frees the adapter with the last. */
void sp_adapter_release(const spindle_adapter *a);

/* The pair of layer l's module m, or NULL. */
const sp_lora_pair *sp_adapter_pair(const spindle_adapter *a, int l,
                                    sp_lora_module m);

/* y += the low-rank terms of every adapter in the pass for projection
 * `lin` (one of a layer's q/k/v/o/gate/up/down), over x of f->n_rows rows;
 * nothing for other matrices or when no sequence has an adapter. */
void sp_lora_apply(sp_forward *f, const sp_linear *lin, const float *x,
                   float *y);

typedef struct sp_lora_scratch sp_lora_scratch;
void sp_lora_scratch_free(sp_lora_scratch *s);

#endif
