/* spindle/model.h: loading a model and its read-only queries. Part of the
 * public API: include "spindle.h", whose opening comment states the
 * conventions every call here follows. */
#ifndef SPINDLE_MODEL_H
#define SPINDLE_MODEL_H

#include "spindle/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ models */

typedef struct spindle_model spindle_model;

/* Element type of the key/value cache. F32 (the default) keeps the keys and
 * values exactly as computed, which is what mlx-lm's f32 reference does;
 * BF16 and F16 store them rounded to nearest even (NaN and inf kept), halving
 * the cache's memory and the bytes a long-context decode step reads, at the
 * cost of that rounding error in every attention score and output. */
typedef enum spindle_kv_type {
    SPINDLE_KV_F32 = 0,
    SPINDLE_KV_BF16,
    SPINDLE_KV_F16
} spindle_kv_type;

/* A change of a model's prefix index (the KV pool's published blocks),
 * for an external indexer that routes requests to the replica holding a
 * prompt's blocks (vLLM's KV-cache events). A block is published when a
 * sequence fills it (or it is read back from the on-disk prompt cache) and
 * removed when the pool evicts it for a new one. */
typedef enum spindle_kv_event_kind {
    SPINDLE_KV_BLOCK_STORED = 1,
    SPINDLE_KV_BLOCK_REMOVED
} spindle_kv_event_kind;

typedef struct spindle_kv_event {
    spindle_kv_event_kind kind;
    uint64_t hash;          /* the block's chained hash (docs/deploy.md) */
    /* STORED only: the previous block's hash, or when `first` the chain's
     * root (spindle_kv_pool_info.hash_root for the base model) */
    uint64_t parent;
    bool first;             /* the first block of its prompt */
    uint32_t adapter_id;    /* the hash namespace: 0 the base model, else a
                             * LoRA adapter's (process-local) */
    const int32_t *tokens;  /* STORED: the block's n_tokens token ids */
    int n_tokens;
} spindle_kv_event;

/* Called on whichever thread changes the index (the engine's stepping
 * thread, mostly), while the pool's lock is held: it must only copy the
 * event (the tokens are borrowed for the call) and return, and never call
 * back into the model. Events come in the order of the changes. */
typedef void (*spindle_kv_event_fn)(const spindle_kv_event *event,
                                    void *user);

typedef struct spindle_load_options {
    int n_threads;        /* worker threads for compute; <= 0: all cores */
    int max_context;      /* 0: the model's own context length */
    /* Cache element type of every sequence of the model (0: SPINDLE_KV_F32).
     * Any other value fails the load with SPINDLE_ERR_ARGUMENT. */
    spindle_kv_type kv_type;
    /* Nonzero: map the weight files (zero-copy, shared with the page cache,
     * instant load). Zero, the default: read them into private memory
     * backed by 2 MiB transparent huge pages, one copy at load that makes
     * decode faster (every token streams all weights through the TLB);
     * files larger than half the available memory are mapped anyway. */
    int use_mmap;
    /* How many tokens back spindle_seq_truncate is guaranteed to reach for
     * every layer kind (0: SPINDLE_DEFAULT_MAX_ROLLBACK; a negative value
     * or one above SPINDLE_MAX_ROLLBACK_LIMIT fails the load with
     * SPINDLE_ERR_ARGUMENT). Full-KV layers can always be truncated to any
     * length; sliding-window layers keep this many positions beyond their
     * window; recurrent layers keep the states after each of the last this
     * many tokens of the last forward pass (each a full copy of the layer's
     * state, so memory grows with it). */
    int max_rollback;
    /* Bytes of the model's KV block pool, shared by all its sequences'
     * full-attention layers (sliding-window and recurrent layers keep
     * their own fixed-size state beside it). 0: room for kv_sequences
     * full contexts (max_context tokens each, in 32-token blocks), at most
     * 90% of the memory available beside the weights. Pages are committed
     * only as blocks are first written. A budget that holds no block fails
     * the load with SPINDLE_ERR_LIMIT. */
    size_t kv_bytes;
    /* The sequences the default pool (kv_bytes 0) holds at full context
     * at once: the callers' parallelism (`spindle serve --parallel`).
     * 0: SPINDLE_DEFAULT_KV_SEQUENCES; negative fails the load with
     * SPINDLE_ERR_ARGUMENT. Ignored when kv_bytes is set. */
    int kv_sequences;
    /* Non-NULL: the on-disk prompt cache's directory (created if needed).
     * Full 32-token KV blocks of the base model's prompts are written there
     * in the background (atomic renames, each file carrying the model
     * fingerprint, its chained prefix hash and an XXH3-128 checksum) and a
     * later process whose prompt starts the same way reads them back
     * instead of prefilling them. Files that fail a check (corrupted,
     * truncated, another model's) are refused with a warning on stderr and
     * deleted. Models with recurrent or sliding-window layers also write
     * the other layers' state at each block boundary their prefix index
     * keeps one for (DIR/<hash>.kvs, the same container and checks, the
     * snapshot checked against the model's layers), since a prefix of
     * theirs can be resumed only from one. An unusable directory fails the
     * load with SPINDLE_ERR_IO. */
    const char *prompt_cache_dir;
    /* Bytes the cache directory's files (blocks and states) may take,
     * least recently used deleted first (0:
     * SPINDLE_DEFAULT_PROMPT_CACHE_DISK_BYTES). */
    size_t prompt_cache_disk_bytes;
    /* Non-NULL: every change of the prefix index is reported to it, with
     * kv_events_user (spindle_kv_event_fn). */
    spindle_kv_event_fn kv_events;
    void *kv_events_user;
} spindle_load_options;

