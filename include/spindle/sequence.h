/* spindle/sequence.h: sequences (per-conversation state, rollback,
 * snapshots) and the batched forward pass. Part of the public API: include
 * "spindle.h", whose opening comment states the conventions every call here
 * follows. */
#ifndef SPINDLE_SEQUENCE_H
#define SPINDLE_SEQUENCE_H

#include "spindle/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------- sequences */

/* A sequence owns the state of one conversation with a model, layer by
 * layer: keys/values (all positions, or what a sliding window still needs)
 * or a recurrent state. It must not outlive the model. One thread at a
 * time per sequence: these calls are not safe concurrently with each other
 * or with a forward pass or generation that uses the same sequence.
 * spindle_seq_new is safe concurrently with any model call. The keys and
 * values of full-attention layers live in blocks of the model's KV pool
 * (spindle_kv_pool_info), taken as the sequence grows and returned by
 * truncation and free (sequences of one model may share blocks of a common
 * prompt prefix; a shared block is copied before it is written); a forward
 * pass that finds the pool full fails with SPINDLE_ERR_LIMIT, changing
 * nothing. */
typedef struct spindle_seq spindle_seq;

spindle_status spindle_seq_new(spindle_model *model, spindle_seq **out,
                               spindle_error *err);
void spindle_seq_free(spindle_seq *seq);
/* Number of tokens the sequence has seen; 0 for NULL. */
int spindle_seq_length(const spindle_seq *seq);
/* Bytes of memory the sequence's state holds now; 0 for NULL. */
size_t spindle_seq_state_bytes(const spindle_seq *seq);
/* Roll the sequence back to its first `length` tokens (length <= current),
 * exactly: what follows gives the bits a sequence that only saw those
 * tokens would give. Always possible to 0, and for full-KV layers to any
 * length; sliding-window and recurrent layers reach at least
 * max_rollback tokens back (spindle_load_options), recurrent ones only
 * within the last forward pass. Beyond that: SPINDLE_ERR_UNSUPPORTED naming
 * the layer kind and its limit, the sequence unchanged (start again from
 * 0, or from a snapshot). SPINDLE_ERR_ARGUMENT for a NULL sequence or a
 * length out of range. */
spindle_status spindle_seq_truncate(spindle_seq *seq, int length,
                                    spindle_error *err);

/* A copy of a sequence's whole state at its length, to continue from later
 * (bit-identically) in the same or another sequence of the same model:
 * one flat block of raw buffers (prompt caches and checkpoint files build
 * on it). It belongs to the model it was taken from and must be freed
 * before that model. Once taken it is read-only: restore, bytes and length
 * may run on it from several threads at once; free must not overlap them.
 * Truncation after a restore reaches as far as the snapshot holds: any
 * length for full-KV layers, the window margin for sliding-window layers,
 * only 0 or the restored length for recurrent layers. */
typedef struct spindle_seq_snapshot spindle_seq_snapshot;

spindle_status spindle_seq_snapshot_take(const spindle_seq *seq,
                                         spindle_seq_snapshot **out,
                                         spindle_error *err);
/* Replace seq's state by the snapshot's; SPINDLE_ERR_ARGUMENT when the
 * snapshot comes from another model (seq is then unchanged, as on any
 * failure). */
spindle_status spindle_seq_snapshot_restore(spindle_seq *seq,
                                            const spindle_seq_snapshot *snap,
                                            spindle_error *err);
void spindle_seq_snapshot_free(spindle_seq_snapshot *snap);
/* Bytes of the snapshot's data (what storing it would take); 0 for NULL. */
size_t spindle_seq_snapshot_bytes(const spindle_seq_snapshot *snap);
/* The sequence length it was taken at; 0 for NULL. */
int spindle_seq_snapshot_length(const spindle_seq_snapshot *snap);
/* The snapshot's flat block (spindle_seq_snapshot_bytes long; borrowed,
 * valid while the snapshot is), as a file would store it. */
const void *spindle_seq_snapshot_data(const spindle_seq_snapshot *snap);
/* A snapshot of `model` from a block spindle_seq_snapshot_data gave (the
 * bytes are copied): its structure is checked here (SPINDLE_ERR_FORMAT),
 * its fit to the model's layers at restore. Only meaningful for the same
 * model files (compare spindle_model_fingerprint). Thread-safe. */
spindle_status spindle_seq_snapshot_from_data(const spindle_model *model,
                                              const void *data, size_t n,
                                              spindle_seq_snapshot **out,
                                              spindle_error *err);

/* ----------------------------------------------------------------- forward */

