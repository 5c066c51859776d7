/* LoRA adapters applied unmerged: y = W x + scale * B (A x).
 *
 * An adapter holds, per layer and projection it targets, A [rank][in] and
 * B [out][rank] as f32 matrices (sp_weight views over its own copies).
 * In a forward pass the base product runs once over all T rows, then for
 * each adapter present in the batch its rows are gathered, multiplied by
 * A and B once for the whole group (the S-LoRA / Punica grouping), scaled
 * per row and added back. Rows without an adapter are untouched. A
 * routed expert's projection has a pair per expert, applied to the rows
 * routed to that expert (sp_lora_apply_experts, from models/moe.c); a
 * shared expert's projections and its gate are plain ones, applied to
 * every row as q..down are, and so are a gated DeltaNet's projections
 * (Qwen3-Next, Qwen3.5: the family's lora_linear hook names them). */
#ifndef SP_MODELS_LORA_H
#define SP_MODELS_LORA_H

#include <stdatomic.h>

#include "artifacts/adapter_config.h"
#include "models/blocks.h"

typedef struct sp_lora_pair {
    sp_weight a;   /* [rank][in] f32 */
    sp_weight b;   /* [out][rank] f32 */
} sp_lora_pair;

/* Which of a layer's projections a pair adapts, beside its module: the
 * layer's own (q..down, or its MoE router or shared-expert gate), one
 * routed expert's gate/up/down (expert >= 0), or the shared expert's
 * gate/up/down (SP_LORA_SHARED: Qwen's mlp.shared_expert, one expert
 * every row goes through). Names give a fourth form, every expert of one
 * stacked tensor (mlx-lm's switch_mlp, GGUF's ffn_*_exps), which the
 * loader cuts into one pair per expert. */
enum { SP_LORA_OWN = -1, SP_LORA_STACKED = -2, SP_LORA_SHARED = -3 };

struct spindle_adapter {
    const spindle_model *model;
    atomic_int refs;
    uint32_t serial;       /* unique per load in the process (never 0) */
    sp_adapter_config cfg;
    float scale;
    /* One slot per projection the model has (sp_lora_slot); a pair with
     * a.data NULL is absent. */
    sp_lora_pair *pairs;
    int n_slots;
    int max_experts;       /* the model's largest expert count (0: dense) */
    int n_pairs;           /* present ones */
    bool *expert_layers;   /* [n_layers] some expert of the layer has a pair */
    /* What the adapter computes: XXH3-128 of its scale and every pair's
     * shape and values, set at load and stack (sp_adapter_finish). A
     * checkpoint records it, so a resume under another adapter is refused. */
    unsigned char identity[16];
};

/* A new adapter of model m with every slot empty and one reference, or
 * NULL when out of memory. */
spindle_adapter *sp_adapter_new(const spindle_model *m);

/* The slot of layer l's module m, of its expert e (SP_LORA_OWN: the
 * layer's own projection, SP_LORA_SHARED: its shared expert's): q..down
 * of every layer first (the order of the identities recorded before
 * experts existed), then the routers, then each layer's experts' gate,
 * up and down, then each layer's shared expert's gate, up, down and its
 * gate, then each layer's DeltaNet projections in sp_lora_module's order
 * (each block added after the last, so identities recorded before it
 * stay valid). -1: no such slot. */
int sp_lora_slot(const spindle_adapter *a, int l, sp_lora_module m, int e);
/* The inverse: slot i's layer, module and expert. */
void sp_lora_slot_place(const spindle_adapter *a, int i, int *l,
                        sp_lora_module *m, int *e);

/* Once every pair is in place: a->identity from its scale and pairs, and
 * a->expert_layers. */
void sp_adapter_finish(spindle_adapter *a);

/* Take one more reference (an engine request holding the adapter). */
void sp_adapter_retain(const spindle_adapter *a);
/* Drop one; frees the adapter with the last. */
void sp_adapter_release(const spindle_adapter *a);

