/*
 * spindle.h — the public API of libspindle, a CPU inference engine for
 * large language models (Hugging Face / MLX safetensors, GGUF).
 *
 * Conventions
 *  - Every handle is opaque and created/destroyed by a matching pair of calls
 *    (spindle_X_load / spindle_X_free). Free functions accept NULL.
 *  - Every fallible call returns a spindle_status and, when it is not
 *    SPINDLE_OK, fills the caller's spindle_error with one line of text naming
 *    what is wrong (file, tensor, key...). `err` may be NULL.
 *  - Library code never exits or aborts the process.
 *  - Memory handed to the caller (token arrays, strings) is released with
 *    spindle_free(). A returned `const` pointer is borrowed: it belongs to
 *    the handle it came from and stays valid as each call says, at most
 *    until that handle is freed; never free it.
 *  - Threads. Each call says what it allows ("Thread-safe: ..."). In short:
 *    a model's read-only queries and a tokenizer (all its calls) may be used
 *    from several threads at once; spindle_forward and spindle_generate run
 *    one at a time per model (they use the model's scratch and thread pool),
 *    whichever sequences they touch; a sequence, a sampler and a
 *    detokenizer belong to one thread at a time. A step engine takes its
 *    model's forward pass over and accepts requests from any thread
 *    (submit, cancel), stepping on one. Distinct handles never
 *    share state, and nothing is global except what the calls that take no
 *    handle return (static strings).
 */
#ifndef SPINDLE_H
#define SPINDLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPINDLE_VERSION "0.1.0"

/* ------------------------------------------------------------------ errors */

typedef enum spindle_status {
    SPINDLE_OK = 0,
    SPINDLE_ERR_ARGUMENT,     /* the caller passed something invalid */
    SPINDLE_ERR_IO,           /* a file is missing or unreadable */
    SPINDLE_ERR_FORMAT,       /* a file is malformed (header, JSON, shapes) */
    SPINDLE_ERR_UNSUPPORTED,  /* valid input that Spindle does not handle */
    SPINDLE_ERR_MEMORY,       /* an allocation failed */
    SPINDLE_ERR_LIMIT,        /* a size, recursion or context limit was hit */
    SPINDLE_ERR_TEMPLATE,     /* a chat template failed to parse or render */
    SPINDLE_ERR_INTERNAL
} spindle_status;

typedef struct spindle_error {
    spindle_status status;
    char message[512];
} spindle_error;

/* Human-readable name of a status ("format error", ...): a static string.
 * Thread-safe. */
const char *spindle_status_name(spindle_status status);

/* Release memory returned by the library (token arrays, strings); NULL is
 * fine. Thread-safe. */
void spindle_free(void *ptr);

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
     * their own fixed-size state beside it). 0: what fits beside the
     * weights in available memory (90% of it), at most 16 full contexts.
     * Pages are committed only as blocks are first written. A budget that
     * holds no block fails the load with SPINDLE_ERR_LIMIT. */
    size_t kv_bytes;
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
} spindle_load_options;

#define SPINDLE_DEFAULT_PROMPT_CACHE_DISK_BYTES ((size_t)4 << 30)

