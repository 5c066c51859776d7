/* The on-disk prompt cache (prefix_disk.h): an index of the directory's
 * block and state files in LRU order, a writer thread with its queue, and
 * the checked reads into a pool block or a boundary-state snapshot. */
#include "runtime/prefix_disk.h"
#include "runtime/prefix_block.h"
#include "runtime/seq_state_impl.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Offers queued beyond this many bytes (or 8 blocks, when more) are
 * dropped: the writer is behind, and a step must not wait for it. */
#define QUEUE_BYTES ((size_t)256 << 20)
#define NAME_LEN 20   /* 16 hex digits and ".kvb" or ".kvs" */

/* File name extensions by sp_prefix_file_kind. */
static const char *const EXT[2] = {".kvb", ".kvs"};

typedef struct entry {
    uint64_t hash;
    uint32_t kind;       /* sp_prefix_file_kind: a block or a state */
    size_t bytes;        /* the file's, once written */
    bool written;        /* false: queued, no file yet */
    int prev, next;      /* LRU of written entries, oldest first */
    int hash_next;       /* bucket chain; free list when unused */
} entry;

typedef struct job {
    struct job *next;
    sp_prefix_block_key key;
    unsigned char *payload;
} job;

struct sp_prefix_disk {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t writer;
    bool stopping;
    char *dir;
    sp_prefix_block_key proto;     /* fingerprint, type, payload bytes */
    size_t file_bytes;             /* header + payload */

    entry *entries;
    int n_entries, cap_entries, free_head;
    int *buckets;
    int bucket_mask;
    int lru_head, lru_tail;

    job *queue_head, *queue_tail;
    size_t queued_bytes;
    sp_prefix_disk_stats stats;
    bool warned_write;
};

/* ------------------------------------------------------------- index */

/* A block and the state at its end share the hash; their kinds tell
 * them apart. */
static int *bucket_of(sp_prefix_disk *d, uint64_t hash, uint32_t kind) {
    const uint64_t h = hash ^ (uint64_t)kind * 0x9e3779b97f4a7c15ull;
    return &d->buckets[(int)(h & (uint64_t)d->bucket_mask)];
}

static int index_find(sp_prefix_disk *d, uint64_t hash, uint32_t kind) {
    for (int e = *bucket_of(d, hash, kind); e >= 0;
         e = d->entries[e].hash_next)
        if (d->entries[e].hash == hash && d->entries[e].kind == kind) return e;
    return -1;
}

/* Double the entries and rechain them. Only called with the free list
 * empty, so every existing entry is in use. */
static bool index_grow(sp_prefix_disk *d) {
    const int old = d->cap_entries, cap = old ? 2 * old : 256;
    entry *grown = realloc(d->entries, (size_t)cap * sizeof *grown);
    int *buckets = grown ? malloc(2 * (size_t)cap * sizeof *buckets) : NULL;
    if (grown) d->entries = grown;
    if (!buckets) return false;
    free(d->buckets);
    d->buckets = buckets;
    d->bucket_mask = 2 * cap - 1;
    for (int i = 0; i < 2 * cap; i++) d->buckets[i] = -1;
    for (int e = 0; e < old; e++) {
        int *b = bucket_of(d, d->entries[e].hash, d->entries[e].kind);
        d->entries[e].hash_next = *b;
        *b = e;
    }
    for (int i = old; i < cap; i++)
        d->entries[i].hash_next = i + 1 < cap ? i + 1 : -1;
    d->free_head = old;
    d->cap_entries = cap;
    return true;
}

static void lru_unlink(sp_prefix_disk *d, int e) {
    entry *x = &d->entries[e];
    if (x->prev >= 0) d->entries[x->prev].next = x->next;
    else d->lru_head = x->next;
    if (x->next >= 0) d->entries[x->next].prev = x->prev;
    else d->lru_tail = x->prev;
    x->prev = x->next = -1;
}

static void lru_push(sp_prefix_disk *d, int e) {
    entry *x = &d->entries[e];
    x->next = -1;
    x->prev = d->lru_tail;
    if (d->lru_tail >= 0) d->entries[d->lru_tail].next = e;
    else d->lru_head = e;
    d->lru_tail = e;
}

/* A new entry for (hash, kind) (not written, off the LRU), or -1. (lock
 * held) */
