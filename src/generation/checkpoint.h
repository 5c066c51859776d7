/* Durable generation checkpoints (spindle.h "checkpoints"): the object
 * (checkpoint.c: capture from a running request, resume into a new one,
 * extensions) and its file format (checkpoint_file.c: serialize, parse,
 * atomic save, load).
 *
 * The safe boundary: right after a token was taken and the request goes on.
 * The sequence then holds the prompt and every generated token but the
 * last (n_prompt + n_generated - 1 positions), and the next forward pass
 * feeds that last one; so a resume restores the snapshot and the sampler's
 * stream and continues with that same decode row. */
#ifndef SP_GENERATION_CHECKPOINT_H
#define SP_GENERATION_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"

#define SP_CHECKPOINT_NAME_MAX 31

/* The extension recording the LoRA adapter a generation (a checkpoint) or
 * a saved sequence state was computed under: its spindle_adapter_key
 * (SPINDLE_ADAPTER_KEY_BYTES); absent: the base model. */
#define SP_CHECKPOINT_ADAPTER_EXT "spindle.adapter"
/* The embeddings spans of a generation's prompt: each one's first
 * position, length, digest offset, flags and digest
 * (prompt_spans.c's record); absent: a prompt of tokens only. */
#define SP_CHECKPOINT_SPANS_EXT "spindle.spans"

typedef struct sp_checkpoint_extension {
    char name[SP_CHECKPOINT_NAME_MAX + 1];
    unsigned char *data;
    size_t n;
} sp_checkpoint_extension;

struct spindle_checkpoint {
    char fingerprint[SPINDLE_FINGERPRINT_LEN + 1];
    int32_t n_prompt, n_generated;
    int32_t *tokens;                   /* n_prompt + n_generated */
    uint64_t rng[4];
    bool seed_explicit;
    /* Every generation parameter; its arrays point into the ones below. */
    spindle_gen_params params;
    int32_t *stop_ids, *bias_ids, *xtc_special;
    float *bias_values;
    /* The state at n_prompt + n_generated - 1 tokens: a snapshot once
     * bound to a model, raw bytes as parsed from a file. */
    spindle_seq_snapshot *snap;
    unsigned char *snap_data;
    size_t snap_n;
    sp_checkpoint_extension *ext;
    int n_ext;
    int n_tokens_read;                 /* parsing: entries of TOKS */
    /* A saved sequence state (spindle_seq_state_save): tokens and
     * snapshot only, n_generated 0, the snapshot at n_prompt tokens. */
    bool prompt_state;
};

typedef struct sp_request sp_request;

/* ---- checkpoint.c ---- */

/* At submit (request.c): the request's checkpoint settings, and for a
 * resume its checks (adapter, context, a sequence that can take the
 * snapshot), the generated tokens and the random stream. */
spindle_status sp_request_set_checkpoints(sp_request *q,
                                         const spindle_gen_params *g,
                                         spindle_error *err);

/* Hand the request's state to its on_checkpoint when its count of
 * generated tokens reached or passed a multiple of checkpoint_every since
 * the last one (engine_sched.c, after a token or a speculative round that
 * does not end the request). A checkpoint that cannot
 * be made (out of memory) is skipped: the request goes on. */
void sp_checkpoint_maybe_emit(spindle_engine *e, sp_request *r);
/* The generation parameters a resumed request runs with: the
 * checkpoint's, with the caller's callbacks, checkpoint_every, grammar,
 * adapter, speculation and jump-forward. */
spindle_gen_params sp_checkpoint_resume_params(const spindle_checkpoint *ck,
                                               const spindle_gen_params *caller);
/* At admission: the snapshot into r->seq (which must be empty), the
 * random stream into the sampler, the prompt marked prefilled. */
spindle_status sp_checkpoint_restore(sp_request *r, spindle_error *err);
/* A checkpoint with copies of the parameter arrays (params' pointers then
 * point at ck's own); tokens, snapshot and extensions left empty. */
spindle_status sp_checkpoint_set_params(spindle_checkpoint *ck,
                                        const spindle_gen_params *g,
                                        spindle_error *err);

/* ---- checkpoint_file.c ---- */

/* The file's bytes (malloc'd, *n long). */
spindle_status sp_checkpoint_serialize(const spindle_checkpoint *ck,
                                       unsigned char **out, size_t *n,
                                       spindle_error *err);
/* A checkpoint from a file's bytes, every field bounds-checked, its
 * snapshot kept as raw bytes (not bound to a model). `verify_checksum`
 * false only for the fuzz harness (to reach the sections). */
spindle_status sp_checkpoint_parse(const unsigned char *data, size_t n,
                                   bool verify_checksum,
                                   spindle_checkpoint **out,
                                   spindle_error *err);

#endif