/* The model's KV block pool: its size and what its blocks hold now. */
typedef struct spindle_kv_pool_info {
    size_t budget_bytes;     /* the pool's byte budget */
    size_t block_bytes;      /* one block, every full-KV layer */
    int block_tokens;        /* positions per block */
    int blocks;              /* in all */
    int used;                /* referenced by a sequence */
    int cached;              /* unreferenced prefix-index blocks (LRU) */
    int free;                /* the rest */
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

/* One sequence's share of a batched forward pass: its new tokens are
 * appended at positions seq_length .. seq_length + n_tokens - 1. */
typedef struct spindle_batch_entry {
    spindle_seq *seq;
    const int32_t *tokens;
    int n_tokens;
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

/* ---------------------------------------------------------------- adapters
 *
 * A LoRA adapter adds scale * B·(A·x) to the output of some of a model's
 * projections (q/k/v/o/gate/up/down_proj; on MoE models also the router
 * and each routed expert's gate/up/down_proj, with a pair per expert),
 * whatever the base weights' storage type; the base weights are never changed, so any number of
 * adapters can be mounted on one model and each batch entry or request
 * picks one (or none). */
typedef struct spindle_adapter spindle_adapter;

/* `path`: a PEFT adapter directory (adapter_config.json +
 * adapter_model.safetensors), an mlx-lm one (adapter_config.json with
 * lora_parameters + adapters.safetensors), or llama.cpp's LoRA GGUF file
 * (general.type "adapter", of the model's architecture; scale
 * adapter.lora.alpha / rank, 1 without alpha; *_norm.weight tensors
 * skipped as llama.cpp does). Every tensor must be a lora_A /
 * lora_B (lora_a / lora_b) pair of a supported projection of a layer the
 * model has, of the config's rank and the projection's shape; otherwise
 * one line naming the tensor (SPINDLE_ERR_FORMAT or _UNSUPPORTED), and
 * SPINDLE_ERR_IO for a missing file. The adapter holds f32 copies of its
 * matrices. Thread-safe, also while the model runs a forward pass or an
 * engine (it reads only the model's immutable shapes). */
spindle_status spindle_adapter_load(spindle_model *model, const char *path,
                                    spindle_adapter **out, spindle_error *err);
/* Drop the caller's reference. Engine requests that named the adapter keep
 * it alive until they end; it is freed with the last reference. Thread-safe
 * (any thread, also while requests use it); NULL is fine. Every reference
 * must be gone before the model is freed. */
void spindle_adapter_unload(spindle_adapter *adapter);
/* One adapter whose terms are the sum of n adapters' (each times its own
 * scale and scales[i], 0 or a NULL `scales` reading as 1): what applying
 * them all at once gives (`spindle run --lora A --lora B`). The inputs are
 * copied; unload them and the result independently. Thread-safe as
 * spindle_adapter_load. */
spindle_status spindle_adapter_stack(spindle_model *model,
                                     const spindle_adapter *const *adapters,
                                     const float *scales, int n,
                                     spindle_adapter **out, spindle_error *err);
/* The adapter's own scale (lora_alpha / r, / sqrt(r) with rsLoRA,
 * mlx-lm's scale, or a GGUF's alpha / r) and rank; 0 for NULL.
 * Thread-safe. */
float spindle_adapter_scale(const spindle_adapter *adapter);
int spindle_adapter_rank(const spindle_adapter *adapter);
/* What state computed under `adapter` (NULL: the base model) at a
 * request's `scale` (0 reads as 1, as in spindle_gen_params) depends on:
 * a hash (XXH3-128) of the adapter's own scale and every matrix's shape
 * and values, equal for the same files loaded twice, then the request's
 * scale. Writes and returns SPINDLE_ADAPTER_KEY_BYTES bytes, 0 for no
 * adapter. State is reused (a checkpoint resumed, a slot's prefix) only
 * under an equal key. Thread-safe. */
#define SPINDLE_ADAPTER_KEY_BYTES 20
size_t spindle_adapter_key(const spindle_adapter *adapter, float scale,
                           unsigned char out[SPINDLE_ADAPTER_KEY_BYTES]);

/* ----------------------------------------------------------------- sampling */

typedef struct spindle_sampler_params {
    float temperature;     /* 0: greedy (argmax) */
    int top_k;             /* 0: off */
    float top_p;           /* 0 or 1: off */
    float min_p;           /* 0: off */
    int min_tokens_to_keep;/* for min_p; default 1 */
    uint64_t seed;         /* same seed -> same tokens */
    /* XTC ("exclude top choices"): with this probability per step, drop
     * every token above xtc_threshold except the least likely of them. */
    float xtc_probability; /* 0: off */
    float xtc_threshold;   /* default 0.1 */
    const int32_t *xtc_special_tokens; /* never dropped (copied) */
    int n_xtc_special_tokens;
} spindle_sampler_params;

/* The defaults of mlx_lm.generate: greedy. Thread-safe. */
spindle_sampler_params spindle_sampler_defaults(void);

/* A sampler holds its random stream and scratch: one thread at a time per
 * sampler; distinct samplers are independent. spindle_sampler_new copies
 * everything it keeps from `params` (NULL: the defaults) and validates the
 * ranges mlx-lm checks. */
typedef struct spindle_sampler spindle_sampler;

spindle_status spindle_sampler_new(const spindle_sampler_params *params,
                                   spindle_sampler **out, spindle_error *err);
void spindle_sampler_free(spindle_sampler *sampler);
/* Choose a token from raw logits. `logits` is used as scratch (clobbered).
 * If `logprob` is not NULL it receives log-softmax(logits)[token] before the
 * sampler's own transforms, as mlx-lm reports it. */
spindle_status spindle_sampler_sample(spindle_sampler *sampler, float *logits,
                                      int n_vocab, int32_t *token,
                                      float *logprob, spindle_error *err);

/* --------------------------------------------------------------- generation */

/* A generation's durable state (see "checkpoints" below). The callback
 * runs on the stepping thread between forward passes; `ck` is borrowed for
 * the call (attach extensions, save it; do not free it). */
typedef struct spindle_checkpoint spindle_checkpoint;
typedef void (*spindle_checkpoint_fn)(spindle_checkpoint *ck, void *user);
/* Lossless speculative decoding (src/generation/speculative.c): a drafter
 * proposes up to num_draft_tokens tokens, the target verifies them all in
 * one forward pass as extra rows of the step's batch, and the output
 * distribution stays exactly the target's at any temperature. */
typedef enum spindle_spec_mode {
    SPINDLE_SPEC_NONE = 0,
    SPINDLE_SPEC_NGRAM,    /* prompt lookup over prompt ++ generated */
    SPINDLE_SPEC_DRAFT,    /* a smaller draft model with the same tokenizer */
    SPINDLE_SPEC_MTP       /* the model's own multi-token-prediction head
                              (mtp.* weights of Qwen3.5-class checkpoints) */
} spindle_spec_mode;

#define SPINDLE_MAX_DRAFT_TOKENS 32
#define SPINDLE_DEFAULT_DRAFT_TOKENS 10

typedef struct spindle_spec_params {
    spindle_spec_mode mode;
    int num_draft_tokens;  /* K at most, 1..SPINDLE_MAX_DRAFT_TOKENS; 0:
                              SPINDLE_DEFAULT_DRAFT_TOKENS */
    /* A round drafts nothing or at least this many tokens (llama-server's
     * speculative.n_min: a shorter draft is not verified); 0..K, 0: no
     * floor. */
    int min_draft_tokens;
    int ngram_max;         /* longest k-gram matched (0: 3) */
    int ngram_min;         /* shortest (0: 1); 1 <= min <= max <= 8 */
    /* SPINDLE_SPEC_DRAFT: the draft model (borrowed; it must outlive the
     * request, and nothing else may run it while the request runs). */
    spindle_model *draft_model;
    /* true: always draft as many tokens as the drafter offers (up to K);
     * false, the default: the adaptive rule picks K per step (README). */
    bool fixed_k;
} spindle_spec_params;

/* "none", "ngram", "draft"; NULL outside the enum. Thread-safe. */
const char *spindle_spec_mode_name(spindle_spec_mode mode);

/* Whether `draft` may draft for `target`: their tokenizers (from their
 * directories) encode a probe text alike, or neither has one; else
 * SPINDLE_ERR_ARGUMENT saying which. Vocabulary sizes are not compared
 * (the caller may warn). Thread-safe. */
spindle_status spindle_spec_check_draft(const spindle_model *target,
                                        const spindle_model *draft,
                                        spindle_error *err);

/* What speculation did for one request (all zero without it). */
typedef struct spindle_spec_stats {
    int64_t drafted;           /* draft tokens verified */
    int64_t accepted;          /* of them accepted */
    int64_t target_forwards;   /* decode rounds (forward passes with a
                                  decode row or verify rows of the request) */
    int64_t decode_tokens;     /* tokens those rounds produced */
    int64_t forced;            /* tokens the grammar forced, fed as a
                                  draft (jump-forward, the constraint
                                  drafter); not in drafted/accepted */
    int64_t grammar_cut;       /* drafter tokens dropped before
                                  verification: the grammar rejects them */
    /* per draft position j (0-based): verified at j, accepted at j */
    int64_t drafted_at[SPINDLE_MAX_DRAFT_TOKENS];
    int64_t accepted_at[SPINDLE_MAX_DRAFT_TOKENS];
} spindle_spec_stats;

typedef struct spindle_gen_params {
    int max_tokens;           /* generated tokens at most */
    int prefill_chunk;        /* prompt tokens per forward pass; 0: 512 */
    spindle_sampler_params sampler;
    bool ignore_eos;
    /* Extra ids that end generation besides the model's EOS ids (e.g. the
     * tokenizer's eos or a chat template's end-of-turn token). Borrowed. */
    const int32_t *stop_ids;
    int n_stop_ids;
    /* Logits processors, applied in mlx-lm's order before sampling, over
     * the prompt and the tokens generated so far. Context sizes count the
     * most recent tokens (default 20; 0: all). */
    const int32_t *logit_bias_ids;    /* borrowed, n_logit_bias entries */
    const float *logit_bias_values;
    int n_logit_bias;
    float repetition_penalty;         /* 0 or 1: off; >1 discourages */
    int repetition_context_size;
    float presence_penalty;           /* 0: off */
    int presence_context_size;
    float frequency_penalty;          /* 0: off */
    int frequency_context_size;
    /* Durable checkpoints (see "checkpoints" below): every
     * checkpoint_every generated tokens (0: never), between forward passes,
     * on_checkpoint receives the whole state of the generation. */
    int checkpoint_every;
    spindle_checkpoint_fn on_checkpoint;
    void *checkpoint_user;
    /* Continue this checkpoint instead of starting anew: the prompt, the
     * tokens generated so far, the sampler's random stream and every
     * generation parameter above come from it (the caller's prompt and
     * those fields are ignored); the callbacks and checkpoint_every are
     * the caller's.
     * Borrowed: valid until the request's on_finish (spindle_generate:
     * until it returns). The first token reported is the one that follows
     * the checkpoint; the sequence must be fresh (length 0). */
    const spindle_checkpoint *resume;
    /* A LoRA adapter of the model (NULL: none) and the factor on its own
     * scale (0 reads as 1). An engine request holds a reference from
     * submit to its end, so the caller may unload the adapter at once.
     * A resumed request takes the caller's, like the grammar: its
     * checkpoint records the adapter's identity (a hash of its scale and
     * values) and this factor, and a resume under another adapter, another
     * factor, or none where there was one (or the reverse) fails with
     * SPINDLE_ERR_ARGUMENT. */
    const struct spindle_adapter *adapter;
    float adapter_scale;
    spindle_spec_params spec;         /* zero: no speculation */
    /* Structured output (NULL: none). Borrowed: it must outlive the
     * request. Its mask applies before sampling and logprobs; the EOS and
     * stop ids are allowed only where the grammar is complete, and the
     * request ends (SPINDLE_STOP_EOS, no token) once nothing can follow.
     * A resumed request takes the caller's grammar (pass the one the
     * checkpoint's run had): its matcher is replayed through the tokens
     * generated before the checkpoint. */
    const struct spindle_grammar *grammar;
    /* Jump-forward with a grammar: a span where the grammar allows exactly
     * one token at each position is fed in one multi-token forward (its
     * rows verified like speculative drafts, each token still through the
     * sampler, logprobs and callbacks). 0: on when the sampler is greedy
     * (temperature 0), off otherwise; 1: on; -1: off. A speculating
     * request always offers such spans as its draft. */
    int jump_forward;
} spindle_gen_params;

/* Thread-safe. */
spindle_gen_params spindle_gen_defaults(void);

/* Why a generation (spindle_generate, an engine request) stopped. */
typedef enum spindle_stop_reason {
    SPINDLE_STOP_LENGTH = 0, /* "length": max_tokens tokens were generated */
    SPINDLE_STOP_EOS,        /* "eos": a model EOS id or one of stop_ids was
                                generated (it ends the returned tokens) */
    SPINDLE_STOP_CALLBACK,   /* "callback": the callback returned false (the
                                token it was given is kept) */
    SPINDLE_STOP_CONTEXT,    /* "context": the sequence filled the model's
                                context length (spindle_model_context_length) */
    SPINDLE_STOP_ERROR,      /* "error": the call failed; see its error */
    SPINDLE_STOP_CANCELLED   /* "cancelled": spindle_engine_cancel, or the
                                engine was freed before the request ended */
} spindle_stop_reason;

/* The quoted names above, as `spindle run --json` prints them (static
 * strings); NULL for a value outside the enum. Thread-safe. */
const char *spindle_stop_reason_name(spindle_stop_reason reason);

typedef struct spindle_gen_stats {
    int prompt_tokens;
    /* Of prompt_tokens, those whose KV blocks came from the model's prefix
     * index instead of being computed (whole blocks of
     * spindle_kv_pool_info.block_tokens, never the last prompt token; on
     * hybrid and sliding-window models up to the last shared block whose
     * end has a kept state of the other layers, docs/ARCHITECTURE.md). */
    int cached_tokens;
    int generated_tokens;
    double prefill_seconds;
    double decode_seconds;
    double prefill_tps;
    double decode_tps;
    int64_t peak_rss_bytes;
    spindle_stop_reason stop_reason;
    spindle_spec_stats spec;
    /* Submit to the first generated token: the prefix mapping (including
     * blocks read from the on-disk prompt cache) and the prefill. */
    double ttft_seconds;
} spindle_gen_stats;

/* Called with each generated token; return false to stop. */
typedef bool (*spindle_token_callback)(int32_t token, void *user);

/* Prefill `prompt` (in chunks) into `seq`, then decode until EOS or
 * max_tokens: one request through a private spindle_engine stepped on the
 * calling thread, so its tokens are exactly the engine's. The generated ids go to `*tokens` (free with spindle_free).
 * If `prompt_logits` is not NULL it receives the logits of the last prompt
 * position (vocab floats). `stats` (may be NULL) is filled on success and
 * on failure. Thread-safety: as spindle_forward (one per model at a time);
 * the callback runs on the calling thread. */
spindle_status spindle_generate(spindle_model *model, spindle_seq *seq,
                                const int32_t *prompt, int n_prompt,
                                const spindle_gen_params *params,
                                spindle_token_callback callback, void *user,
                                int32_t **tokens, int *n_tokens,
                                float *prompt_logits, spindle_gen_stats *stats,
                                spindle_error *err);

/* ------------------------------------------------------------------ engine
 *
 * A step engine runs many requests on one model at once (continuous
 * batching). Each spindle_engine_step is ONE spindle_forward over several
 * batch entries, so the weights are read once for all sequences:
 *   1. one decode row for every running sequence that has a token to feed;
 *   2. then prompt chunks of the sequences still prefilling, oldest first,
 *      up to max_batch_tokens rows in all (chunked prefill: a long prompt
 *      takes several steps and never stalls the others' decodes);
 *   3. then new requests, first come first served, while fewer than
 *      max_seqs are running and the token budget lasts.
 * Each request has its own sampler (its own seeded random stream), logits
 * processors, stop ids and sequence, so its tokens do not depend on what
 * else is in the batch (up to summation order in the logits).
 *
 * Threads. spindle_engine_submit, spindle_engine_cancel and
 * spindle_engine_counts are thread-safe (a locked queue) and may be called
 * from any thread, also from inside the callbacks. The steps run on one
 * thread: the engine's own thread in background mode, else whichever thread
 * calls spindle_engine_step (one at a time). The callbacks run on that
 * stepping thread, between forward passes; they stall every request while
 * they run, so keep them short, and they must not call spindle_engine_step
 * or spindle_engine_free (only submit, cancel and counts).
 *
 * The engine uses the model's forward scratch and thread pool: while an
 * engine exists, nothing else runs spindle_forward or spindle_generate on
 * its model. The model must outlive the engine. */
typedef struct spindle_engine spindle_engine;

typedef struct spindle_engine_options {
    int max_seqs;          /* requests running at once; 0: 16 */
    int max_batch_tokens;  /* rows per step (decode rows + prompt chunks);
                              0: 512; must be >= max_seqs */
    /* true: the engine owns a thread that steps while there is work and
     * sleeps when idle; spindle_engine_step is then refused. false: the
     * caller drives it with spindle_engine_step. */
    bool background;
    /* true: never map cached prompt blocks (every prompt is computed in
     * full; the blocks are still published for others). */
    bool no_prefix_cache;
} spindle_engine_options;

/* max_seqs 16, max_batch_tokens 512, no background thread. Thread-safe. */
spindle_engine_options spindle_engine_defaults(void);

/* `options` NULL: the defaults. Allocates the step scratch (max_seqs
 * logits rows) and, in background mode, starts the thread. Thread-safe as
 * spindle_forward is (one user of the model at a time). */
spindle_status spindle_engine_new(spindle_model *model,
                                  const spindle_engine_options *options,
                                  spindle_engine **out, spindle_error *err);
/* Stops the thread (after the step in progress), then ends every request
 * not yet finished (queued or running) with SPINDLE_STOP_CANCELLED, its
 * on_finish running on the thread that stepped (the engine's own thread in
 * background mode, else the caller of free). Submits made during or after
 * free are refused. Not concurrently with spindle_engine_step; no other
 * call may use the engine once free has returned. */
void spindle_engine_free(spindle_engine *engine);

/* Engine-assigned, unique per engine, counting from 1. */
typedef uint64_t spindle_request_id;

/* The most alternatives a request can ask for (OpenAI's top_logprobs). */
#define SPINDLE_MAX_TOP_LOGPROBS 20

typedef struct spindle_token_logprob {
    int32_t token;
    float logprob;
} spindle_token_logprob;

/* What on_token receives for each generated token. Every pointer is
 * borrowed and valid only during the callback. */
typedef struct spindle_token_info {
    int32_t token;
    /* log-softmax of the logits after the logits processors and before the
     * sampler's filters and temperature: what mlx-lm reports. */
    float logprob;
    int index;        /* 0 for the first generated token */
    /* The request's top_logprobs most likely tokens of that same
     * distribution, most likely first (ties: lower id first). */
    int n_top;
    const spindle_token_logprob *top;
    /* want_logits: the raw logits (vocab floats) this token was chosen from,
     * before any processor (index 0: the last prompt position); else
     * NULL. */
    const float *logits;
} spindle_token_info;

typedef struct spindle_request_stats {
    int prompt_tokens;
    int cached_tokens;       /* as in spindle_gen_stats */
    int generated_tokens;
    double queue_seconds;    /* submit -> first prompt chunk in a step */
    double ttft_seconds;     /* submit -> first generated token */
    double prefill_seconds;  /* first prompt chunk -> first token */
    double decode_seconds;   /* first token -> finish */
    double prefill_tps;      /* prompt_tokens / prefill_seconds */
    double decode_tps;       /* tokens after the first / decode_seconds */
    double total_seconds;    /* submit -> finish */
    spindle_spec_stats spec; /* params.spec.mode != SPINDLE_SPEC_NONE */
} spindle_request_stats;

/* What on_finish receives, exactly once per accepted request. Pointers are
 * borrowed and valid only during the callback. */
typedef struct spindle_request_result {
    spindle_stop_reason stop_reason;
    /* SPINDLE_OK unless stop_reason is SPINDLE_STOP_ERROR: then why this
     * request failed (one line in `error`); the other requests go on. */
    spindle_status status;
    const char *error;       /* "" when status is SPINDLE_OK */
    const int32_t *tokens;   /* every generated token, in order */
    int n_tokens;
    spindle_request_stats stats;
} spindle_request_result;

/* Return false to stop the request (stop reason "callback"; this token is
 * kept). */
typedef bool (*spindle_request_token_fn)(spindle_request_id id,
                                         const spindle_token_info *info,
                                         void *user);
typedef void (*spindle_request_finish_fn)(spindle_request_id id,
                                          const spindle_request_result *result,
                                          void *user);

typedef struct spindle_request {
    const int32_t *prompt;   /* copied by submit; at least one token */
    int n_prompt;
    /* NULL: spindle_gen_defaults(). Copied by submit, with every array it
     * points to. The engine's max_batch_tokens replaces prefill_chunk. */
    const spindle_gen_params *params;
    int top_logprobs;        /* 0..SPINDLE_MAX_TOP_LOGPROBS alternatives */
    bool want_logits;        /* give on_token the raw logits of each step */
    /* NULL: a fresh sequence, made at admission and freed at the end.
     * Otherwise a caller-owned sequence of the same model to continue (as
     * spindle_generate does): the prompt goes in at its current length;
     * the caller must not touch it until on_finish has run. It ends holding
     * the prompt and every generated token except the last (after a cancel
     * or an error: what was computed until then). */
    spindle_seq *seq;
    spindle_request_token_fn on_token;   /* may be NULL */
    spindle_request_finish_fn on_finish; /* may be NULL */
    void *user;                          /* passed to both callbacks */
} spindle_request;

/* Queue a request; `*id` (may be NULL) receives its id. Validates the
 * prompt (ids in the vocabulary), the parameters (as spindle_sampler_new
 * and the logits processors do) and top_logprobs at once, with
 * SPINDLE_ERR_ARGUMENT; a prompt that can never fit (longer than the
 * context left in the sequence) fails with SPINDLE_ERR_LIMIT; a `seq`
 * that an unfinished request holds is SPINDLE_ERR_ARGUMENT, and so is a
 * submit during spindle_engine_free (a `seq` of another model is accepted
 * and ends the request with an error at its first step). On error
 * nothing is queued and no callback runs; on success on_finish will run
 * exactly once. In background mode the callbacks may run before submit
 * returns: find the caller's state through `user`, not through *id.
 * Thread-safe. */
spindle_status spindle_engine_submit(spindle_engine *engine,
                                     const spindle_request *request,
                                     spindle_request_id *id,
                                     spindle_error *err);
/* Ask that request `id` stop: at the start of the next step it ends with
 * SPINDLE_STOP_CANCELLED, queued or running (a sequence the engine made
 * is freed then; a caller's keeps what was computed). True when
 * the request had not finished yet (a request finishing in the step that
 * is running keeps its own stop reason); false for an unknown or finished
 * id. Thread-safe. */
bool spindle_engine_cancel(spindle_engine *engine, spindle_request_id id);

/* Requests queued (not yet admitted) and running; either pointer may be
 * NULL. A snapshot, taken between steps. Thread-safe. */
void spindle_engine_counts(spindle_engine *engine, int *queued, int *running);

/* One scheduler step: cancellations, admission, one batched forward pass,
 * sampling and the callbacks. `*active` (may be NULL) receives the number
 * of requests still queued or running afterwards; 0 means idle (the step
 * did nothing more than drain the queue). A failing forward pass is retried
 * per request so that only the requests that fail alone end in error;
 * the call itself fails only on invalid use (NULL, or background mode).
 * One thread at a time; not in background mode. */
spindle_status spindle_engine_step(spindle_engine *engine, int *active,
                                   spindle_error *err);

/* ------------------------------------------------------------- checkpoints
 *
 * A checkpoint is the whole state of a generation between two forward
 * passes, so that it can continue in another process exactly as it would
 * have: the model's fingerprint, the prompt and the tokens generated so far
 * (the last of them sampled but not yet fed to the model), the sequence
 * state (a snapshot: no rewind needed, so recurrent layers resume too), the
 * sampler's random stream, every generation parameter, and named extension
 * blobs for state the engine does not own (a server's stop-string matcher,
 * a grammar matcher, a drafter's history). The engine makes one every
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
 * matcher); reserved: "grammar", "drafter". */
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

/* ---------------------------------------------------------------- tokenizer */

typedef struct spindle_tokenizer spindle_tokenizer;

/* `path`: a directory holding tokenizer.json (+ tokenizer_config.json,
 * optionally chat_template.jinja), or a model directory / repo id; or a
 * .gguf file (or a directory with one .gguf and no tokenizer.json), whose
 * tokenizer.ggml.* metadata gives llama.cpp's tokenizer: encode is
 * llama_tokenize with parse_special=true and add_special as given, decode
 * llama_detokenize (skip_special: remove_special and no unparse_special). */
spindle_status spindle_tokenizer_load(const char *path,
                                      spindle_tokenizer **out,
                                      spindle_error *err);
/* Thread-safety: every call below that takes a `const spindle_tokenizer *`
 * may run concurrently on one tokenizer (its caches are locked);
 * spindle_tokenizer_free must not overlap any of them, nor outlive a
 * detokenizer made from the tokenizer. */
void spindle_tokenizer_free(spindle_tokenizer *tok);

/* Encode UTF-8 text. add_special: add BOS/EOS etc. per the post-processor
 * (HF `add_special_tokens=True`). */
spindle_status spindle_tokenizer_encode(const spindle_tokenizer *tok,
                                        const char *text, size_t len,
                                        bool add_special, int32_t **ids,
                                        size_t *n_ids, spindle_error *err);
/* Decode ids to UTF-8 text (NUL-terminated). */
spindle_status spindle_tokenizer_decode(const spindle_tokenizer *tok,
                                        const int32_t *ids, size_t n_ids,
                                        bool skip_special, char **text,
                                        size_t *len, spindle_error *err);
int spindle_tokenizer_vocab_size(const spindle_tokenizer *tok);
/* -1 when the tokenizer has none. */
int32_t spindle_tokenizer_bos_id(const spindle_tokenizer *tok);
int32_t spindle_tokenizer_eos_id(const spindle_tokenizer *tok);
/* The text of a token id (raw vocabulary form), or NULL when the id is out
 * of range or tok is NULL. Owned by the tokenizer, valid until it is
 * freed. */
const char *spindle_tokenizer_id_to_token(const spindle_tokenizer *tok,
                                          int32_t id);

/* Streaming detokenizer: feed ids one at a time, receive the text that is
 * now final. Pieces never split a UTF-8 sequence and concatenate to exactly
 * the full decode. It borrows the tokenizer (free it first); one thread at
 * a time per detokenizer. */
typedef struct spindle_detokenizer spindle_detokenizer;

spindle_status spindle_detokenizer_new(const spindle_tokenizer *tok,
                                       bool skip_special,
                                       spindle_detokenizer **out,
                                       spindle_error *err);
void spindle_detokenizer_free(spindle_detokenizer *detok);
/* `*piece` (NUL-terminated, possibly empty) is owned by the detokenizer and
 * stays valid until its next push, flush or free. */
spindle_status spindle_detokenizer_push(spindle_detokenizer *detok,
                                        int32_t id, const char **piece,
                                        spindle_error *err);
/* Text still held back at the end of the stream; *piece as for push. */
spindle_status spindle_detokenizer_flush(spindle_detokenizer *detok,
                                         const char **piece,
                                         spindle_error *err);

/* ------------------------------------------------------------ chat template */

/* Render the tokenizer's chat template. JSON arguments are UTF-8 JSON text:
 * messages (array), tools (array or NULL), extra_vars (object of extra
 * template variables such as {"enable_thinking": false}, or NULL).
 * `template_name` selects one of several named templates (NULL: default).
 * The text goes to *out (free with spindle_free). Thread-safe on a shared
 * tokenizer. */
spindle_status spindle_chat_render(const spindle_tokenizer *tok,
                                   const char *messages_json,
                                   const char *tools_json,
                                   bool add_generation_prompt,
                                   const char *extra_vars_json,
                                   const char *template_name, char **out,
                                   spindle_error *err);

/* ------------------------------------------------------------------ grammar
 * Structured output: a grammar constrains which tokens may be sampled.
 * GBNF is llama.cpp's grammar format; a JSON Schema is converted to GBNF
 * as llama.cpp's json-schema-to-grammar does (docs/ARCHITECTURE.md lists
 * the supported subset); JSON_OBJECT is any JSON value. */

/* Every token's byte string as a trie, built once per tokenizer and shared
 * by the grammars compiled against it. Immutable after new: thread-safe;
 * it must outlive every grammar made from it. */
typedef struct spindle_grammar_vocab spindle_grammar_vocab;
spindle_status spindle_grammar_vocab_new(const spindle_tokenizer *tok,
                                         spindle_grammar_vocab **out,
                                         spindle_error *err);
void spindle_grammar_vocab_free(spindle_grammar_vocab *vocab);

typedef enum spindle_grammar_kind {
    SPINDLE_GRAMMAR_GBNF = 0,
    SPINDLE_GRAMMAR_JSON_SCHEMA,
    SPINDLE_GRAMMAR_JSON_OBJECT   /* text ignored (may be NULL) */
} spindle_grammar_kind;

/* A compiled grammar. A text that does not parse, is unsupported or is
 * over the limits fails with SPINDLE_ERR_FORMAT / SPINDLE_ERR_LIMIT and a
 * one-line message naming where and why. Thread-safe, shared by any number
 * of requests; it must outlive them. Its matchers share one lazily built
 * automaton and mask cache (under a lock), so a grammar kept for later
 * requests makes their masks cheaper. Reference counted: new gives one
 * reference, retain another (it returns `grammar`), and free drops one;
 * the last frees it. */
typedef struct spindle_grammar spindle_grammar;
spindle_status spindle_grammar_new(const spindle_grammar_vocab *vocab,
                                   spindle_grammar_kind kind, const char *text,
                                   size_t len, spindle_grammar **out,
                                   spindle_error *err);
spindle_grammar *spindle_grammar_retain(spindle_grammar *grammar);
void spindle_grammar_free(spindle_grammar *grammar);
/* The vocabulary size its masks cover (the tokenizer's). Thread-safe. */
int spindle_grammar_vocab_size(const spindle_grammar *grammar);
/* The GBNF the grammar was built from (a schema's conversion), owned by
 * the grammar. */
const char *spindle_grammar_gbnf(const spindle_grammar *grammar);

/* One generation's position in a grammar. One thread at a time per
 * matcher; it borrows the grammar. */
typedef struct spindle_grammar_matcher spindle_grammar_matcher;
spindle_status spindle_grammar_matcher_new(const spindle_grammar *grammar,
                                           spindle_grammar_matcher **out,
                                           spindle_error *err);
void spindle_grammar_matcher_free(spindle_grammar_matcher *m);
/* bits[t / 32] bit t % 32 set iff token t may come next (the tokenizer's
 * vocabulary size in bits, caller's buffer). Special tokens are never set:
 * whether an end-of-sequence id may come is spindle_grammar_matcher_accepting. */
spindle_status spindle_grammar_matcher_mask(spindle_grammar_matcher *m,
                                            uint32_t *bits, spindle_error *err);
/* Advance by one token; SPINDLE_ERR_ARGUMENT (state unchanged) when the
 * grammar rejects it. */
spindle_status spindle_grammar_matcher_accept(spindle_grammar_matcher *m,
                                              int32_t token, spindle_error *err);
/* The matcher's position as a small id, and a return to a position it
 * had earlier (ids stay valid for the matcher's life): how speculation
 * tries a draft against the grammar and undoes it. A negative or unknown
 * id is ignored; ids are not checked against the matcher they came from
 * (matchers of one grammar may share them). */
int32_t spindle_grammar_matcher_state(const spindle_grammar_matcher *m);
void spindle_grammar_matcher_restore(spindle_grammar_matcher *m, int32_t state);
/* True when the tokens so far form a complete sentence of the grammar. */
bool spindle_grammar_matcher_accepting(const spindle_grammar_matcher *m);
/* True when nothing but the end may follow. */
bool spindle_grammar_matcher_finished(spindle_grammar_matcher *m);
/* -------------------------------------------------------------- embeddings
 * Sentence embeddings from an encoder (BERT) or a decoder embedding model
 * (Qwen3-Embedding style), laid out as sentence-transformers saves them:
 * modules.json (Transformer, Pooling, optional Normalize),
 * 1_Pooling/config.json (mean, CLS or last-token pooling),
 * sentence_bert_config.json (max_seq_length) and
 * config_sentence_transformers.json (named prompts). An encoder without
 * modules.json pools by mean, unnormalized (sentence-transformers' default
 * for a bare model); a decoder without it is not an embedding model. */
typedef struct spindle_embedder spindle_embedder;

typedef struct spindle_embedder_options {
    int n_threads;   /* the embedder's own threads; <= 0: every core */
    int max_tokens;  /* truncation length; <= 0: max_seq_length, else the
                        model's context; never past the context (an
                        encoder's: its position table) */
} spindle_embedder_options;

/* Reads the sentence-transformers files of `model`'s directory; fails with
 * one line naming the file and key for a bad one, and with
 * SPINDLE_ERR_UNSUPPORTED for a model that is not an embedding model. The
 * embedder borrows the model (free the embedder first). options may be
 * NULL. Safe concurrently with any model call. */
spindle_status spindle_embedder_new(spindle_model *model,
                                    const spindle_embedder_options *options,
                                    spindle_embedder **out,
                                    spindle_error *err);
void spindle_embedder_free(spindle_embedder *e);
/* The embedding width; 0 for NULL. */
int spindle_embedder_dim(const spindle_embedder *e);
/* Tokens an input keeps (longer ones are truncated); 0 for NULL. */
int spindle_embedder_max_tokens(const spindle_embedder *e);

/* One input: token ids (special tokens included, as encoded with
 * add_special), or text to be encoded with the embedder's tokenizer. */
typedef struct spindle_embed_input {
    const int32_t *tokens;  /* NULL: use text */
    int n_tokens;
    const char *text;       /* UTF-8, NUL-terminated */
} spindle_embed_input;

typedef struct spindle_embed_request {
    const spindle_embed_input *inputs;
    int n_inputs;
    /* Needed for text inputs; borrowed for the call. */
    const spindle_tokenizer *tokenizer;
    /* Prepended to every text input: a literal prompt, else the named one
     * of config_sentence_transformers.json (NULL: the file's default
     * prompt, if any). Unknown names fail. */
    const char *prompt;
    const char *prompt_name;
    /* Matryoshka truncation to the first `dimensions` values (<= 0: all),
     * renormalized when the model normalizes. */
    int dimensions;
} spindle_embed_request;

/* Embeds every input in input order into out[n_inputs][width] (width:
 * dimensions, else spindle_embedder_dim), many inputs per forward pass.
 * Inputs longer than max_tokens are truncated as sentence-transformers
 * does (the leading tokens kept, the special tokens the tokenizer adds
 * kept); a request of any size is split into passes, never refused for
 * its length. *n_prompt_tokens (may be NULL) gets the tokens embedded.
 * Thread-safe: calls on one embedder serialize on its lock, and may run
 * concurrently with the model's other calls (spindle_forward, an engine),
 * since the embedder has its own scratch and threads. */
spindle_status spindle_embed(spindle_embedder *e,
                             const spindle_embed_request *request,
                             float *out, int64_t *n_prompt_tokens,
                             spindle_error *err);

/* ----------------------------------------------------- front-end additions
 * What the command-line front end needs beyond the sections above, so that
 * src/cli/ builds on this header alone (docs/ARCHITECTURE.md, "Layering"). */

/* Byte length of the piece last returned by spindle_detokenizer_push or
 * spindle_detokenizer_flush on `detok`: a decoded U+0000 ends the
 * NUL-terminated view early, this length does not. 0 for NULL. Same thread
 * rules as the detokenizer itself (one thread at a time per handle). */
size_t spindle_detokenizer_piece_len(const spindle_detokenizer *detok);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_H */
