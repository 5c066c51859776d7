/* The KV block pool and its prefix index (kv_pool.h). */
#include "runtime/kv_pool.h"
#include "runtime/kv_cache.h"
#include "runtime/prefix_states.h"
#include "runtime/prefix_disk.h"
#include "base/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define B SP_KV_BLOCK_TOKENS

typedef struct pool_layer {
    int slab;              /* -1: not full KV */
    int n_kv_heads, head_dim;
    bool values;           /* false: latent KV, keys only */
    size_t half_bytes;     /* of one block's keys (or values) */
    unsigned char *k, *v;  /* block 0 of the layer's keys / values (v NULL
                            * without values) */
} pool_layer;

typedef struct block_meta {
    int refs;
    bool indexed;
    uint64_t hash, parent;
    int lru_prev, lru_next;  /* cached blocks, oldest first */
    int hash_next;           /* bucket chain of indexed blocks */
} block_meta;

struct sp_kv_pool {
    pthread_mutex_t lock;
    int n_layers;
    pool_layer *layers;
    sp_kv_dtype type;
    size_t elem_size, block_bytes;
    int n_blocks;
    bool prefix_ok;
    sp_prefix_states *states; /* boundary states: layers not all full KV */
    uint64_t fingerprint;
    void *map;
    size_t map_bytes;

    block_meta *meta;
    int32_t *tokens;         /* [n_blocks][B]: an indexed block's tokens */
    int *free_stack, n_free; /* LIFO: recently touched pages first */
    int lru_head, lru_tail, n_cached, n_indexed;
    int *buckets;            /* [n_buckets] first indexed block or -1 */
    uint64_t bucket_mask;
    sp_prefix_disk *disk;    /* the on-disk tier, or NULL */
    spindle_kv_event_fn on_event;  /* the index's changes, or NULL */
    void *event_user;
};

size_t sp_kv_pool_block_bytes_for(const sp_layer_state_desc *layers,
                                  int n_layers, sp_kv_dtype type) {
    size_t n = 0;
    for (int l = 0; l < n_layers; l++)
        if (sp_state_kind_paged(layers[l].kind))
            n += (layers[l].kind == SP_STATE_FULL_KV ? 2 : 1) *
                 (size_t)layers[l].n_kv_heads * B *
                 (size_t)layers[l].head_dim * sp_kv_elem_size(type);
    return n;
}

static spindle_status pool_alloc_meta(sp_kv_pool *p, spindle_error *err) {
    const size_t n = (size_t)p->n_blocks;
    size_t buckets = 1;
    while (buckets < 2 * n) buckets *= 2;
    p->bucket_mask = buckets - 1;
    p->meta = calloc(n, sizeof *p->meta);
    p->tokens = malloc(n * B * sizeof *p->tokens);
    p->free_stack = malloc(n * sizeof *p->free_stack);
    p->buckets = malloc(buckets * sizeof *p->buckets);
    if (!p->meta || !p->tokens || !p->free_stack || !p->buckets)
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "out of memory for a KV pool of %d blocks",
                       p->n_blocks);
    for (size_t i = 0; i < buckets; i++) p->buckets[i] = -1;
    /* Block 0 on top of the stack: the first sequences touch the first
     * pages. */
    for (int i = 0; i < p->n_blocks; i++)
        p->free_stack[i] = p->n_blocks - 1 - i;
    p->n_free = p->n_blocks;
    p->lru_head = p->lru_tail = -1;
    return SPINDLE_OK;
}

/* Reserve the slabs: address space only (MAP_NORESERVE), pages come with
 * the first write, so a large default budget costs nothing until used. */
static spindle_status pool_map(sp_kv_pool *p, spindle_error *err) {
    p->map_bytes = p->block_bytes * (size_t)p->n_blocks;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
    flags |= MAP_NORESERVE;
#endif
    void *m = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (m == MAP_FAILED)
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "cannot reserve %zu bytes for the KV pool",
                       p->map_bytes);
    p->map = m;
    unsigned char *at = m;
    for (int l = 0; l < p->n_layers; l++) {
        pool_layer *L = &p->layers[l];
        if (L->slab < 0) continue;
        L->k = at;
        at += L->half_bytes * (size_t)p->n_blocks;
        if (!L->values) continue;
        L->v = at;
        at += L->half_bytes * (size_t)p->n_blocks;
    }
    return SPINDLE_OK;
}

