/* The model's KV block pool: its byte budget (the load option, or room for
 * kv_sequences full contexts within the memory available beside the
 * weights), the fingerprint that
 * namespaces its prefix index, and its disk tier (the on-disk prompt
 * cache, runtime/prefix_disk.h). */
#include "models/model.h"
#include "base/error.h"
#include "runtime/prefix_disk.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Bytes of memory available now (after the weights were loaded):
 * MemAvailable, or the free pages where /proc is not there. */
static size_t available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
        fclose(f);
        if (kb) return (size_t)kb * 1024;
    }
    const long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size
                                 : (size_t)1 << 30;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* What makes two models' blocks incompatible: the files (their path, or
 * with a disk tier their content fingerprint, so that blocks on disk
 * survive a move of the model and never meet another model's), the shapes
 * and the cache type. */
static uint64_t model_fingerprint(const spindle_model *m, const char *files) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a(h, files, strlen(files));
    h = fnv1a(h, m->cfg.model_type, strlen(m->cfg.model_type));
    const int32_t shape[] = {m->cfg.n_layers, m->cfg.hidden_size,
                             m->cfg.n_kv_heads, m->cfg.head_dim,
                             m->cfg.vocab_size, (int32_t)m->kv_type};
    return fnv1a(h, shape, sizeof shape);
}

/* The default budget: `sequences` full contexts, as a server's slots each
 * at its context limit need (llama-server and vLLM size their caches from
 * the context and the parallelism, not from the machine), but never more
 * than 90% of the memory available now. */
static size_t default_budget(const spindle_model *m, size_t block, int sequences) {
    const size_t blocks_per_context =
        ((size_t)(m->max_context > 0 ? m->max_context : 4096) +
         SP_KV_BLOCK_TOKENS - 1) / SP_KV_BLOCK_TOKENS;
    size_t bytes = (size_t)sequences * blocks_per_context * block;
    const size_t most = available_bytes() / 10 * 9;
    if (bytes > most) bytes = most;
    return bytes < block ? block : bytes;
}

static spindle_status init_pool(spindle_model *m, const spindle_load_options *options,
                                const char *files, spindle_error *err) {
    const size_t block = sp_kv_pool_block_bytes_for(
        m->state_desc, m->cfg.n_layers, m->kv_type);
    const int sequences = options ? options->kv_sequences : 0;
    if (sequences < 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "kv_sequences %d is negative", sequences);
    size_t bytes = options ? options->kv_bytes : 0;
    if (!bytes)
        bytes = default_budget(m, block, sequences ? sequences : SPINDLE_DEFAULT_KV_SEQUENCES);
    m->kv_budget = bytes;
    spindle_status st = sp_kv_pool_new(m->state_desc, m->cfg.n_layers,
                                       m->kv_type, bytes,
                                       model_fingerprint(m, files),
                                       &m->kv_pool, err);
    if (!st && options && options->kv_events)
        sp_kv_pool_set_events(m->kv_pool, options->kv_events,
                              options->kv_events_user);
    return st;
}

spindle_status sp_model_init_kv_pool(spindle_model *m,
                                     const spindle_load_options *options,
                                     spindle_error *err) {
    const char *dir = options ? options->prompt_cache_dir : NULL;
    if (!dir || !*dir) return init_pool(m, options, m->dir, err);
    char fp[SPINDLE_FINGERPRINT_LEN + 1];
    spindle_status st = spindle_model_fingerprint(m, fp, err);
    if (!st) st = init_pool(m, options, fp, err);
    if (st) return st;
    /* No full-KV layer (no prefix index), or the boundary-state store of a
     * hybrid/sliding-window model could not be made. Such a model's
     * boundary states go to disk beside its blocks (prefix_disk.h). */
    if (!sp_kv_pool_block_bytes(m->kv_pool) ||
        !sp_kv_pool_prefix_ok(m->kv_pool))
        return SPINDLE_OK;
    const size_t disk = options->prompt_cache_disk_bytes
                            ? options->prompt_cache_disk_bytes
                            : SPINDLE_DEFAULT_PROMPT_CACHE_DISK_BYTES;
    return sp_prefix_disk_open(dir, disk, fp, m->kv_pool, err);
}

spindle_status spindle_model_kv_pool_info(const spindle_model *model,
                                          spindle_kv_pool_info *out,
                                          spindle_error *err) {
    if (!model || !out || !model->kv_pool)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    sp_kv_pool_counts c;
    sp_kv_pool_counts_get(model->kv_pool, &c);
    *out = (spindle_kv_pool_info){
        .budget_bytes = model->kv_budget,
        .block_bytes = sp_kv_pool_block_bytes(model->kv_pool),
        .block_tokens = SP_KV_BLOCK_TOKENS,
        .blocks = sp_kv_pool_capacity(model->kv_pool),
        .used = c.used, .cached = c.cached, .free = c.free,
        .indexed = c.indexed,
        .hash_root = sp_kv_pool_root_hash(model->kv_pool, 0)};
    sp_prefix_disk_stats d;
    if (sp_prefix_disk_stats_get(model->kv_pool, &d)) {
        out->disk_budget_bytes = d.budget_bytes;
        out->disk_bytes = d.bytes;
        out->disk_files = d.files;
        out->disk_loaded = d.loaded;
        out->disk_written = d.written;
        out->disk_refused = d.refused;
        out->disk_evicted = d.evicted;
        out->disk_dropped = d.dropped;
    }
    return SPINDLE_OK;
}