static int index_add(sp_prefix_disk *d, uint64_t hash, uint32_t kind) {
    if (d->free_head < 0 && !index_grow(d)) return -1;
    const int e = d->free_head;
    d->free_head = d->entries[e].hash_next;
    d->entries[e] = (entry){.hash = hash, .kind = kind, .prev = -1,
                            .next = -1};
    int *b = bucket_of(d, hash, kind);
    d->entries[e].hash_next = *b;
    *b = e;
    d->n_entries++;
    return e;
}

/* (lock held) */
static void index_remove(sp_prefix_disk *d, int e) {
    entry *x = &d->entries[e];
    if (x->written) {
        lru_unlink(d, e);
        d->stats.bytes -= x->bytes;
        d->stats.files--;
    }
    int *link = bucket_of(d, x->hash, x->kind);
    while (*link != e) link = &d->entries[*link].hash_next;
    *link = x->hash_next;
    x->hash_next = d->free_head;
    d->free_head = e;
    d->n_entries--;
}

/* (lock held) */
static void mark_written(sp_prefix_disk *d, int e, size_t bytes) {
    d->entries[e].written = true;
    d->entries[e].bytes = bytes;
    d->stats.bytes += bytes;
    d->stats.files++;
    lru_push(d, e);
}

static void file_name(const sp_prefix_disk *d, uint64_t hash, uint32_t kind,
                      char *out, size_t n) {
    snprintf(out, n, "%s/%016llx%s", d->dir, (unsigned long long)hash,
             EXT[kind == SP_PREFIX_FILE_STATE]);
}

/* Delete the least recently used files until the budget holds. The
 * unlinks happen under the lock: a reader holding the file open still
 * reads it whole, one that comes later misses. */
static void evict_to_budget(sp_prefix_disk *d) {
    char path[4096];
    while (d->stats.bytes > d->stats.budget_bytes && d->lru_head >= 0) {
        const int e = d->lru_head;
        file_name(d, d->entries[e].hash, d->entries[e].kind, path,
                  sizeof path);
        unlink(path);
        index_remove(d, e);
        d->stats.evicted++;
    }
}

/* ------------------------------------------------------------- writer */

static void write_job(sp_prefix_disk *d, job *j) {
    unsigned char header[SP_PREFIX_BLOCK_HEADER];
    sp_prefix_block_header(&j->key, j->payload, header);
    char path[4096];
    file_name(d, j->key.hash, j->key.kind, path, sizeof path);
    const void *parts[2] = {header, j->payload};
    const size_t sizes[2] = {sizeof header, (size_t)j->key.payload_bytes};
    spindle_error err = {0};
    const spindle_status st =
        sp_atomic_write(path, parts, sizes, 2,
                        "SPINDLE_TEST_PROMPT_CACHE_PAUSE_MS", &err);
    pthread_mutex_lock(&d->lock);
    const int e = index_find(d, j->key.hash, j->key.kind);
    if (st) {
        if (e >= 0 && !d->entries[e].written) index_remove(d, e);
        if (!d->warned_write)
            sp_log(SPINDLE_LOG_WARN, "prompt cache: %s (later write failures "
                                     "are not reported)", err.message);
        d->warned_write = true;
    } else if (e >= 0 && !d->entries[e].written) {
        mark_written(d, e, sizeof header + (size_t)j->key.payload_bytes);
        d->stats.written++;
        evict_to_budget(d);
    }
    pthread_mutex_unlock(&d->lock);
}

