/* Snapshots of a sequence state (seq_state.h): one flat allocation of a
 * header, a record per layer and the raw buffers, so that it can be stored
 * byte for byte; restore checks every record against the state it goes
 * into, as it would have to for one read back from a file. */
#include "runtime/seq_state_impl.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define SNAPSHOT_MAGIC 0x54535053u /* "SPST" */
#define SNAPSHOT_VERSION 1u
#define DATA_ALIGN 64

typedef struct snapshot_layer {
    int32_t kind, n_kv_heads, head_dim, window;
    int32_t conv_kernel, conv_channels;
    int64_t state_floats;
    int32_t first_pos;    /* KV kinds: position of the first stored row */
    int32_t n_positions;  /* KV kinds: rows stored */
    uint64_t offset;      /* of the layer's data from the snapshot start */
    uint64_t bytes;
} snapshot_layer;

struct sp_state_snapshot {
    uint32_t magic, version;
    int32_t n_layers, length;
    int32_t kv_type, max_rollback;
    uint64_t total_bytes;
    snapshot_layer layers[];
};

/* The positions [*from, length) a snapshot keeps of a KV layer: all for
 * full KV; for window KV the window and the rollback margin, as a slide of
 * the buffer would keep them. */
static int kv_first_kept(const sp_seq_state *s, const sp_layer_state *L) {
    if (L->d.kind != SP_STATE_WINDOW_KV) return 0;
    int64_t from = (int64_t)s->length - (L->d.window - 1) - s->opt.max_rollback;
    if (from < L->kv.base) from = L->kv.base;
    return (int)from;
}

/* Bytes of positions [from, to) of layer l (a KV kind). */
static size_t kv_rows_bytes(const sp_seq_state *s, int l, int from, int to) {
    const sp_layer_state *L = &s->layers[l];
    return sp_state_kind_paged(L->d.kind)
               ? sp_kv_pool_rows_bytes(s->pool, l, from, to)
               : sp_kv_rows_bytes(&L->kv, from, to);
}

static size_t align_up(size_t n) {
    return (n + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
}

static void describe(snapshot_layer *r, const sp_layer_state_desc *d) {
    r->kind = (int32_t)d->kind;
    r->n_kv_heads = d->n_kv_heads;
    r->head_dim = d->head_dim;
    r->window = d->window;
    r->conv_kernel = d->conv_kernel;
    r->conv_channels = d->conv_channels;
    r->state_floats = d->state_floats;
}

/* tail: every layer but the full-KV ones (those record no rows), the
 * boundary state of the prefix index (prefix_states.h). */
static spindle_status take_snapshot(const sp_seq_state *s, bool tail,
                                    sp_state_snapshot **out,
                                    spindle_error *err) {
    *out = NULL;
    size_t at = align_up(sizeof(sp_state_snapshot) +
                         (size_t)s->n_layers * sizeof(snapshot_layer));
    snapshot_layer *recs = calloc((size_t)s->n_layers + 1, sizeof *recs);
    if (!recs) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int l = 0; l < s->n_layers; l++) {
        const sp_layer_state *L = &s->layers[l];
        snapshot_layer *r = &recs[l];
        describe(r, &L->d);
        if (tail && sp_state_kind_paged(L->d.kind)) {
            r->first_pos = s->length;
        } else if (sp_layer_is_kv(L)) {
            r->first_pos = kv_first_kept(s, L);
            r->n_positions = s->length - r->first_pos;
            r->bytes = kv_rows_bytes(s, l, r->first_pos, s->length);
        } else if (L->d.kind == SP_STATE_RECURRENT) {
            r->bytes = L->floats * sizeof(float);
        }
        r->offset = at;
        at = align_up(at + r->bytes);
    }
    sp_state_snapshot *snap = calloc(1, at);
    if (!snap) {
        free(recs);
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "out of memory for a snapshot of %zu bytes", at);
    }
    *snap = (sp_state_snapshot){SNAPSHOT_MAGIC, SNAPSHOT_VERSION,
                                s->n_layers, s->length, (int32_t)s->opt.kv_type,
                                s->opt.max_rollback, at};
    memcpy(snap->layers, recs, (size_t)s->n_layers * sizeof *recs);
    free(recs);
    unsigned char *base = (unsigned char *)snap;
    for (int l = 0; l < s->n_layers; l++) {
        const sp_layer_state *L = &s->layers[l];
        const snapshot_layer *r = &snap->layers[l];
        if (sp_state_kind_paged(L->d.kind) && tail)
            continue;
        if (sp_state_kind_paged(L->d.kind))
            sp_kv_pool_read(s->pool, l, s->blocks, 0, s->length,
                            base + r->offset);
        else if (sp_layer_is_kv(L))
            sp_kv_buffer_read(&L->kv, r->first_pos, s->length,
                              base + r->offset);
        else if (L->d.kind == SP_STATE_RECURRENT)
            memcpy(base + r->offset, L->slots[L->current].data, r->bytes);
    }
    *out = snap;
    return SPINDLE_OK;
}