spindle_status sp_kv_pool_new(const sp_layer_state_desc *layers, int n_layers,
                              sp_kv_dtype type, size_t bytes,
                              uint64_t fingerprint, sp_kv_pool **out,
                              spindle_error *err) {
    *out = NULL;
    const size_t es = sp_kv_elem_size(type);
    if (!es || n_layers < 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "bad KV pool layout");
    sp_kv_pool *p = calloc(1, sizeof *p);
    if (p) p->layers = calloc((size_t)n_layers + 1, sizeof *p->layers);
    if (!p || !p->layers) {
        free(p);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    pthread_mutex_init(&p->lock, NULL);
    p->n_layers = n_layers;
    p->type = type;
    p->elem_size = es;
    p->fingerprint = fingerprint;
    p->prefix_ok = true;
    int slabs = 0;
    for (int l = 0; l < n_layers; l++) {
        pool_layer *L = &p->layers[l];
        L->slab = -1;
        if (sp_state_kind_paged(layers[l].kind)) {
            L->slab = slabs++;
            L->values = layers[l].kind == SP_STATE_FULL_KV;
            L->n_kv_heads = layers[l].n_kv_heads;
            L->head_dim = layers[l].head_dim;
            L->half_bytes = (size_t)L->n_kv_heads * B * L->head_dim * es;
        } else if (layers[l].kind != SP_STATE_NONE) {
            p->prefix_ok = false;   /* until the boundary states exist */
        }
    }
    p->block_bytes = sp_kv_pool_block_bytes_for(layers, n_layers, type);
    /* The other layers' states at block boundaries, beside the blocks:
     * an eighth of the budget (prefix_states.h). */
    if (!p->prefix_ok && p->block_bytes) {
        p->states = sp_prefix_states_new(bytes / 8);
        p->prefix_ok = p->states != NULL;
    }
    /* Without full-KV layers no sequence takes a block: one keeps the
     * bookkeeping valid. */
    const size_t n = p->block_bytes ? bytes / p->block_bytes : 1;
    spindle_status st = SPINDLE_OK;
    if (n < 1)
        st = sp_fail(err, SPINDLE_ERR_LIMIT,
                     "a KV budget of %zu bytes holds no block of %d tokens "
                     "(%zu bytes)", bytes, B, p->block_bytes);
    else
        p->n_blocks = n > ((size_t)1 << 30) ? 1 << 30 : (int)n;
    if (!st) st = pool_alloc_meta(p, err);
    if (!st && p->block_bytes) st = pool_map(p, err);
    if (st) {
        sp_kv_pool_free(p);
        return st;
    }
    *out = p;
    return SPINDLE_OK;
}

void sp_kv_pool_free(sp_kv_pool *p) {
    if (!p) return;
    sp_prefix_disk_close(p->disk);   /* first: it writes queued blocks */
    if (p->map) munmap(p->map, p->map_bytes);
    sp_prefix_states_free(p->states);
    pthread_mutex_destroy(&p->lock);
    free(p->meta);
    free(p->tokens);
    free(p->free_stack);
    free(p->buckets);
    free(p->layers);
    free(p);
}

size_t sp_kv_pool_block_bytes(const sp_kv_pool *p) { return p->block_bytes; }
int sp_kv_pool_capacity(const sp_kv_pool *p) { return p->n_blocks; }
bool sp_kv_pool_prefix_ok(const sp_kv_pool *p) { return p->prefix_ok; }
sp_prefix_states *sp_kv_pool_states(const sp_kv_pool *p) { return p->states; }
sp_kv_dtype sp_kv_pool_type(const sp_kv_pool *p) { return p->type; }
void sp_kv_pool_set_disk(sp_kv_pool *p, sp_prefix_disk *disk) {
    p->disk = disk;
}
sp_prefix_disk *sp_kv_pool_disk(const sp_kv_pool *p) { return p->disk; }
void sp_kv_pool_set_events(sp_kv_pool *p, spindle_kv_event_fn fn, void *user) {
    p->on_event = fn;
    p->event_user = user;
}

void sp_kv_pool_counts_get(sp_kv_pool *p, sp_kv_pool_counts *c) {
    pthread_mutex_lock(&p->lock);
    c->free = p->n_free;
    c->cached = p->n_cached;
    c->used = p->n_blocks - p->n_free - p->n_cached;
    c->indexed = p->n_indexed;
    pthread_mutex_unlock(&p->lock);
}

int sp_kv_pool_available(sp_kv_pool *p) {
    pthread_mutex_lock(&p->lock);
    int n = p->n_free + p->n_cached;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* ------------------------------------------------------------ LRU, index */

static void lru_unlink(sp_kv_pool *p, int b) {
    block_meta *m = &p->meta[b];
    if (m->lru_prev >= 0) p->meta[m->lru_prev].lru_next = m->lru_next;
    else p->lru_head = m->lru_next;
    if (m->lru_next >= 0) p->meta[m->lru_next].lru_prev = m->lru_prev;
    else p->lru_tail = m->lru_prev;
    p->n_cached--;
}

static void lru_push(sp_kv_pool *p, int b) {
    block_meta *m = &p->meta[b];
    m->lru_next = -1;
    m->lru_prev = p->lru_tail;
    if (p->lru_tail >= 0) p->meta[p->lru_tail].lru_next = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

static int *bucket_of(sp_kv_pool *p, uint64_t hash) {
    return &p->buckets[hash & p->bucket_mask];
}

static void unindex(sp_kv_pool *p, int b) {
    int *link = bucket_of(p, p->meta[b].hash);
    while (*link != b) link = &p->meta[*link].hash_next;
    *link = p->meta[b].hash_next;
    p->meta[b].indexed = false;
    p->n_indexed--;
    if (p->on_event) {
        const spindle_kv_event ev = {.kind = SPINDLE_KV_BLOCK_REMOVED,
                                     .hash = p->meta[b].hash};
        p->on_event(&ev, p->event_user);
    }
}

static int find(const sp_kv_pool *p, uint64_t hash, uint64_t parent,
                const int32_t *tokens) {
    for (int b = p->buckets[hash & p->bucket_mask]; b >= 0;
         b = p->meta[b].hash_next)
        if (p->meta[b].hash == hash && p->meta[b].parent == parent &&
            (!tokens ||
             !memcmp(p->tokens + (size_t)b * B, tokens, B * sizeof *tokens)))
            return b;
    return -1;
}

/* --------------------------------------------------------- references */

int sp_kv_pool_alloc(sp_kv_pool *p) {
    pthread_mutex_lock(&p->lock);
    int b = -1;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_unlink(p, b);
        unindex(p, b);
    }
    if (b >= 0) p->meta[b].refs = 1;
    pthread_mutex_unlock(&p->lock);
    return b;
}

/* (lock held) */
static void retain_locked(sp_kv_pool *p, int b) {
    if (p->meta[b].refs++ == 0) lru_unlink(p, b); /* only cached ones */
}

void sp_kv_pool_retain(sp_kv_pool *p, int block) {
    pthread_mutex_lock(&p->lock);
    retain_locked(p, block);
    pthread_mutex_unlock(&p->lock);
}

void sp_kv_pool_release(sp_kv_pool *p, int block) {
    pthread_mutex_lock(&p->lock);
    block_meta *m = &p->meta[block];
    if (m->refs > 0 && --m->refs == 0) {
        if (m->indexed) lru_push(p, block);
        else p->free_stack[p->n_free++] = block;
    }
    pthread_mutex_unlock(&p->lock);
}

bool sp_kv_pool_must_copy(sp_kv_pool *p, int block) {
    pthread_mutex_lock(&p->lock);
    bool shared = p->meta[block].refs > 1 || p->meta[block].indexed;
    pthread_mutex_unlock(&p->lock);
    return shared;
}

void sp_kv_pool_copy_rows(sp_kv_pool *p, int dst, int src, int rows) {
    for (int l = 0; l < p->n_layers; l++) {
        const pool_layer *L = &p->layers[l];
        if (L->slab < 0) continue;
        const size_t rb = (size_t)L->head_dim * p->elem_size;
        const size_t head = B * rb;
        for (int h = 0; h < L->n_kv_heads; h++) {
            const size_t d = L->half_bytes * (size_t)dst + h * head;
            const size_t s = L->half_bytes * (size_t)src + h * head;
            memcpy(L->k + d, L->k + s, (size_t)rows * rb);
            if (L->values) memcpy(L->v + d, L->v + s, (size_t)rows * rb);
        }
    }
}

/* ---------------------------------------------------------- prefix index */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t sp_kv_pool_root_hash(const sp_kv_pool *p, uint32_t adapter_id) {
    return mix64(p->fingerprint ^ mix64(0x5350494e444c45ull + adapter_id));
}

uint64_t sp_kv_pool_chain_hash_keyed(uint64_t parent, const int32_t *tokens,
                                     const uint64_t *keys) {
    uint64_t h = mix64(parent + 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < B; i++) {
        h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + ((uint64_t)i << 32)));
        if (keys && keys[i]) h = mix64(h ^ keys[i] ^ ((uint64_t)i << 56));
    }
    return h;
}