typedef enum spindle_logits_mode {
    SPINDLE_LOGITS_NONE = 0,  /* only advance the state (prefill chunks) */
    SPINDLE_LOGITS_LAST,      /* logits of the last new token */
    SPINDLE_LOGITS_ALL        /* logits of every new token (verification) */
} spindle_logits_mode;

/* ------------------------------------------------------------------- spans
 *
 * A prompt is an ordered list of spans. A token span is ids looked up in the
 * embedding table. An embeddings span is rows an input encoder (vision,
 * audio) produced: n rows of hidden_size floats that enter the first layer
 * as they are (the family's embedding scale, such as Gemma's sqrt(hidden),
 * is not applied to them), with the placeholder ids the prompt holds at
 * those positions (the template's image token: what the sequence's history,
 * penalties and checkpoints record) and a digest naming the content. */
typedef enum spindle_span_kind {
    SPINDLE_SPAN_TOKENS = 0,
    SPINDLE_SPAN_EMBEDDINGS
} spindle_span_kind;

/* Flags of an embeddings span. BIDIRECTIONAL: its positions attend to each
 * other both ways (image tokens of Gemma 3, Qwen-VL); its rows must be in one
 * forward pass (the engine never cuts one across prompt chunks; a caller of
 * spindle_forward passes it whole in one entry, or only its rest after a
 * cached prefix that was computed with the span whole). NO_PER_LAYER_INPUT:
 * families with per-layer token inputs (Gemma 4) give these positions none,
 * as their multimodal models do. */
#define SPINDLE_SPAN_BIDIRECTIONAL 1u
#define SPINDLE_SPAN_NO_PER_LAYER_INPUT 2u

#define SPINDLE_SPAN_DIGEST_BYTES 16

typedef struct spindle_span {
    spindle_span_kind kind;
    int n;                      /* positions, at least 1 */
    /* n ids: the tokens, or an embeddings span's placeholders. */
    const int32_t *tokens;
    /* EMBEDDINGS: n * hidden_size floats, row-major (NULL otherwise). */
    const float *embeddings;
    /* EMBEDDINGS: what the rows are (spindle_span_digest). The prefix
     * cache and checkpoints key these positions by it, never by the
     * placeholder ids: two spans with different digests never share
     * cached state; equal digests must mean equal rows. */
    unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES];
    /* EMBEDDINGS: the index of this span's first row within the content
     * the digest names (0 unless a forward pass continues a span that an
     * earlier pass began). */
    int digest_offset;
    uint32_t flags;             /* SPINDLE_SPAN_* above; 0 for tokens */
} spindle_span;

/* The digest of an embeddings span: XXH3-128 of the encoder's input bytes
 * (an image file, audio samples) followed by the encoder's identity (its
 * name and weights' fingerprint: the same bytes through another encoder
 * are other rows). `encoder` may be NULL (""). Thread-safe. */
void spindle_span_digest(const void *source, size_t n, const char *encoder,
                         unsigned char out[SPINDLE_SPAN_DIGEST_BYTES]);

/* One sequence's share of a batched forward pass: its new tokens are
 * appended at positions seq_length .. seq_length + n_tokens - 1. */
typedef struct spindle_batch_entry {
    spindle_seq *seq;
    const int32_t *tokens;
    int n_tokens;
    /* Instead of `tokens` (then NULL): the entry's rows as spans, in
     * order; n_tokens must be their total length. Borrowed for the call. */
    const spindle_span *spans;
    int n_spans;
    spindle_logits_mode logits_mode;
    /* Caller-owned; vocab floats for LAST, n_tokens * vocab for ALL. */
    float *logits;
    /* A LoRA adapter of the same model applied to this entry's rows (NULL:
     * the base model), its own scale times adapter_scale (0 reads as 1).
     * Borrowed for the call. Entries with different adapters share the
     * pass: the base products run once over all rows. */
    const struct spindle_adapter *adapter;
    float adapter_scale;
    /* NULL, or caller-owned n_tokens * hidden_size floats: each row's
     * last-layer hidden state BEFORE the final norm (what a
     * multi-token-prediction head reads). */
    float *hidden;
} spindle_batch_entry;

/* Run the model over every entry in one pass; all entries must belong to
 * `model` and name distinct sequences. On error every sequence is left as
 * it was (length, caches and recurrent states).
 * Thread-safety: one forward pass or generation at a time per model (the
 * pass uses the model's scratch and thread pool); distinct models run
 * concurrently. */
spindle_status spindle_forward(spindle_model *model,
                               spindle_batch_entry *entries, int n_entries,
                               spindle_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_SEQUENCE_H */