spindle_status sp_seq_state_snapshot(const sp_seq_state *s,
                                     sp_state_snapshot **out,
                                     spindle_error *err) {
    return take_snapshot(s, false, out, err);
}

size_t sp_seq_state_tail_bytes(const sp_seq_state *s) {
    size_t n = 0;
    for (int l = 0; l < s->n_layers; l++) {
        const sp_layer_state *L = &s->layers[l];
        if (L->d.kind == SP_STATE_WINDOW_KV)
            n += sp_kv_rows_bytes(&L->kv, kv_first_kept(s, L), s->length);
        else if (L->d.kind == SP_STATE_RECURRENT)
            n += L->floats * sizeof(float);
    }
    return n;
}

spindle_status sp_seq_state_snapshot_tail(const sp_seq_state *s,
                                          sp_state_snapshot **out,
                                          spindle_error *err) {
    return take_snapshot(s, true, out, err);
}

/* What makes record l unusable for layer L of s (a short phrase), or
 * NULL. */
static const char *record_problem(const sp_seq_state *s,
                                  const sp_state_snapshot *snap, int l,
                                  bool tail) {
    const sp_layer_state *L = &s->layers[l];
    const snapshot_layer *r = &snap->layers[l];
    snapshot_layer want = {0};
    describe(&want, &L->d);
    if (r->kind != want.kind || r->n_kv_heads != want.n_kv_heads ||
        r->head_dim != want.head_dim || r->window != want.window ||
        r->conv_kernel != want.conv_kernel ||
        r->conv_channels != want.conv_channels ||
        r->state_floats != want.state_floats)
        return "a different state layout";
    uint64_t bytes = 0;
    if (tail && sp_state_kind_paged(L->d.kind)) {
        if (r->n_positions != 0) return "rows of a full-KV layer";
    } else if (sp_layer_is_kv(L)) {
        int64_t first = snap->length - (int64_t)L->d.window + 1;
        if (sp_state_kind_paged(L->d.kind) || first < 0) first = 0;
        if (r->first_pos < 0 || r->first_pos > first ||
            r->n_positions != snap->length - r->first_pos)
            return "KV positions that do not cover its length";
        bytes = kv_rows_bytes(s, l, r->first_pos, snap->length);
    } else if (L->d.kind == SP_STATE_RECURRENT) {
        bytes = L->floats * sizeof(float);
    }
    if (r->bytes != bytes || r->offset > snap->total_bytes ||
        snap->total_bytes - r->offset < r->bytes)
        return "data of the wrong size";
    return NULL;
}

static const char *kv_type_name(int32_t t) {
    return t == SP_KV_F32 ? "f32" : t == SP_KV_BF16 ? "bf16" : t == SP_KV_F16 ? "f16" : "unknown";
}

static spindle_status check_snapshot(const sp_seq_state *s,
                                     const sp_state_snapshot *snap, bool tail,
                                     spindle_error *err) {
    if (snap->magic != SNAPSHOT_MAGIC || snap->version != SNAPSHOT_VERSION)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "not a sequence snapshot");
    if (snap->n_layers != s->n_layers)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the snapshot is of another model (%d layers; this "
                       "sequence: %d)", snap->n_layers, s->n_layers);
    if (snap->kv_type != (int32_t)s->opt.kv_type)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the snapshot's KV cache holds %s elements, this "
                       "sequence's %s (the KV type must be the same)",
                       kv_type_name(snap->kv_type), kv_type_name(s->opt.kv_type));
    if (snap->length < 0 ||
        (s->opt.max_length > 0 && snap->length > s->opt.max_length))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the snapshot's %d tokens exceed the context limit %d",
                       snap->length, s->opt.max_length);
    for (int l = 0; l < s->n_layers; l++) {
        const char *problem = record_problem(s, snap, l, tail);
        if (problem)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "snapshot layer %d: %s", l, problem);
    }
    return SPINDLE_OK;
}

/* Writes the snapshot's layers into s (its full-KV layers too, into s's
 * blocks, when `full_kv`; a tail snapshot has none) and takes its length. */