uint64_t sp_kv_pool_chain_hash(uint64_t parent, const int32_t *tokens) {
    return sp_kv_pool_chain_hash_keyed(parent, tokens, NULL);
}

int sp_kv_pool_lookup(sp_kv_pool *p, uint64_t hash, uint64_t parent,
                      const int32_t *tokens) {
    pthread_mutex_lock(&p->lock);
    int b = find(p, hash, parent, tokens);
    if (b >= 0) retain_locked(p, b);
    pthread_mutex_unlock(&p->lock);
    return b;
}

void sp_kv_pool_publish(sp_kv_pool *p, int block, uint64_t hash,
                        uint64_t parent, const int32_t *tokens,
                        uint32_t adapter_id) {
    pthread_mutex_lock(&p->lock);
    block_meta *m = &p->meta[block];
    if (!m->indexed && m->refs > 0 && find(p, hash, parent, NULL) < 0) {
        m->indexed = true;
        m->hash = hash;
        m->parent = parent;
        memcpy(p->tokens + (size_t)block * B, tokens, B * sizeof *tokens);
        int *bucket = bucket_of(p, hash);
        m->hash_next = *bucket;
        *bucket = block;
        p->n_indexed++;
        if (p->on_event) {
            const spindle_kv_event ev = {
                .kind = SPINDLE_KV_BLOCK_STORED, .hash = hash,
                .parent = parent,
                .first = parent == sp_kv_pool_root_hash(p, adapter_id),
                .adapter_id = adapter_id, .tokens = tokens, .n_tokens = B};
            p->on_event(&ev, p->event_user);
        }
    }
    pthread_mutex_unlock(&p->lock);
}

