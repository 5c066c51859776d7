/* The full-KV layers of a sequence state: one table of pool blocks
 * (runtime/kv_pool.h) shared by every full-KV layer, growing a block at a
 * time, copy-on-write before writing into a shared or published block, and
 * the token history that hashes each block as it fills so that the prefix
 * index can offer it to later sequences. */
#include "runtime/seq_state_impl.h"
#include "runtime/prefix_states.h"
#include "runtime/prefix_disk.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define B SP_KV_BLOCK_TOKENS

/* A sequence without a model pool gets its own, sized for its context. */
#define PRIVATE_POOL_TOKENS (1 << 16)

static int blocks_for(int64_t positions) {
    return (int)((positions + B - 1) / B);
}

/* Room in the table (and the token history) for n blocks. */
static spindle_status table_room(sp_seq_state *s, int n, spindle_error *err) {
    if (n <= s->cap_blocks) return SPINDLE_OK;
    int cap = s->cap_blocks ? 2 * s->cap_blocks : 64;
    while (cap < n) cap *= 2;
    int32_t *t = realloc(s->blocks, (size_t)cap * sizeof *t);
    if (t) s->blocks = t;
    int32_t *tok = t ? realloc(s->tokens, (size_t)cap * B * sizeof *tok) : NULL;
    if (tok) s->tokens = tok;
    uint64_t *h = tok ? realloc(s->hashes, (size_t)cap * sizeof *h) : NULL;
    if (h) s->hashes = h;
    uint64_t *k = h ? realloc(s->keys, (size_t)cap * B * sizeof *k) : NULL;
    if (k) s->keys = k;
    if (!k)
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "out of memory for a block table of %d blocks", cap);
    s->cap_blocks = cap;
    return SPINDLE_OK;
}

spindle_status sp_blocks_init(sp_seq_state *s, spindle_error *err) {
    for (int l = 0; l < s->n_layers; l++)
        s->has_full |= sp_state_kind_paged(s->layers[l].d.kind);
    if (!s->has_full) return SPINDLE_OK;
    s->hashable = true;
    s->pool = s->opt.pool;
    if (!s->pool) {
        sp_layer_state_desc *d = calloc((size_t)s->n_layers, sizeof *d);
        if (!d) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        for (int l = 0; l < s->n_layers; l++) d[l] = s->layers[l].d;
        const int tokens = s->opt.max_length > 0 ? s->opt.max_length
                                                 : PRIVATE_POOL_TOKENS;
        const size_t bytes = (size_t)blocks_for(tokens) *
                             sp_kv_pool_block_bytes_for(d, s->n_layers,
                                                        s->opt.kv_type);
        spindle_status st = sp_kv_pool_new(d, s->n_layers, s->opt.kv_type,
                                           bytes, 0, &s->pool, err);
        free(d);
        if (st) return st;
        s->owns_pool = true;
    }
    /* The whole context's table at once, so a step never grows it. */
    return table_room(s, s->opt.max_length > 0 ? blocks_for(s->opt.max_length)
                                               : 64, err);
}

static void release_from(sp_seq_state *s, int keep) {
    for (int i = keep; i < s->n_blocks; i++)
        sp_kv_pool_release(s->pool, s->blocks[i]);
    if (s->n_blocks > keep) s->n_blocks = keep;
}

void sp_blocks_free(sp_seq_state *s) {
    if (s->pool) release_from(s, 0);
    if (s->owns_pool) sp_kv_pool_free(s->pool);
    free(s->blocks);
    free(s->tokens);
    free(s->keys);
    free(s->hashes);
}

/* Copy-on-write: the block holding position `length`, when the next
 * token goes into it and someone else may read it. */
static spindle_status unshare_tail(sp_seq_state *s, spindle_error *err) {
    const int i = s->length / B, rows = s->length % B;
    if (rows == 0 || i >= s->n_blocks ||
        !sp_kv_pool_must_copy(s->pool, s->blocks[i]))
        return SPINDLE_OK;
    const int fresh = sp_kv_pool_alloc(s->pool);
    if (fresh < 0)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "the KV pool is full (%d blocks of %d tokens)",
                       sp_kv_pool_capacity(s->pool), B);
    sp_kv_pool_copy_rows(s->pool, fresh, s->blocks[i], rows);
    sp_kv_pool_release(s->pool, s->blocks[i]);
    s->blocks[i] = fresh;
    return SPINDLE_OK;
}

spindle_status sp_blocks_fit(sp_seq_state *s, int64_t end, spindle_error *err) {
    if (!s->has_full) return SPINDLE_OK;
    s->pending_tokens = NULL;
    s->pending_keys = NULL;
    const int need = blocks_for(end), had = s->n_blocks;
    spindle_status st = table_room(s, need, err);
    if (!st) st = unshare_tail(s, err);
    while (!st && s->n_blocks < need) {
        const int b = sp_kv_pool_alloc(s->pool);
        if (b < 0)
            st = sp_fail(err, SPINDLE_ERR_LIMIT,
                         "the KV pool is full (%d blocks of %d tokens)",
                         sp_kv_pool_capacity(s->pool), B);
        else
            s->blocks[s->n_blocks++] = b;
    }
    if (st) release_from(s, had); /* as before (a copy is the same data) */
    return st;
}