static void *writer_main(void *arg) {
    sp_prefix_disk *d = arg;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (!d->queue_head && !d->stopping)
            pthread_cond_wait(&d->wake, &d->lock);
        job *j = d->queue_head;
        if (!j) break;   /* stopping, and everything is written */
        d->queue_head = j->next;
        if (!d->queue_head) d->queue_tail = NULL;
        pthread_mutex_unlock(&d->lock);
        write_job(d, j);
        pthread_mutex_lock(&d->lock);
        d->queued_bytes -= (size_t)j->key.payload_bytes;
        free(j->payload);
        free(j);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* ------------------------------------------------------------- opening */

typedef struct found_file {
    uint64_t hash;
    uint32_t kind;
    size_t bytes;
    struct timespec mtime;
} found_file;

static int older_first(const void *a, const void *b) {
    const struct timespec *x = &((const found_file *)a)->mtime;
    const struct timespec *y = &((const found_file *)b)->mtime;
    if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? -1 : 1;
    return (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

/* The hash and kind a block or state file's name gives, or false for any
 * other name. */
static bool parse_name(const char *name, uint64_t *hash, uint32_t *kind) {
    if (strlen(name) != NAME_LEN) return false;
    if (!strcmp(name + 16, EXT[0])) *kind = SP_PREFIX_FILE_BLOCK;
    else if (!strcmp(name + 16, EXT[1])) *kind = SP_PREFIX_FILE_STATE;
    else return false;
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        const char c = name[i];
        const int v = c >= '0' && c <= '9' ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        h = h << 4 | (uint64_t)v;
    }
    *hash = h;
    return true;
}

/* Index the directory's block and state files, oldest first; remove the
 * temporary files a killed writer left. */
static spindle_status scan_dir(sp_prefix_disk *d, spindle_error *err) {
    DIR *dir = opendir(d->dir);
    if (!dir)
        return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot read the prompt "
                       "cache directory: %s", d->dir, strerror(errno));
    found_file *found = NULL;
    size_t n = 0, cap = 0;
    char path[4096];
    spindle_status st = SPINDLE_OK;
    for (struct dirent *de; !st && (de = readdir(dir));) {
        uint64_t hash;
        uint32_t kind;
        snprintf(path, sizeof path, "%s/%s", d->dir, de->d_name);
        if (strstr(de->d_name, ".kvb.tmp-") || strstr(de->d_name, ".kvs.tmp-")) {
            unlink(path);
            continue;
        }
        struct stat sb;
        if (!parse_name(de->d_name, &hash, &kind) || stat(path, &sb) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            found_file *g = realloc(found, cap * sizeof *g);
            if (!g) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
            else found = g;
        }
        if (!st)
            found[n++] = (found_file){hash, kind, (size_t)sb.st_size,
                                      sb.st_mtim};
    }
    closedir(dir);
    if (!st && n) qsort(found, n, sizeof *found, older_first);
    for (size_t i = 0; !st && i < n; i++) {
        if (index_find(d, found[i].hash, found[i].kind) >= 0) continue;
        const int e = index_add(d, found[i].hash, found[i].kind);
        if (e < 0) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        else mark_written(d, e, found[i].bytes);
    }
    free(found);
    if (!st) evict_to_budget(d);
    return st;
}

/* The tier's memory, once no writer thread runs. */
static void free_disk(sp_prefix_disk *d) {
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->wake);
    free(d->entries);
    free(d->buckets);
    free(d->dir);
    free(d);
}

spindle_status sp_prefix_disk_open(const char *dir, size_t budget,
                                   const char *fingerprint, sp_kv_pool *pool,
                                   spindle_error *err) {
    if (!dir || !*dir || !fingerprint ||
        strlen(fingerprint) != SP_PREFIX_FP_LEN)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "bad prompt cache setup");
    if (!sp_make_dirs(dir))
        return sp_fail(err, SPINDLE_ERR_IO, "%s: cannot create the prompt "
                       "cache directory: %s", dir, strerror(errno));
    sp_prefix_disk *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(dir))) {
        free(d);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->wake, NULL);
    d->free_head = d->lru_head = d->lru_tail = -1;
    memcpy(d->proto.fingerprint, fingerprint, SP_PREFIX_FP_LEN);
    d->proto.kv_type = (uint32_t)sp_kv_pool_type(pool);
    d->proto.payload_bytes = sp_kv_pool_block_bytes(pool);
    d->file_bytes = SP_PREFIX_BLOCK_HEADER + sp_kv_pool_block_bytes(pool);
    d->stats.budget_bytes = budget;
    spindle_status st = index_grow(d) ? SPINDLE_OK
                        : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = scan_dir(d, err);
    if (!st && pthread_create(&d->writer, NULL, writer_main, d) != 0)
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "cannot start the prompt cache "
                     "writer thread");
    if (st) {
        free_disk(d);
        return st;
    }
    sp_kv_pool_set_disk(pool, d);
    return SPINDLE_OK;
}

void sp_prefix_disk_close(sp_prefix_disk *d) {
    if (!d) return;
    pthread_mutex_lock(&d->lock);
    d->stopping = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->writer, NULL);
    free_disk(d);
}

/* ------------------------------------------------------- offer and load */