/* ------------------------------------------------------------ addresses */

sp_kv_view sp_kv_pool_view(const sp_kv_pool *p, int layer,
                           const int32_t *table, int n_blocks) {
    const pool_layer *L = &p->layers[layer];
    const int64_t block_elems = (int64_t)L->n_kv_heads * B * L->head_dim;
    sp_kv_view v = {L->k, L->v, (int64_t)B * L->head_dim, p->type, 0,
                    table, B, n_blocks, block_elems};
    return v;
}

/* Byte offset of (head h, position pos) in layer L's key or value slab. */
static size_t row_at(const sp_kv_pool *p, const pool_layer *L,
                     const int32_t *table, int h, int pos) {
    return L->half_bytes * (size_t)table[pos / B] +
           ((size_t)h * B + (size_t)(pos % B)) * L->head_dim * p->elem_size;
}

void sp_kv_pool_store(sp_kv_pool *p, int layer, const int32_t *table,
                      int pos, const float *k, const float *v) {
    const pool_layer *L = &p->layers[layer];
    const size_t hd = (size_t)L->head_dim;
    for (int h = 0; h < L->n_kv_heads; h++) {
        const size_t at = row_at(p, L, table, h, pos);
        sp_kv_convert(L->k + at, k + h * hd, hd, p->type);
        if (L->values) sp_kv_convert(L->v + at, v + h * hd, hd, p->type);
    }
}