static void write_layers(sp_seq_state *s, const sp_state_snapshot *snap,
                         bool full_kv) {
    const unsigned char *base = (const unsigned char *)snap;
    for (int l = 0; l < s->n_layers; l++) {
        sp_layer_state *L = &s->layers[l];
        const snapshot_layer *r = &snap->layers[l];
        if (sp_state_kind_paged(L->d.kind)) {
            if (full_kv)
                sp_kv_pool_write(s->pool, l, s->blocks, 0, snap->length,
                                 base + r->offset);
        } else if (L->d.kind == SP_STATE_WINDOW_KV) {
            L->kv.base = r->first_pos;
            sp_kv_buffer_write(&L->kv, r->first_pos, snap->length,
                               base + r->offset);
        } else if (L->d.kind == SP_STATE_RECURRENT) {
            sp_recurrent_forget_kept(L);
            memcpy(L->slots[L->current].data, base + r->offset, r->bytes);
            L->slots[L->current].length = snap->length;
        }
    }
    s->length = snap->length;
    s->pending = 0;
}

spindle_status sp_seq_state_restore(sp_seq_state *s,
                                    const sp_state_snapshot *snap,
                                    spindle_error *err) {
    spindle_status st = check_snapshot(s, snap, false, err);
    /* Room first (growing keeps the current contents, so a failure leaves
     * the state as it was), then the copies, which cannot fail; the
     * full-KV blocks last, since replacing them cannot be undone. */
    for (int l = 0; l < s->n_layers && !st; l++) {
        sp_layer_state *L = &s->layers[l];
        const int n = snap->layers[l].n_positions;
        if (n > 0 && L->d.kind == SP_STATE_WINDOW_KV)
            st = sp_window_fit(s, L, s->length, n, err);
    }
    if (!st) st = sp_blocks_replace(s, snap->length, err);
    if (st) return st;
    write_layers(s, snap, true);
    return SPINDLE_OK;
}

spindle_status sp_seq_state_check_snapshot(const sp_seq_state *s,
                                           const sp_state_snapshot *snap,
                                           spindle_error *err) {
    return check_snapshot(s, snap, false, err);
}

spindle_status sp_seq_state_restore_tail(sp_seq_state *s,
                                         const sp_state_snapshot *snap,
                                         spindle_error *err) {
    spindle_status st = check_snapshot(s, snap, true, err);
    for (int l = 0; l < s->n_layers && !st; l++) {
        sp_layer_state *L = &s->layers[l];
        const int n = snap->layers[l].n_positions;
        if (n > 0 && L->d.kind == SP_STATE_WINDOW_KV)
            st = sp_window_fit(s, L, s->length, n, err);
    }
    if (st) return st;
    write_layers(s, snap, false);
    return SPINDLE_OK;
}

spindle_status sp_seq_state_check_tail(const sp_seq_state *s,
                                       const sp_state_snapshot *snap,
                                       int length, spindle_error *err) {
    if (snap->length != length)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "a state at %d tokens where its block ends at %d",
                       snap->length, length);
    spindle_error why = {0};
    if (check_snapshot(s, snap, true, &why))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s", why.message);
    return SPINDLE_OK;
}

void sp_state_snapshot_free(sp_state_snapshot *snap) { free(snap); }

size_t sp_state_snapshot_bytes(const sp_state_snapshot *snap) {
    return snap ? (size_t)snap->total_bytes : 0;
}

int sp_state_snapshot_length(const sp_state_snapshot *snap) {
    return snap ? snap->length : 0;
}

const void *sp_state_snapshot_data(const sp_state_snapshot *snap) {
    return snap;
}

/* Only the block's own structure here (header, record table, total size);
 * restore checks the records against the state they go into. */
spindle_status sp_state_snapshot_from_bytes(const void *data, size_t n,
                                            sp_state_snapshot **out,
                                            spindle_error *err) {
    *out = NULL;
    sp_state_snapshot head;
    if (!data || n < sizeof head)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "sequence snapshot truncated");
    memcpy(&head, data, sizeof head);
    if (head.magic != SNAPSHOT_MAGIC || head.version != SNAPSHOT_VERSION)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "not a sequence snapshot");
    if (head.n_layers < 0 || head.total_bytes != n ||
        (n - sizeof head) / sizeof(snapshot_layer) < (size_t)head.n_layers)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "sequence snapshot of inconsistent size");
    sp_state_snapshot *snap = malloc(n);
    if (!snap)
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "out of memory for a snapshot of %zu bytes", n);
    memcpy(snap, data, n);
    *out = snap;
    return SPINDLE_OK;
}