/* A job for the file (kind, hash) with room for `bytes` of payload, the
 * entry claimed (not written yet, so no other offer queues it), or NULL:
 * no tier, over the budget, already there or queued, the queue full, no
 * memory. The caller fills the payload and enqueues it. */
static job *claim(sp_prefix_disk *d, uint32_t kind, uint64_t hash,
                  uint64_t parent, const int32_t *tokens, size_t bytes) {
    if (!d || SP_PREFIX_BLOCK_HEADER + bytes > d->stats.budget_bytes)
        return NULL;
    const size_t most = bytes > (size_t)d->proto.payload_bytes
                            ? bytes : (size_t)d->proto.payload_bytes;
    const size_t bound = 8 * most > QUEUE_BYTES ? 8 * most : QUEUE_BYTES;
    pthread_mutex_lock(&d->lock);
    bool take = index_find(d, hash, kind) < 0;
    if (take && d->queued_bytes + bytes > bound) {
        take = false;
        d->stats.dropped++;
    }
    const int e = take ? index_add(d, hash, kind) : -1;
    pthread_mutex_unlock(&d->lock);
    if (e < 0) return NULL;
    job *j = calloc(1, sizeof *j);
    if (j) j->payload = malloc(bytes ? bytes : 1);
    if (!j || !j->payload) {
        free(j);
        pthread_mutex_lock(&d->lock);
        index_remove(d, e);
        pthread_mutex_unlock(&d->lock);
        return NULL;
    }
    j->key = d->proto;
    j->key.kind = kind;
    j->key.payload_bytes = bytes;
    j->key.hash = hash;
    j->key.parent = parent;
    memcpy(j->key.tokens, tokens, sizeof j->key.tokens);
    return j;
}

static void enqueue(sp_prefix_disk *d, job *j) {
    pthread_mutex_lock(&d->lock);
    d->queued_bytes += (size_t)j->key.payload_bytes;
    if (d->queue_tail) d->queue_tail->next = j;
    else d->queue_head = j;
    d->queue_tail = j;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
}

void sp_prefix_disk_offer(sp_kv_pool *p, int block, uint64_t hash,
                          uint64_t parent, const int32_t *tokens) {
    sp_prefix_disk *d = sp_kv_pool_disk(p);
    job *j = d ? claim(d, SP_PREFIX_FILE_BLOCK, hash, parent, tokens,
                       (size_t)d->proto.payload_bytes)
               : NULL;
    if (!j) return;
    sp_kv_pool_block_copy_out(p, block, j->payload);
    enqueue(d, j);
}

void sp_prefix_disk_offer_state(sp_kv_pool *p, uint64_t hash, uint64_t parent,
                                const int32_t *tokens,
                                const sp_state_snapshot *snap) {
    sp_prefix_disk *d = sp_kv_pool_disk(p);
    const size_t bytes = sp_state_snapshot_bytes(snap);
    job *j = d && bytes ? claim(d, SP_PREFIX_FILE_STATE, hash, parent, tokens,
                                bytes)
                        : NULL;
    if (!j) return;
    memcpy(j->payload, sp_state_snapshot_data(snap), bytes);
    enqueue(d, j);
}

bool sp_prefix_disk_wants_state(sp_kv_pool *p, uint64_t hash) {
    sp_prefix_disk *d = sp_kv_pool_disk(p);
    if (!d) return false;
    pthread_mutex_lock(&d->lock);
    const bool wants = index_find(d, hash, SP_PREFIX_FILE_STATE) < 0;
    pthread_mutex_unlock(&d->lock);
    return wants;
}

bool sp_prefix_disk_has_state(sp_kv_pool *p, uint64_t hash) {
    sp_prefix_disk *d = sp_kv_pool_disk(p);
    if (!d) return false;
    pthread_mutex_lock(&d->lock);
    const int e = index_find(d, hash, SP_PREFIX_FILE_STATE);
    const bool has = e >= 0 && d->entries[e].written;
    pthread_mutex_unlock(&d->lock);
    return has;
}

/* The whole file at path, or NULL (missing: *missing set). */
static unsigned char *read_file(const char *path, size_t most, size_t *n,
                                bool *missing) {
    *missing = false;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *missing = true;
        return NULL;
    }
    struct stat sb;
    unsigned char *buf = NULL;
    if (fstat(fd, &sb) == 0 && (size_t)sb.st_size <= most)
        buf = malloc(sb.st_size ? (size_t)sb.st_size : 1);
    size_t got = 0;
    while (buf && got < (size_t)sb.st_size) {
        const ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    *n = got;
    return buf;
}