size_t sp_kv_pool_rows_bytes(const sp_kv_pool *p, int layer, int from,
                             int to) {
    const pool_layer *L = &p->layers[layer];
    return to > from ? (L->values ? 2 : 1) * (size_t)L->n_kv_heads *
                           (size_t)(to - from) *
                           L->head_dim * p->elem_size
                     : 0;
}

/* Copy positions [from, to) of every head between the slabs and the flat
 * snapshot form, a block's run of rows at a time. */
static void copy_flat(const sp_kv_pool *p, int layer, const int32_t *table,
                      int from, int to, unsigned char *flat, bool to_flat) {
    const pool_layer *L = &p->layers[layer];
    const size_t rb = (size_t)L->head_dim * p->elem_size;
    for (int kv = 0; kv < (L->values ? 2 : 1); kv++) {
        unsigned char *slab = kv ? L->v : L->k;
        for (int h = 0; h < L->n_kv_heads; h++)
            for (int pos = from; pos < to;) {
                int run = B - pos % B;
                if (run > to - pos) run = to - pos;
                unsigned char *cell = slab + row_at(p, L, table, h, pos);
                if (to_flat) memcpy(flat, cell, (size_t)run * rb);
                else memcpy(cell, flat, (size_t)run * rb);
                flat += (size_t)run * rb;
                pos += run;
            }
    }
}

void sp_kv_pool_read(const sp_kv_pool *p, int layer, const int32_t *table,
                     int from, int to, void *dst) {
    copy_flat(p, layer, table, from, to, dst, true);
}

void sp_kv_pool_write(sp_kv_pool *p, int layer, const int32_t *table,
                      int from, int to, const void *src) {
    copy_flat(p, layer, table, from, to, (unsigned char *)src, false);
}

/* One block of every full-KV layer, in layer order, each in the flat form
 * of sp_kv_pool_read (the on-disk prompt cache's payload). */
static void copy_block(const sp_kv_pool *p, int block, unsigned char *flat,
                       bool to_flat) {
    const int32_t table[1] = {block};
    for (int l = 0; l < p->n_layers; l++) {
        if (p->layers[l].slab < 0) continue;
        copy_flat(p, l, table, 0, B, flat, to_flat);
        flat += sp_kv_pool_rows_bytes(p, l, 0, B);
    }
}

void sp_kv_pool_block_copy_out(const sp_kv_pool *p, int block, void *dst) {
    copy_block(p, block, dst, true);
}

void sp_kv_pool_block_copy_in(sp_kv_pool *p, int block, const void *src) {
    copy_block(p, block, (unsigned char *)src, false);
}

/* ----------------------------------------------------------- invariants */

/* The free stack: ids in range, each once, none referenced or published;
 * marks them in `seen`. (lock held) */
static spindle_status check_free_stack(const sp_kv_pool *p, char *seen,
                                       spindle_error *err) {
    if (p->n_free < 0 || p->n_free > p->n_blocks)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "KV pool: %d free blocks of %d", p->n_free, p->n_blocks);
    for (int i = 0; i < p->n_free; i++) {
        const int b = p->free_stack[i];
        if (b < 0 || b >= p->n_blocks || seen[b])
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "KV pool: free stack entry %d is block %d (out of "
                           "range or listed twice)", i, b);
        seen[b] = 1;
        if (p->meta[b].refs != 0 || p->meta[b].indexed)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "KV pool: free block %d has %d references%s", b,
                           p->meta[b].refs,
                           p->meta[b].indexed ? " and is published" : "");
    }
    return SPINDLE_OK;
}

/* The LRU: a doubly linked list of n_cached published blocks without a
 * reference, oldest first; marks them in `seen`. (lock held) */
