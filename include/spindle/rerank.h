/* spindle/rerank.h: relevance scores of documents for a query. Part of the
 * public API: include "spindle.h", whose opening comment states the
 * conventions every call here follows. */
#ifndef SPINDLE_RERANK_H
#define SPINDLE_RERANK_H

#include "spindle/model.h"
#include "spindle/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------- rerank
 * Two kinds of reranker, told apart by the model:
 *   - a cross-encoder: a BERT or XLM-RoBERTa encoder with a
 *     sequence-classification head of one label (transformers'
 *     BertForSequenceClassification: pooler dense + tanh, classifier;
 *     llama.cpp's cls / cls.output in a GGUF;
 *     XLMRobertaForSequenceClassification: classifier.dense + tanh,
 *     out_proj). Query and document are one input in the family's pair
 *     template ([CLS] query [SEP] document [SEP], token types 0 then 1;
 *     <s> query </s></s> document </s>); the score is the sigmoid of the
 *     logit, as sentence-transformers' CrossEncoder gives it by default
 *     (llama.cpp reports the logit itself; the order is the same).
 *   - a decoder scored by its "yes" / "no" logits (Qwen3-Reranker): the
 *     model card's prompt (a system line, "<Instruct>: ...\n<Query>:
 *     ...\n<Document>: ..." as the user turn, an empty think block) and
 *     the score softmax(yes, no)[yes] at the last position; the two
 *     lm_head rows are those of the tokens "yes" and "no", or a reranker
 *     GGUF's cls.output (llama.cpp's converter keeps them there).
 * Both scores are probabilities in [0, 1]. */
typedef struct spindle_reranker spindle_reranker;

typedef enum spindle_reranker_kind {
    SPINDLE_RERANKER_CROSS_ENCODER = 1,
    SPINDLE_RERANKER_YES_NO
} spindle_reranker_kind;

typedef struct spindle_reranker_options {
    int n_threads;   /* the reranker's own threads; <= 0: every core */
    int max_tokens;  /* tokens of one query-document input; <= 0: the
                        model's context (an encoder's: its position table) */
    /* A decoder reranker's instruction (NULL: the model card's "Given a
     * web search query, retrieve relevant passages that answer the
     * query"); ignored by a cross-encoder. Copied. */
    const char *instruction;
} spindle_reranker_options;

/* An encoder with a one-label classification head becomes a cross-encoder
 * (another head size, or none: SPINDLE_ERR_UNSUPPORTED); a decoder a
 * yes/no reranker when its GGUF has the rank head or "yes" and "no" are
 * one token each in tok (else SPINDLE_ERR_UNSUPPORTED). The reranker borrows model and tok (free it
 * first). options may be NULL. Safe concurrently with any model call. */
spindle_status spindle_reranker_new(spindle_model *model,
                                    const spindle_tokenizer *tok,
                                    const spindle_reranker_options *options,
                                    spindle_reranker **out,
                                    spindle_error *err);
void spindle_reranker_free(spindle_reranker *r);
/* Its kind; 0 for NULL. */
spindle_reranker_kind spindle_reranker_kind_of(const spindle_reranker *r);

/* scores[i] = the relevance of documents[i] (UTF-8, NUL-terminated) to
 * query, for i < n_documents, many documents per forward pass. An input
 * longer than max_tokens is cut as transformers' longest_first truncation
 * does (the longer of query and document loses tokens at its end; the
 * special tokens and the decoder's prompt stay). *n_prompt_tokens (may be
 * NULL) gets the tokens scored. Thread-safe: calls on one reranker
 * serialize on its lock and may run concurrently with the model's other
 * calls (own scratch and threads). */
spindle_status spindle_rerank(spindle_reranker *r, const char *query,
                              const char *const *documents, int n_documents,
                              float *scores, int64_t *n_prompt_tokens,
                              spindle_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPINDLE_RERANK_H */
