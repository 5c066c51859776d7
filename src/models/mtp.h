/* A multi-token-prediction (MTP) head: the extra module Qwen3.5-class
 * checkpoints carry under "mtp.*" (Hugging Face config key
 * mtp_num_hidden_layers; mlx-lm's sanitize drops these weights), as vLLM's
 * qwen3_5_mtp.py / qwen3_next_mtp.py compute it. For the row at target
 * position j, given the target's last-layer hidden state h_j BEFORE its
 * final norm and the token t_{j+1} that follows:
 *
 *   x  = fc(concat(pre_fc_norm_embedding(embed(t_{j+1})),
 *                  pre_fc_norm_hidden(h_j)))      (embedding half first)
 *   g  = decoder layer mtp.layers.0 (x)           (the family's attention
 *                                                  and MLP, its own KV,
 *                                                  at position j)
 *   logits = lm_head(norm(g))                      (mtp.norm; the TARGET's
 *                                                  embedding and lm_head)
 *
 * which predicts t_{j+2}. Drafting further recurses: the next row takes
 * the head's own g (before mtp.norm) and the token it proposed.
 *
 * The head is a one-layer model that shares the target's tensors, rope
 * and thread pool (so it runs only while the target does not: one call at
 * a time per target model); its sequences (spindle_seq of
 * sp_mtp_model(head)) hold its KV, one row per target position. */
#ifndef SP_MODELS_MTP_H
#define SP_MODELS_MTP_H

#include "models/model.h"

/* The public spindle_mtp_head (include/spindle/generate.h) is this. */
typedef struct spindle_mtp_head sp_mtp;

/* Whether m's files hold an MTP head its family can run. */
bool sp_mtp_present(const spindle_model *m);
/* Bind the head of `target` (borrowed; it must outlive the head). Fails
 * with one line naming what is missing when the model has none. */
spindle_status sp_mtp_new(spindle_model *target, sp_mtp **out,
                          spindle_error *err);
/* Whether p drafts for target (its embeddings and lm_head are bound). */
bool sp_mtp_binds(const sp_mtp *p, const spindle_model *target);
/* A companion's block_size (its default draft depth); 0 for a head inside
 * the target's checkpoint. */
int sp_mtp_block_size(const sp_mtp *p);
/* Reference counted (atomically): every holder of a head sequence keeps
 * a reference, since the sequences live in the head's KV pool.
 * sp_mtp_free drops one; the last frees the head. */
void sp_mtp_retain(sp_mtp *p);
void sp_mtp_free(sp_mtp *p);
/* The head as a model: spindle_seq_new / _truncate / _length work on its
 * sequences. */
spindle_model *sp_mtp_model(sp_mtp *p);

/* The content fingerprint of the files the head comes from: the target's
 * (its head sits in the target's checkpoint) or its companion
 * directory's. Thread-safe. */
spindle_status sp_mtp_fingerprint(sp_mtp *p, char out[SPINDLE_FINGERPRINT_LEN + 1],
                                  spindle_error *err);

/* n rows of one head sequence, at its next positions: row t takes
 * tokens[t] and hidden[t * hidden_size]. Writes logits[n][vocab] (only
 * the last row's, [vocab], unless all_logits) and, when
 * hidden_out is not NULL, each row's output g (before mtp.norm) for the
 * recursion. On error the sequence is unchanged. */
spindle_status sp_mtp_forward(sp_mtp *p, spindle_seq *seq,
                              const int32_t *tokens, const float *hidden,
                              int n, bool all_logits, float *logits,
                              float *hidden_out, spindle_error *err);

#endif