static spindle_status check_lru(const sp_kv_pool *p, char *seen,
                                spindle_error *err) {
    int n = 0, prev = -1;
    for (int b = p->lru_head; b >= 0; prev = b, b = p->meta[b].lru_next) {
        if (b >= p->n_blocks || seen[b] || n > p->n_blocks)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "KV pool: LRU reaches block %d again, or a free "
                           "one, or out of range", b);
        seen[b] = 2;
        n++;
        const block_meta *m = &p->meta[b];
        if (m->lru_prev != prev)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "KV pool: LRU block %d links back to %d, not %d",
                           b, m->lru_prev, prev);
        if (m->refs != 0 || !m->indexed)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "KV pool: cached block %d has %d references%s", b,
                           m->refs, m->indexed ? "" : " and is unpublished");
    }
    if (prev != p->lru_tail || n != p->n_cached)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "KV pool: LRU of %d blocks ending at %d; counted %d "
                       "ending at %d", n, prev, p->n_cached, p->lru_tail);
    return SPINDLE_OK;
}

/* The prefix index: every chain holds published blocks of its bucket,
 * each once, no (hash, parent) twice; every published block is in one.
 * (lock held) */
static spindle_status check_index(const sp_kv_pool *p, char *chained,
                                  spindle_error *err) {
    int n = 0;
    for (uint64_t i = 0; i <= p->bucket_mask; i++)
        for (int b = p->buckets[i]; b >= 0; b = p->meta[b].hash_next) {
            if (b >= p->n_blocks || chained[b] || n > p->n_blocks)
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "KV pool: hash chain %llu reaches block %d "
                               "again or out of range", (unsigned long long)i, b);
            chained[b] = 1;
            n++;
            const block_meta *m = &p->meta[b];
            if (!m->indexed || (m->hash & p->bucket_mask) != i)
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "KV pool: block %d in hash chain %llu is %s",
                               b, (unsigned long long)i,
                               m->indexed ? "in another's chain"
                                          : "unpublished");
            if (find(p, m->hash, m->parent, NULL) != b)
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "KV pool: blocks %d and %d share a hash and "
                               "parent", find(p, m->hash, m->parent, NULL), b);
        }
    if (n != p->n_indexed)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "KV pool: %d blocks in the hash chains, %d published",
                       n, p->n_indexed);
    return SPINDLE_OK;
}

spindle_status sp_kv_pool_check(sp_kv_pool *p, spindle_error *err) {
    char *seen = calloc(2 * (size_t)p->n_blocks, 1);
    if (!seen) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    char *chained = seen + p->n_blocks;
    pthread_mutex_lock(&p->lock);
    spindle_status st = check_free_stack(p, seen, err);
    if (!st) st = check_lru(p, seen, err);
    if (!st) st = check_index(p, chained, err);
    /* Every block is free, cached or referenced, and published exactly
     * when chained. */
    for (int b = 0; b < p->n_blocks && !st; b++) {
        const block_meta *m = &p->meta[b];
        if (m->refs < 0 || (!seen[b] && m->refs == 0))
            st = sp_fail(err, SPINDLE_ERR_INTERNAL,
                         "KV pool: block %d has %d references and is neither "
                         "free nor cached", b, m->refs);
        else if (m->indexed != (chained[b] != 0))
            st = sp_fail(err, SPINDLE_ERR_INTERNAL,
                         "KV pool: block %d is %spublished but %sin the index",
                         b, m->indexed ? "" : "not ", chained[b] ? "" : "not ");
    }
    pthread_mutex_unlock(&p->lock);
    free(seen);
    if (!st && p->states) st = sp_prefix_states_check(p->states, err);
    if (!st && p->disk) st = sp_prefix_disk_check(p->disk, err);
    return st;
}

int sp_kv_pool_refs(sp_kv_pool *p, int block) {
    pthread_mutex_lock(&p->lock);
    const int refs = p->meta[block].refs;
    pthread_mutex_unlock(&p->lock);
    return refs;
}

void sp_kv_pool_debug_set_refs(sp_kv_pool *p, int block, int refs) {
    pthread_mutex_lock(&p->lock);
    p->meta[block].refs = refs;
    pthread_mutex_unlock(&p->lock);
}