#define SPINDLE_DEFAULT_PROMPT_CACHE_DISK_BYTES ((size_t)4 << 30)
/* The default pool's full contexts when kv_sequences is 0: the engine's
 * default max_seqs, so that its sequences never wait for blocks. */
#define SPINDLE_DEFAULT_KV_SEQUENCES 16

/* The model's KV block pool: its size and what its blocks hold now. */
typedef struct spindle_kv_pool_info {
    size_t budget_bytes;     /* the pool's byte budget */
    size_t block_bytes;      /* one block, every full-KV layer */
    int block_tokens;        /* positions per block */
    int blocks;              /* in all */
    int used;                /* referenced by a sequence */
    int cached;              /* unreferenced prefix-index blocks (LRU) */
    int free;                /* the rest */
    int indexed;             /* published in the prefix index (cached, or
                              * used and reusable): the blocks KV events
                              * announce */
    uint64_t hash_root;      /* the base model's chain root (docs/deploy.md) */
    /* The on-disk prompt cache (all 0 without one): its budget, what its
     * files take, and since the load: files (blocks, and boundary states of
     * hybrid and sliding-window models) read back, written, refused
     * (failed a check), evicted under the budget, and dropped (offered
     * while the writer was too far behind). */
    size_t disk_budget_bytes, disk_bytes;
    int disk_files;
    long long disk_loaded, disk_written, disk_refused, disk_evicted,
        disk_dropped;
} spindle_kv_pool_info;

/* Thread-safe (a snapshot). SPINDLE_ERR_ARGUMENT for NULL. */
spindle_status spindle_model_kv_pool_info(const spindle_model *model,
                                          spindle_kv_pool_info *out,
                                          spindle_error *err);

#define SPINDLE_DEFAULT_MAX_ROLLBACK 8
#define SPINDLE_MAX_ROLLBACK_LIMIT 4096

/* "f32", "bf16", "f16" (static strings); NULL for a value outside the
 * enum. Thread-safe. */
const char *spindle_kv_type_name(spindle_kv_type type);
/* The type named by `name` ("f32", "bf16", "f16"); SPINDLE_ERR_ARGUMENT
 * naming the value otherwise. Thread-safe. */
spindle_status spindle_kv_type_parse(const char *name, spindle_kv_type *out,
                                     spindle_error *err);

/* `path` is a model directory (config.json + safetensors), a .gguf file (or
 * a directory holding one and no config.json), or a Hugging Face repo id
 * ("org/name") found in the local HF cache. Thread-safe (distinct loads
 * share nothing). spindle_model_free: every sequence of the model must be
 * freed first; not concurrently with any other use of the model. */
spindle_status spindle_model_load(const char *path,
                                  const spindle_load_options *options,
                                  spindle_model **out, spindle_error *err);
void spindle_model_free(spindle_model *model);

/* Read-only queries: thread-safe, also while a forward pass runs. A NULL
 * model gives NULL / 0. */
/* Directory the model was resolved to (a snapshot dir for repo ids; the
 * file's path for GGUF). Owned by the model, valid until it is freed. */
const char *spindle_model_dir(const spindle_model *model);
/* The identity of the model's files (config.json and every weight file's
 * name, size, header and content; artifacts/fingerprint.h): 32 lowercase
 * hex digits and a NUL into `out`. The same files give the same value in
 * every process; a re-quantized or converted file another. The first call
 * may read every weight file once (its content hash is then cached beside
 * the file, or under $SPINDLE_CACHE_DIR / ~/.cache/spindle when the model
 * directory is read-only); later calls return the model's copy.
 * Thread-safe. */
#define SPINDLE_FINGERPRINT_LEN 32
spindle_status spindle_model_fingerprint(spindle_model *model,
                                         char out[SPINDLE_FINGERPRINT_LEN + 1],
                                         spindle_error *err);
int spindle_model_vocab_size(const spindle_model *model);
/* The width of a hidden state (spindle_batch_entry.hidden rows). */
int spindle_model_hidden_size(const spindle_model *model);
/* Whether the model's files carry a multi-token-prediction head its
 * family can run (SPINDLE_SPEC_MTP). */
bool spindle_model_has_mtp(const spindle_model *model);
int spindle_model_context_length(const spindle_model *model);
/* false for an encoder (BERT): no logits, so no generation; only
 * spindle_embed runs it. */
bool spindle_model_has_logits(const spindle_model *model);
/* End-of-sequence ids (generation_config.json / config.json, or the GGUF's
 * eos/eot/eom ids and end-of-turn tokens): returns their count and, when
 * `ids` is not NULL, points *ids at them. The array is owned by the model
 * and valid until spindle_model_free. */
int spindle_model_eos_ids(const spindle_model *model, const int32_t **ids);

/* A JSON description of the parsed config, tensor dtypes, quantization,
 * parameter count and bytes (what `spindle info` prints), into *json (free
 * with spindle_free). Thread-safe. */
spindle_status spindle_model_describe(const spindle_model *model, char **json,
                                      spindle_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_MODEL_H */
