/* spindle/generate.h: one generation: options, speculative decoding, stop
 * reasons, spindle_generate. Part of the public API: include "spindle.h",
 * whose opening comment states the conventions every call here follows. */
#ifndef SPINDLE_GENERATE_H
#define SPINDLE_GENERATE_H

#include "spindle/sequence.h"
#include "spindle/adapter.h"
#include "spindle/sampling.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    /* SPINDLE_SPEC_MTP: a companion head (spindle_mtp_head_load, for this
     * request's model; the request keeps a reference); NULL: the model's
     * own mtp.* head. */
    struct spindle_mtp_head *mtp_head;
    /* true: always draft as many tokens as the drafter offers (up to K);
     * false, the default: the adaptive rule picks K per step
     * (docs/speculative.md). */
    bool fixed_k;
} spindle_spec_params;

/* A multi-token-prediction companion: a directory holding a target's MTP
 * head apart from its checkpoint, as mlx-lm publishes them (config.json
 * model_type "qwen3_5_mtp", its hidden size and block_size; the head's
 * tensors, dense or MLX-quantized, under mlx-lm's names or Hugging Face's
 * "mtp." ones), bound to `target`'s embeddings and lm_head (borrowed: the
 * target must outlive it). Fails with one line naming what is wrong (not
 * a companion, another hidden size: "split from a different checkpoint?",
 * a missing or misshapen tensor). Thread-safe against other loads; its
 * forwards run inside the target's engine steps only (like the target's
 * own head: one at a time per target). */
typedef struct spindle_mtp_head spindle_mtp_head;
spindle_status spindle_mtp_head_load(spindle_model *target, const char *dir,
                                     spindle_mtp_head **out, spindle_error *err);
/* Drops the caller's reference (requests drafting with it keep theirs);
 * thread-safe. The target must outlive every reference. */
void spindle_mtp_head_free(spindle_mtp_head *head);
/* Its block_size: the draft depth K when a request gives none. */
int spindle_mtp_head_block_size(const spindle_mtp_head *head);

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
     * the caller's, and so are the fields below (adapter, speculation,
     * grammar, jump-forward: a resumed request speculates as the caller
     * asks, its drafter starting from the tokens).
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
/* spindle_generate with the prompt as spans (token ids and embeddings
 * blocks, spindle/sequence.h; borrowed for the call), as an engine request
 * takes them. */
spindle_status spindle_generate_spans(spindle_model *model, spindle_seq *seq,
                                      const spindle_span *spans, int n_spans,
                                      const spindle_gen_params *params,
                                      spindle_token_callback callback,
                                      void *user, int32_t **tokens,
                                      int *n_tokens, float *prompt_logits,
                                      spindle_gen_stats *stats,
                                      spindle_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_GENERATE_H */
