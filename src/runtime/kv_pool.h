/* The model-level pool of fixed-size KV blocks for the full-KV layers, and
 * the prefix index over it.
 *
 * A block holds SP_KV_BLOCK_TOKENS consecutive positions of every full-KV
 * layer: in layer l's slab, block b is [n_kv_heads][SP_KV_BLOCK_TOKENS]
 * [head_dim] keys and the same of values, in the cache element type. A
 * sequence is a table of block ids (the same id in every full-KV layer), so
 * it grows by taking a block from the pool (no copy, no allocation: the
 * slabs are reserved once, for the byte budget, and their pages are touched
 * only when written) and sequences of any length fragment nothing.
 *
 * Blocks are reference-counted. A full block can be published in the
 * prefix index under a chained hash of its tokens, namespaced by the model
 * fingerprint and an adapter id: h_i = H(h_{i-1}, tokens of block i), h_-1
 * the namespace (vLLM's hash chain). A chain rather than SGLang's radix tree
 * because the pool's unit is already a whole block: a block's key is one
 * 64-bit value computed as the sequence fills, a lookup is one hash probe
 * per block and an eviction removes one entry, with no tree to split,
 * merge or walk; the radix tree's gain (sharing below block granularity) is
 * lost on block-granular storage anyway. Each entry also keeps its tokens
 * and its parent's hash, compared on lookup, so a hash collision can never
 * map wrong keys.
 *
 * A published block is immutable: a sequence that must write into one (or
 * into a block another sequence shares) copies it first (copy-on-write,
 * sp_kv_pool_must_copy). Blocks whose last reference goes stay cached in
 * LRU order when published; sp_kv_pool_alloc takes a free block first,
 * then evicts the least recently used cached one.
 *
 * Thread-safety: the calls marked (locked) take the pool's mutex and may be
 * used from any thread; the addresses and views may be used without it by
 * the holder of a reference. */
#ifndef SP_RUNTIME_KV_POOL_H
#define SP_RUNTIME_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"
#include "compute/ops.h"
#include "runtime/seq_state.h"

/* Positions per block. 32: a multiple of both attention kernels' key
 * tiles (16 in the AVX-512 kernel, 32 in the portable one), so no tile is
 * ever cut at a block boundary and a paged cache gives the linear cache's
 * bits, and a tile's rows are contiguous; a sequence wastes at most 31
 * positions and a prefix is reused to within 31 tokens. Measured against
 * the linear cache it replaced (bench/history/until-2026-12-07.md, "KV block
 * pool"): decode at depth 2048, where attention dominates, within 2%; 16 would
 * cut the portable kernel's tiles, 64 would double the waste for no fewer
 * lookups that matter (one per 32 rows already). */
#ifndef SP_KV_BLOCK_TOKENS   /* -DSP_KV_BLOCK_TOKENS=N: one-off measurements */
#define SP_KV_BLOCK_TOKENS 32
#endif

typedef struct sp_kv_pool sp_kv_pool;

/* A pool for the full-KV layers of `layers` (the others get no slab) with
 * as many blocks as fit in `bytes` (at least one). SPINDLE_ERR_LIMIT when
 * not even one block fits, SPINDLE_ERR_MEMORY when the address space cannot
 * be reserved. `fingerprint` namespaces the prefix index. */
spindle_status sp_kv_pool_new(const sp_layer_state_desc *layers, int n_layers,
                              sp_kv_dtype type, size_t bytes,
                              uint64_t fingerprint, sp_kv_pool **out,
                              spindle_error *err);
/* Every reference must have been released. */
void sp_kv_pool_free(sp_kv_pool *p);

/* Report every change of the prefix index to fn (spindle_kv_event_fn:
 * called under the pool's lock). Set before any sequence uses the pool. */
void sp_kv_pool_set_events(sp_kv_pool *p, spindle_kv_event_fn fn, void *user);

/* Bytes of one block over every full-KV layer (0: no full-KV layer). */
size_t sp_kv_pool_block_bytes_for(const sp_layer_state_desc *layers,
                                  int n_layers, sp_kv_dtype type);
size_t sp_kv_pool_block_bytes(const sp_kv_pool *p);
int sp_kv_pool_capacity(const sp_kv_pool *p);     /* blocks in all */
/* Whether the prefix index may be used: every layer full KV or none, or
 * else the other layers' boundary states have their store (a window or
 * recurrent state cannot be rebuilt from blocks: prefix_states.h). */
bool sp_kv_pool_prefix_ok(const sp_kv_pool *p);
typedef struct sp_prefix_states sp_prefix_states;
/* The boundary-state store; NULL when every layer is full KV or none. */
sp_prefix_states *sp_kv_pool_states(const sp_kv_pool *p);
sp_kv_dtype sp_kv_pool_type(const sp_kv_pool *p);

/* The prefix index's disk tier (runtime/prefix_disk.h), owned by the pool
 * once set (sp_kv_pool_free closes it). Set before any sequence uses the
 * pool. */
