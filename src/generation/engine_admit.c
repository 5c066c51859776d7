/* Admission against the model's KV block pool (runtime/kv_pool.h).
 *
 * A request is admitted only when the pool can hold every block it may
 * ever need (its start, prompt and every token it may generate) beside
 * what the running requests may still take: so a running request never
 * finds the pool empty, and nothing has to be preempted. Blocks another
 * running request shares through the prefix index count once for each,
 * which only makes the estimate safe. Sequences outside the engine take
 * blocks without asking; when nothing runs and the head of the queue still
 * does not fit, it fails with SPINDLE_ERR_LIMIT instead of waiting for
 * blocks that may never come back. */
#include "generation/engine.h"

#include "base/error.h"
#include "models/model.h"
#include "models/lora.h"

#include <string.h>

static int blocks_for(int64_t positions) {
    return (int)((positions + SP_KV_BLOCK_TOKENS - 1) / SP_KV_BLOCK_TOKENS);
}

static sp_kv_pool *pool_of(const spindle_engine *e) {
    return e->model->kv_pool;
}

spindle_status sp_engine_size_request(spindle_engine *e, sp_request *r,
                                      spindle_error *err) {
    const int start = spindle_seq_length(r->seq);
    const int64_t last = r->cap - 1 > r->n_prompt ? r->cap - 1 : r->n_prompt;
    /* A caller's sequence truncated into a shared block copies it once. */
    r->need_blocks = blocks_for(start + last) +
                     (start % SP_KV_BLOCK_TOKENS ? 1 : 0);
    if (!sp_kv_pool_block_bytes(pool_of(e))) r->need_blocks = 0;
    const int capacity = sp_kv_pool_capacity(pool_of(e));
    if (r->need_blocks > capacity)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "a request of up to %lld positions needs %d KV blocks "
                       "of %d tokens; the pool holds %d (raise the KV budget "
                       "or lower max_tokens)", (long long)(start + last),
                       r->need_blocks, SP_KV_BLOCK_TOKENS, capacity);
    return SPINDLE_OK;
}

static int still_to_take(const sp_request *r) {
    const int held = sp_seq_state_blocks_held(r->seq->state);
    return r->need_blocks > held ? r->need_blocks - held : 0;
}

/* The prefix-index namespace of r's KV: 0 on the base model, else one per
 * (loaded adapter, scale), since both change every key and value. */
static uint32_t adapter_namespace(const sp_request *r) {
    if (!r->adapter) return 0;
    uint32_t bits;
    memcpy(&bits, &r->adapter_scale, sizeof bits);
    uint32_t h = r->adapter->serial * 0x9e3779b1u ^ (bits * 0x85ebca6bu);
    return h ? h : 1;
}

/* Map the cached blocks the prompt starts with into r's sequence, when it
 * is empty (the engine's, or a caller's fresh one). A resumed request maps
 * nothing: its checkpoint's snapshot holds the whole state, prompt
 * included, and restores into the empty sequence at admission
 * (sp_checkpoint_restore), whatever the prefix index or its disk tier
 * hold of the prompt. */
static void map_prefix(spindle_engine *e, sp_request *r) {
    r->cached_tokens = 0;
    if (spindle_seq_length(r->seq) != 0) return;
    sp_seq_state_set_adapter_id(r->seq->state, adapter_namespace(r));
    if (e->no_prefix_cache || r->resume) return;
    r->cached_tokens = sp_seq_state_map_prefix_keyed(r->seq->state, r->tokens,
                                                     r->keys, r->n_prompt);
    r->prefilled = r->cached_tokens;
}

sp_admit_verdict sp_engine_make_room(spindle_engine *e, sp_request *r) {
    if (!r->seq) {
        if (spindle_seq_new(e->model, &r->seq, &r->error))
            return SP_ADMIT_FAIL;
        r->owns_seq = true;
    }
    map_prefix(e, r);
    int promised = 0;
    for (int i = 0; i < e->n_running; i++)
        promised += still_to_take(e->running[i]);
    const int available = sp_kv_pool_available(pool_of(e));
    if (promised + still_to_take(r) <= available) return SP_ADMIT_OK;
    if (r->cached_tokens) { /* give the mapped blocks back to the cache */
        spindle_seq_truncate(r->seq, 0, NULL);
        r->cached_tokens = r->prefilled = 0;
    }
    if (e->n_running > 0) return SP_ADMIT_WAIT;
    sp_fail(&r->error, SPINDLE_ERR_LIMIT,
            "the KV pool is full: %d of its %d blocks are held by sequences "
            "outside this engine's requests and this one needs %d",
            sp_kv_pool_capacity(pool_of(e)) - available,
            sp_kv_pool_capacity(pool_of(e)), still_to_take(r));
    return SP_ADMIT_FAIL;
}