/* Refuse a file: say why once, forget it and delete it. */
static void refuse(sp_prefix_disk *d, uint64_t hash, uint32_t kind,
                   const char *path, const char *why) {
    sp_log(SPINDLE_LOG_WARN, "prompt cache: %s: %s; ignored and deleted",
           path, why);
    pthread_mutex_lock(&d->lock);
    const int e = index_find(d, hash, kind);
    if (e >= 0 && d->entries[e].written) index_remove(d, e);
    d->stats.refused++;
    unlink(path);
    pthread_mutex_unlock(&d->lock);
}

/* Whether the file of (hash, kind) is there; made the most recently
 * used. */
static bool touch_entry(sp_prefix_disk *d, uint64_t hash, uint32_t kind) {
    pthread_mutex_lock(&d->lock);
    const int e = index_find(d, hash, kind);
    const bool there = e >= 0 && d->entries[e].written;
    if (there) {
        lru_unlink(d, e);
        lru_push(d, e);
    }
    pthread_mutex_unlock(&d->lock);
    return there;
}

/* The file of want's kind and hash read and checked against want (its
 * contents in *data to free, its payload in *payload and *payload_bytes),
 * or false: no such file, or refused (deleted, with a warning). */
static bool read_checked(sp_prefix_disk *d, const sp_prefix_block_key *want,
                         size_t most, char *path, size_t path_size,
                         unsigned char **data, const void **payload,
                         size_t *payload_bytes) {
    *data = NULL;
    if (!touch_entry(d, want->hash, want->kind)) return false;
    file_name(d, want->hash, want->kind, path, path_size);
    size_t n = 0;
    bool missing;
    unsigned char *buf = read_file(path, most, &n, &missing);
    if (!buf) {
        if (!missing)
            refuse(d, want->hash, want->kind, path, "unreadable or oversized");
        return false;
    }
    sp_prefix_block_key got;
    spindle_error err = {0};
    if (sp_prefix_block_parse(buf, n, true, &got, payload, &err) ||
        !sp_prefix_block_matches(&got, want, &err)) {
        refuse(d, want->hash, want->kind, path, err.message);
        free(buf);
        return false;
    }
    *data = buf;
    *payload_bytes = (size_t)got.payload_bytes;
    return true;
}

static void count_loaded(sp_prefix_disk *d, const char *path) {
    utimensat(AT_FDCWD, path, NULL, 0);   /* the LRU order on disk */
    pthread_mutex_lock(&d->lock);
    d->stats.loaded++;
    pthread_mutex_unlock(&d->lock);
}

int sp_prefix_disk_load(sp_kv_pool *p, uint64_t hash, uint64_t parent,
                        const int32_t *tokens) {
    sp_prefix_disk *d = sp_kv_pool_disk(p);
    if (!d) return -1;
    sp_prefix_block_key want = d->proto;
    want.hash = hash;
    want.parent = parent;
    memcpy(want.tokens, tokens, sizeof want.tokens);
    char path[4096];
    unsigned char *data;
    const void *payload;
    size_t bytes;
    if (!read_checked(d, &want, 2 * d->file_bytes + 4096, path, sizeof path,
                      &data, &payload, &bytes))
        return -1;
    const int block = sp_kv_pool_alloc(p);
    if (block >= 0) {
        sp_kv_pool_block_copy_in(p, block, payload);
        sp_kv_pool_publish(p, block, hash, parent, tokens, 0); /* base model */
        count_loaded(d, path);
    }
    free(data);
    return block;
}