typedef struct sp_prefix_disk sp_prefix_disk;
void sp_kv_pool_set_disk(sp_kv_pool *p, sp_prefix_disk *disk);
sp_prefix_disk *sp_kv_pool_disk(const sp_kv_pool *p);
/* A whole block (sp_kv_pool_block_bytes), every full-KV layer in order. */
void sp_kv_pool_block_copy_out(const sp_kv_pool *p, int block, void *dst);
void sp_kv_pool_block_copy_in(sp_kv_pool *p, int block, const void *src);

typedef struct sp_kv_pool_counts {
    int free;      /* never used or released unpublished */
    int cached;    /* published, no reference: evictable, LRU */
    int used;      /* referenced */
    int indexed;   /* published (cached or used) */
} sp_kv_pool_counts;
void sp_kv_pool_counts_get(sp_kv_pool *p, sp_kv_pool_counts *c); /* (locked) */
/* free + cached: what allocations can still take. (locked) */
int sp_kv_pool_available(sp_kv_pool *p);

/* A block with one reference, or -1 when every block is referenced.
 * (locked) */
int sp_kv_pool_alloc(sp_kv_pool *p);
void sp_kv_pool_retain(sp_kv_pool *p, int block);   /* (locked) */
void sp_kv_pool_release(sp_kv_pool *p, int block);  /* (locked) */
/* Whether a holder must copy `block` before writing it: another reference
 * holds it or it is published. (locked) */
bool sp_kv_pool_must_copy(sp_kv_pool *p, int block);
/* Copy the first `rows` positions of block src to dst, every layer. */
void sp_kv_pool_copy_rows(sp_kv_pool *p, int dst, int src, int rows);

/* ---- prefix index ---- */

/* The hash of a block of SP_KV_BLOCK_TOKENS tokens after a block of hash
 * `parent` (the first block: sp_kv_pool_root_hash). */
uint64_t sp_kv_pool_root_hash(const sp_kv_pool *p, uint32_t adapter_id);
uint64_t sp_kv_pool_chain_hash(uint64_t parent, const int32_t *tokens);
/* The same when some positions are rows of an embeddings span: `keys`
 * (SP_KV_BLOCK_TOKENS of them, NULL: none) holds each position's key, 0
 * for a token. Every key of the block enters the hash, so blocks that
 * differ only in their embeddings (the same placeholder ids) get other
 * hashes, and with them every block after them in the chain. A block with
 * no key hashes as sp_kv_pool_chain_hash. */
uint64_t sp_kv_pool_chain_hash_keyed(uint64_t parent, const int32_t *tokens,
                                     const uint64_t *keys);
/* The published block of `hash` holding `tokens` after `parent`, with one
 * more reference (moved out of the LRU when it had none), or -1. (locked) */
int sp_kv_pool_lookup(sp_kv_pool *p, uint64_t hash, uint64_t parent,
                      const int32_t *tokens);
/* Publish full block `block` (referenced by the caller) under `hash` in
 * namespace `adapter_id` (the one sp_kv_pool_root_hash roots); nothing
 * when that hash is already published or the block already is. (locked) */
void sp_kv_pool_publish(sp_kv_pool *p, int block, uint64_t hash,
                        uint64_t parent, const int32_t *tokens,
                        uint32_t adapter_id);

/* ---- invariants (SQLite's sanity walkers: the test builds call them
 * after every engine step, SPINDLE_INVARIANTS) ---- */

/* Walk the pool: the free stack (in range, each block once, none
 * referenced or published), the LRU (linked both ways, n_cached published
 * blocks without references), the hash chains (each published block once,
 * in its bucket, no (hash, parent) twice), every block free, cached or
 * referenced; then the boundary-state store and the disk tier.
 * SPINDLE_ERR_INTERNAL naming the first violation. (locked) */
spindle_status sp_kv_pool_check(sp_kv_pool *p, spindle_error *err);
/* A block's reference count. (locked) */
int sp_kv_pool_refs(sp_kv_pool *p, int block);
/* Overwrite a block's reference count: only for the walker's own test,
 * which corrupts a pool on purpose. (locked) */
void sp_kv_pool_debug_set_refs(sp_kv_pool *p, int block, int refs);

/* ---- addresses (layer: a model layer of kind full or latent KV) ---- */

/* The attention view of `layer` over a table of n_blocks blocks (v NULL
 * for latent KV). */
sp_kv_view sp_kv_pool_view(const sp_kv_pool *p, int layer,
                           const int32_t *table, int n_blocks);
/* Store position pos (its block table[pos / SP_KV_BLOCK_TOKENS]); v is
 * not read for latent KV. */
void sp_kv_pool_store(sp_kv_pool *p, int layer, const int32_t *table,
                      int pos, const float *k, const float *v);
/* Positions [from, to) as raw bytes in the snapshot form of
 * sp_kv_buffer_read: [2 (k, v)][n_kv_heads][to - from][head_dim] (latent
 * KV: the keys only). */
size_t sp_kv_pool_rows_bytes(const sp_kv_pool *p, int layer, int from, int to);
void sp_kv_pool_read(const sp_kv_pool *p, int layer, const int32_t *table,
                     int from, int to, void *dst);
void sp_kv_pool_write(sp_kv_pool *p, int layer, const int32_t *table,
                      int from, int to, const void *src);

#endif