/* The pair of layer l's module m (expert e, or SP_LORA_OWN), or NULL. */
const sp_lora_pair *sp_adapter_pair(const spindle_adapter *a, int l,
                                    sp_lora_module m, int e);

/* y += the low-rank terms of every adapter in the pass for projection
 * `lin` (one of a layer's q/k/v/o/gate/up/down, or an MoE layer's
 * router, shared expert gate/up/down or shared-expert gate), over x of
 * f->n_rows rows; nothing for other matrices or when no sequence has an
 * adapter. */
void sp_lora_apply(sp_forward *f, const sp_linear *lin, const float *x,
                   float *y);

/* The routed rows of an MoE layer as models/moe.c groups them: grouped
 * position p holds assignment order[p] (token order[p] / top_k), and
 * expert e's positions are [first[e], first[e + 1]). */
typedef struct sp_lora_routed {
    int layer;
    int n_experts, top_k;
    const int *first;
    const int *order;
} sp_lora_routed;

/* Whether an adapter of the pass adapts some expert of layer l. */
bool sp_lora_adapts_experts(const sp_forward *f, int l);
/* y[p] += scale * B_e (A_e x[p]) at every grouped position p whose
 * sequence's adapter has a pair for expert e's module m (gate, up or
 * down); x and y are [positions][in] and [positions][out]. Each
 * (expert, adapter) group is gathered and multiplied once, the groups in
 * parallel. */
void sp_lora_apply_experts(sp_forward *f, const sp_lora_routed *r,
                           sp_lora_module m, const float *x, float *y);

/* The syntax of a projection in tensor names, at "model.layers.N.":
 * {self_attn,mlp}.[G.]X. with X a module name and G (under mlp only) the
 * group of experts it belongs to ("switch_mlp", "experts.3",
 * "shared_expert"); group empty for a layer's own projection;
 * linear_attn.X. (a DeltaNet's); or, beside the MLP (Gemma 4),
 * router.proj. or G.X. with G its experts ("experts.switch_glu"). *s is
 * moved past it. */
typedef struct sp_lora_target {
    int layer;
    sp_lora_module module;
    int expert;            /* SP_LORA_OWN, SP_LORA_STACKED, SP_LORA_SHARED
                              or an index */
    char group[48];
    char router[24];       /* the router as named: "gate", "router" or
                              "router.proj" */
    bool beside;           /* named at the layer, not under mlp. */
    int64_t rows, cols;    /* set by sp_lora_resolve: the adapted shape */
} sp_lora_target;
bool sp_lora_parse_target(const char **s, sp_lora_target *t);
/* Layer l's routed experts: sp_layer.moe, or the experts beside its MLP
 * (sp_layer.moe_beside, Gemma 4's); NULL: none. */
const struct sp_moe *sp_lora_moe(const spindle_model *m, int l);
/* t->expert from t->group against layer t->layer of m (its MoE spec's
 * stacked, per-expert and shared-expert names), and t->rows / t->cols,
 * the shape of the projection it adapts (of expert 0 for a stacked one:
 * its base projection's, or half a fused gate_up expert's, which has no
 * sp_lora_base); false with a one-line reason in why[n]. */
bool sp_lora_resolve(const spindle_model *m, sp_lora_target *t, char *why,
                     size_t n);
/* Layer l's projection m of expert e (SP_LORA_OWN: the layer's own, its
 * router, shared-expert gate or DeltaNet projection; SP_LORA_SHARED: its
 * shared expert's), or NULL when the model has none as a matrix of its
 * own (a fused gate_up expert's gate or up). */
const sp_linear *sp_lora_base(const spindle_model *m, int l, sp_lora_module mod,
                              int e);

typedef struct sp_lora_scratch sp_lora_scratch;
void sp_lora_scratch_free(sp_lora_scratch *s);

#endif