/* The hash block i of the sequence follows (the namespace's root for
 * the first). */
static uint64_t parent_of(const sp_seq_state *s, int i) {
    return i ? s->hashes[i - 1]
             : sp_kv_pool_root_hash(s->pool, s->opt.adapter_id);
}

/* Hash and publish the blocks the sequence has filled since the last
 * call, when their tokens are known. */
static void publish_full(sp_seq_state *s, int length) {
    if (!s->hashable || !sp_kv_pool_prefix_ok(s->pool)) return;
    for (int i = s->n_hashed; (i + 1) * B <= length; i++) {
        const uint64_t parent = parent_of(s, i);
        const int32_t *tokens = s->tokens + (size_t)i * B;
        s->hashes[i] = sp_kv_pool_chain_hash_keyed(parent, tokens,
                                                   s->keys + (size_t)i * B);
        sp_kv_pool_publish(s->pool, s->blocks[i], s->hashes[i], parent,
                           tokens, s->opt.adapter_id);
        /* Only the base model's namespace is stable across processes. */
        if (!s->opt.adapter_id)
            sp_prefix_disk_offer(s->pool, s->blocks[i], s->hashes[i], parent,
                                 tokens);
        s->n_hashed = i + 1;
    }
}

void sp_blocks_commit(sp_seq_state *s, int n_new) {
    if (!s->has_full) return;
    if (!s->pending_tokens) s->hashable = false;
    else if (s->hashable) {
        memcpy(s->tokens + s->length, s->pending_tokens,
               (size_t)n_new * sizeof *s->tokens);
        if (s->pending_keys)
            memcpy(s->keys + s->length, s->pending_keys,
                   (size_t)n_new * sizeof *s->keys);
        else
            memset(s->keys + s->length, 0, (size_t)n_new * sizeof *s->keys);
    }
    s->pending_tokens = NULL;
    s->pending_keys = NULL;
    publish_full(s, s->length + n_new);
}

void sp_blocks_boundary_state(sp_seq_state *s) {
    sp_prefix_states *store = s->has_full ? sp_kv_pool_states(s->pool) : NULL;
    const int i = s->length / B - 1;
    if (!store || !s->hashable || s->length % B || i < 0 || i >= s->n_hashed)
        return;
    const uint64_t h = s->hashes[i];
    const int32_t *tokens = s->tokens + (size_t)i * B;
    /* Only the base model's namespace is stable across processes. */
    const bool to_disk =
        !s->opt.adapter_id && sp_prefix_disk_wants_state(s->pool, h);
    if (sp_prefix_states_has(store, h)) {
        /* Kept in memory, not yet on disk (a dropped offer, or a state
         * taken before the file was evicted): the kept one is offered. */
        const sp_state_snapshot *kept =
            to_disk ? sp_prefix_states_acquire(store, h) : NULL;
        if (kept) {
            sp_prefix_disk_offer_state(s->pool, h, parent_of(s, i), tokens,
                                       kept);
            sp_prefix_states_release(store);
        }
        return;
    }
    /* A state the store could keep only a few of is not worth its copy
     * (a long window over many layers): such a model maps no prefix. */
    sp_prefix_states_counts c;
    sp_prefix_states_counts_get(store, &c);
    if (sp_seq_state_tail_bytes(s) > c.max_bytes / 4) return;
    sp_state_snapshot *snap = NULL;
    if (sp_seq_state_snapshot_tail(s, &snap, NULL)) return;
    if (to_disk)
        sp_prefix_disk_offer_state(s->pool, h, parent_of(s, i), tokens, snap);
    sp_prefix_states_put(store, h, snap);
}

/* Keep the first k of the n_blocks mapped blocks, k the most whose
 * boundary has a state (in the store, else read back from the disk tier
 * and then kept in the store), and restore it: the mapped length (0
 * without any). */
static int restore_boundary(sp_seq_state *s, sp_prefix_states *store,
                            const int32_t *tokens) {
    for (int k = s->n_blocks; k > 0; k--) {
        const uint64_t h = s->hashes[k - 1];
        const sp_state_snapshot *kept = sp_prefix_states_acquire(store, h);
        sp_state_snapshot *read = NULL;
        if (!kept && !s->opt.adapter_id)
            read = sp_prefix_disk_load_state(s->pool, s, h, parent_of(s, k - 1),
                                             tokens + (size_t)(k - 1) * B,
                                             k * B);
        if (!kept && !read) continue;
        release_from(s, k);
        spindle_status st = sp_seq_state_restore_tail(s, kept ? kept : read,
                                                      NULL);
        if (kept) sp_prefix_states_release(store);
        else if (st) sp_state_snapshot_free(read);
        else sp_prefix_states_put(store, h, read);
        if (st) release_from(s, 0);
        return s->n_blocks ? s->length : 0;
    }
    release_from(s, 0);
    return 0;
}