sp_state_snapshot *sp_prefix_disk_load_state(sp_kv_pool *p,
                                             const sp_seq_state *s,
                                             uint64_t hash, uint64_t parent,
                                             const int32_t *tokens,
                                             int length) {
    sp_prefix_disk *d = sp_kv_pool_disk(p);
    if (!d) return NULL;
    sp_prefix_block_key want = d->proto;
    want.kind = SP_PREFIX_FILE_STATE;
    want.payload_bytes = 0;   /* any: the snapshot is checked below */
    want.hash = hash;
    want.parent = parent;
    memcpy(want.tokens, tokens, sizeof want.tokens);
    char path[4096];
    unsigned char *data;
    const void *payload;
    size_t bytes;
    if (!read_checked(d, &want, d->stats.budget_bytes, path, sizeof path,
                      &data, &payload, &bytes))
        return NULL;
    /* The snapshot's own structure, then its layers against the sequence
     * it goes into (the checks a restore makes) and the boundary. */
    sp_state_snapshot *snap = NULL;
    spindle_error err = {0};
    spindle_status st = sp_state_snapshot_from_bytes(payload, bytes, &snap,
                                                     &err);
    if (!st) st = sp_seq_state_check_tail(s, snap, length, &err);
    if (st) {
        if (st != SPINDLE_ERR_MEMORY)
            refuse(d, hash, SP_PREFIX_FILE_STATE, path, err.message);
        sp_state_snapshot_free(snap);
        snap = NULL;
    } else {
        count_loaded(d, path);
    }
    free(data);
    return snap;
}

bool sp_prefix_disk_stats_get(sp_kv_pool *p, sp_prefix_disk_stats *out) {
    sp_prefix_disk *d = sp_kv_pool_disk(p);
    if (!d) return false;
    pthread_mutex_lock(&d->lock);
    *out = d->stats;
    pthread_mutex_unlock(&d->lock);
    return true;
}

/* ----------------------------------------------------------- invariants */

/* (lock held) Marks free entries 1 and chained ones 2 in `mark`. */
static spindle_status check_entries(sp_prefix_disk *d, char *mark,
                                    spindle_error *err) {
    int n_free = 0, n_chained = 0;
    for (int e = d->free_head; e >= 0; e = d->entries[e].hash_next) {
        if (e >= d->cap_entries || mark[e])
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "prompt cache index: free list reaches entry %d "
                           "again or out of range", e);
        mark[e] = 1;
        n_free++;
    }
    for (int i = 0; d->buckets && i <= d->bucket_mask; i++)
        for (int e = d->buckets[i]; e >= 0; e = d->entries[e].hash_next) {
            const entry *x = &d->entries[e];
            if (e >= d->cap_entries || mark[e] ||
                bucket_of(d, x->hash, x->kind) != &d->buckets[i] ||
                index_find(d, x->hash, x->kind) != e)
                return sp_fail(err, SPINDLE_ERR_INTERNAL,
                               "prompt cache index: entry %d in bucket %d is "
                               "free, listed twice, in another bucket or a "
                               "duplicate key", e, i);
            mark[e] = 2;
            n_chained++;
        }
    if (n_chained != d->n_entries || n_free + n_chained != d->cap_entries)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "prompt cache index: %d entries chained and %d free "
                       "of %d; counted %d in use", n_chained, n_free,
                       d->cap_entries, d->n_entries);
    return SPINDLE_OK;
}

/* (lock held) The LRU: exactly the written entries, linked both ways,
 * their bytes and count those of the stats. */
static spindle_status check_written(const sp_prefix_disk *d, const char *mark,
                                    spindle_error *err) {
    int files = 0, written = 0, prev = -1;
    size_t bytes = 0;
    for (int e = d->lru_head; e >= 0; prev = e, e = d->entries[e].next) {
        if (e >= d->cap_entries || mark[e] != 2 || !d->entries[e].written ||
            d->entries[e].prev != prev || ++files > d->n_entries)
            return sp_fail(err, SPINDLE_ERR_INTERNAL,
                           "prompt cache index: LRU entry %d is free, "
                           "unwritten, mislinked or seen again", e);
        bytes += d->entries[e].bytes;
    }
    for (int e = 0; e < d->cap_entries; e++)
        written += mark[e] == 2 && d->entries[e].written;
    if (prev != d->lru_tail || files != written ||
        files != d->stats.files || bytes != d->stats.bytes)
        return sp_fail(err, SPINDLE_ERR_INTERNAL,
                       "prompt cache index: LRU of %d files, %zu bytes; %d "
                       "entries written; stats say %d files, %zu bytes",
                       files, bytes, written, d->stats.files, d->stats.bytes);
    return SPINDLE_OK;
}

spindle_status sp_prefix_disk_check(sp_prefix_disk *d, spindle_error *err) {
    pthread_mutex_lock(&d->lock);
    char *mark = calloc((size_t)d->cap_entries + 1, 1);
    spindle_status st = mark ? check_entries(d, mark, err)
                             : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = check_written(d, mark, err);
    pthread_mutex_unlock(&d->lock);
    free(mark);
    return st;
}
