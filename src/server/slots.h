/* llama-server's slots over sequence states (slots.c). Slot i (0 ..
 * --parallel - 1) keeps the sequence state of the last request that named
 * it ("id_slot": i): its prompt and generated tokens. A later request
 * naming the slot whose prompt extends those tokens starts from that state
 * and prefills only the rest (usage.prompt_tokens_details.cached_tokens
 * says how many were reused). With --slot-save-path DIR,
 * POST /slots/{i}?action=save|restore {"filename": NAME} writes / reads the
 * slot's state as DIR/NAME (spindle_seq_state_save_keyed: fingerprint,
 * checksum, atomic; a state computed under a LoRA adapter records its
 * spindle_adapter_key, and restores only while an adapter of that content
 * is mounted), and action=erase empties it; the replies are llama-server's
 * ({"id_slot", "filename", "n_saved"/"n_restored", "n_written"/"n_read",
 * "timings": {"save_ms"/"restore_ms"}}, {"id_slot", "n_erased"}). */
#ifndef SP_SERVER_SLOTS_H
#define SP_SERVER_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api_request.h"
#include "spindle.h"

typedef struct sp_server sp_server;
typedef struct sp_slots sp_slots;

sp_slots *sp_slots_new(int count);
void sp_slots_free(sp_slots *slots);
/* The LoRA adapter a slot's state was computed under: its
 * spindle_adapter_key (n 0: the base model). */
typedef struct sp_slot_adapter {
    unsigned char key[SPINDLE_ADAPTER_KEY_BYTES];
    size_t n;
} sp_slot_adapter;

/* Restore slot id's state into the fresh `seq` when prompt[0 .. n) strictly
 * extends its tokens and it was computed under the same adapter; the
 * number of prompt tokens it covers (0: none). */
int sp_slot_begin(sp_server *srv, int id, const int32_t *prompt, int n,
                  const sp_slot_adapter *adapter, spindle_seq *seq);
/* The request on slot id ended: seq's state becomes the slot's. */
void sp_slot_end(sp_server *srv, int id, const spindle_seq *seq, const int32_t *prompt,
                 int n_prompt, const int32_t *generated, int n_generated,
                 const sp_slot_adapter *adapter);

#endif