void sp_blocks_truncate(sp_seq_state *s, int length) {
    if (!s->has_full) return;
    release_from(s, blocks_for(length));
    if (s->n_hashed > length / B) s->n_hashed = length / B;
    if (length == 0) s->hashable = true;
}

spindle_status sp_blocks_replace(sp_seq_state *s, int length,
                                 spindle_error *err) {
    if (!s->has_full) return SPINDLE_OK;
    const int need = blocks_for(length);
    spindle_status st = table_room(s, need, err);
    if (st) return st;
    int32_t *fresh = malloc(((size_t)need + 1) * sizeof *fresh);
    if (!fresh) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    int got = 0;
    while (got < need && (fresh[got] = sp_kv_pool_alloc(s->pool)) >= 0) got++;
    if (got < need) {
        for (int i = 0; i < got; i++) sp_kv_pool_release(s->pool, fresh[i]);
        free(fresh);
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "the KV pool is full (%d blocks of %d tokens)",
                       sp_kv_pool_capacity(s->pool), B);
    }
    release_from(s, 0);
    memcpy(s->blocks, fresh, (size_t)need * sizeof *fresh);
    free(fresh);
    s->n_blocks = need;
    s->n_hashed = 0;
    s->hashable = false; /* the snapshot does not say which tokens */
    return SPINDLE_OK;
}

void sp_seq_state_set_adapter_id(sp_seq_state *s, uint32_t adapter_id) {
    if (s->length == 0) s->opt.adapter_id = adapter_id;
}

int sp_seq_state_map_prefix(sp_seq_state *s, const int32_t *tokens, int n) {
    return sp_seq_state_map_prefix_keyed(s, tokens, NULL, n);
}

int sp_seq_state_map_prefix_keyed(sp_seq_state *s, const int32_t *tokens,
                                  const uint64_t *keys, int n) {
    if (!s->has_full || s->length != 0 || !s->hashable || !tokens ||
        !sp_kv_pool_prefix_ok(s->pool))
        return 0;
    release_from(s, 0);
    s->n_hashed = 0;
    /* At least the last prompt token is computed: its logits are needed. */
    int full = (n - 1) / B;
    if (table_room(s, full, NULL)) return 0;
    for (int i = 0; i < full; i++)
        s->hashes[i] = sp_kv_pool_chain_hash_keyed(
            parent_of(s, i), tokens + (size_t)i * B,
            keys ? keys + (size_t)i * B : NULL);
    /* Only the base model's namespace is on disk. */
    const bool disk = !s->opt.adapter_id;
    /* With boundary states, blocks past the last boundary that has one (in
     * memory or on disk) would be released at once: not even read. */
    sp_prefix_states *store = sp_kv_pool_states(s->pool);
    while (store && full > 0 &&
           !sp_prefix_states_has(store, s->hashes[full - 1]) &&
           !(disk && sp_prefix_disk_has_state(s->pool, s->hashes[full - 1])))
        full--;
    for (int i = 0; i < full; i++) {
        const int32_t *t = tokens + (size_t)i * B;
        const uint64_t h = s->hashes[i], parent = parent_of(s, i);
        int b = sp_kv_pool_lookup(s->pool, h, parent, t);
        if (b < 0 && disk) b = sp_prefix_disk_load(s->pool, h, parent, t);
        if (b < 0) break;
        s->blocks[s->n_blocks++] = b;
    }
    if (store) restore_boundary(s, store, tokens);
    else s->length = s->n_blocks * B;
    s->n_hashed = s->n_blocks;
    memcpy(s->tokens, tokens, (size_t)s->length * sizeof *tokens);
    if (keys) memcpy(s->keys, keys, (size_t)s->length * sizeof *keys);
    else memset(s->keys, 0, (size_t)s->length * sizeof *s->keys);
    return s->length;
}

void sp_seq_state_set_pending_tokens(sp_seq_state *s, const int32_t *tokens) {
    s->pending_tokens = tokens;
}

void sp_seq_state_set_pending_keys(sp_seq_state *s, const uint64_t *keys) {
    s->pending_keys = keys;
}

uint64_t sp_span_position_key(const unsigned char digest[16], int64_t index,
                              uint32_t flags) {
    unsigned char in[28];
    memcpy(in, digest, 16);
    for (int i = 0; i < 8; i++) in[16 + i] = (unsigned char)(index >> (8 * i));
    for (int i = 0; i < 4; i++) in[24 + i] = (unsigned char)(flags >> (8 * i));
    const uint64_t k = XXH3_64bits(in, sizeof in);
    return k ? k : 1;
}

const sp_kv_pool *sp_seq_state_pool(const sp_seq_state *s) {
    return s->has_full ? s->pool : NULL;
}

int sp_seq_state_blocks_held(const sp_seq_state *s) { return s->n_blocks; }
