/* Prompt spans in the forward pass (models/spans.c): checks and each
 * batch entry's input rows. */
#ifndef SP_MODELS_SPANS_H
#define SP_MODELS_SPANS_H

#include "models/model.h"

/* One span's own checks (ids in the vocabulary, an embeddings span's rows
 * and flags); `what` and `index` name it in the error. */
spindle_status sp_span_check(const spindle_span *s, int vocab, const char *what,
                             int index, spindle_error *err);
/* The spans of batch entry `index` (e->spans set): each checked, their
 * total equal to e->n_tokens. */
spindle_status sp_entry_check_spans(const spindle_model *m,
                                    const spindle_batch_entry *e, int index,
                                    spindle_error *err);
/* Entry e's rows from `row` on: ids, keys and flags into f, the input rows
 * into f->x (the embedding table with the family's scale for tokens, the
 * span's own rows for embeddings) and how far each row sees ahead; true
 * when some row does (a bidirectional span of more than one row). */
bool sp_entry_fill_rows(spindle_model *m, sp_forward *f,
                        const spindle_batch_entry *e, int row);

#endif
