/* spindle/checkpoint.h: durable checkpoints of a generation and saved
 * sequence states. Part of the public API: include "spindle.h", whose
 * opening comment states the conventions every call here follows. */
#ifndef SPINDLE_CHECKPOINT_H
#define SPINDLE_CHECKPOINT_H

#include "spindle/generate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- checkpoints
 *
 * A checkpoint is the whole state of a generation between two forward
 * passes, so that it can continue in another process exactly as it would
 * have: the model's fingerprint, the prompt and the tokens generated so far
 * (the last of them sampled but not yet fed to the model), the sequence
 * state (a snapshot: no rewind needed, so recurrent layers resume too), the
 * sampler's random stream, every generation parameter, and named extension
 * blobs (a server's stop-string matcher; the engine's own "drafter": a
 * speculating request's drafter state, continued by a resume with the
 * same drafter). The engine makes one every
 * spindle_gen_params.checkpoint_every tokens and lends it to
 * on_checkpoint, which may attach extensions and save it; one read back
 * with spindle_checkpoint_load goes into spindle_gen_params.resume.
 *
 * File: "SPCKPT", a version, tagged sections (unknown tags are skipped, so
 * new extensions load in old readers), an XXH3-128 checksum of everything
 * before it. Saving is atomic (temporary file, fsync, rename): a reader
 * sees the previous checkpoint or the new one, never a mix.
 *
 * Threads: one thread at a time per checkpoint; distinct checkpoints are
 * independent. A checkpoint must be freed before its model. */

/* Write ck to `path` atomically. Thread-safe for distinct paths. */
spindle_status spindle_checkpoint_save(const spindle_checkpoint *ck,
                                       const char *path, spindle_error *err);
/* Read a checkpoint for `model`. A missing file is SPINDLE_ERR_IO; a
 * truncated, corrupted (checksum) or malformed one SPINDLE_ERR_FORMAT; one
 * written under another model's fingerprint SPINDLE_ERR_ARGUMENT; each
 * with one line naming the file and the problem. Free with
 * spindle_checkpoint_free. */
spindle_status spindle_checkpoint_load(spindle_model *model, const char *path,
                                       spindle_checkpoint **out,
                                       spindle_error *err);
void spindle_checkpoint_free(spindle_checkpoint *ck);
/* Tokens generated so far (the last one is the pending token: reported,
 * not yet fed) and the original prompt's length. */
int spindle_checkpoint_generated(const spindle_checkpoint *ck);
int spindle_checkpoint_prompt_tokens(const spindle_checkpoint *ck);
/* The prompt followed by the generated tokens (prompt_tokens + generated
 * ids); borrowed, valid while ck is. */
const int32_t *spindle_checkpoint_tokens(const spindle_checkpoint *ck);
/* Whether the caller chose the seed (informational: the random stream is
 * restored either way). Default false. */
void spindle_checkpoint_set_seed_explicit(spindle_checkpoint *ck, bool explicit_seed);
bool spindle_checkpoint_seed_explicit(const spindle_checkpoint *ck);
/* Attach (or replace) the extension `name` (1..31 bytes of [a-z0-9_.-]):
 * `n` bytes copied. Names in use: "stop" (the server's stop-string
 * matcher), "drafter" (the engine's: a speculating request's drafter
 * state); reserved: "grammar". */
spindle_status spindle_checkpoint_set_extension(spindle_checkpoint *ck,
                                                const char *name,
                                                const void *data, size_t n,
                                                spindle_error *err);
/* The extension's bytes (borrowed) and size, or NULL when absent. */
const void *spindle_checkpoint_extension(const spindle_checkpoint *ck,
                                         const char *name, size_t *n);

/* A sequence's state with the n tokens it holds (n == the snapshot's
 * length) as a file: the checkpoint container (fingerprint, checksum,
 * atomic write) without a generation; what `spindle serve` saves for a
 * slot. A state of the base model. Thread-safe for distinct paths. */
spindle_status spindle_seq_state_save(spindle_model *model,
                                      const spindle_seq_snapshot *snap,
                                      const int32_t *tokens, int n,
                                      const char *path, spindle_error *err);
/* The same for a state computed under a LoRA adapter: `adapter_key` is
 * its spindle_adapter_key (the content identity of the adapter's weights
 * and the request's scale; adapter_key_n SPINDLE_ADAPTER_KEY_BYTES), which
 * the file records (adapter_key_n 0: the base model, as
 * spindle_seq_state_save). */
spindle_status spindle_seq_state_save_keyed(spindle_model *model,
                                            const spindle_seq_snapshot *snap,
                                            const int32_t *tokens, int n,
                                            const unsigned char *adapter_key,
                                            size_t adapter_key_n,
                                            const char *path,
                                            spindle_error *err);
/* Read one back: *snap (free with spindle_seq_snapshot_free before the
 * model), *tokens (spindle_free) and their count. Errors as
 * spindle_checkpoint_load's; a generation checkpoint is refused here and a
 * saved state by spindle_checkpoint_load. A state saved under an adapter
 * is refused here (SPINDLE_ERR_ARGUMENT): read it with
 * spindle_seq_state_load_keyed, so that it is never taken for the base
 * model's. */
spindle_status spindle_seq_state_load(spindle_model *model, const char *path,
                                      spindle_seq_snapshot **snap,
                                      int32_t **tokens, int *n,
                                      spindle_error *err);
/* The same, also giving the adapter key the file records (*adapter_key_n
 * SPINDLE_ADAPTER_KEY_BYTES, or 0 for a base-model state). Reuse such a
 * state only for requests whose spindle_adapter_key equals it. */
spindle_status spindle_seq_state_load_keyed(
    spindle_model *model, const char *path, spindle_seq_snapshot **snap,
    int32_t **tokens, int *n,
    unsigned char adapter_key[SPINDLE_ADAPTER_KEY_BYTES],
    size_t *adapter_key_n, spindle_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_CHECKPOINT_H */
