/* Per-layer sequence state (seq_state.h): the policies of each kind over
 * the KV storage of kv_cache.c and the recurrent state slots. Snapshots are
 * in seq_state_snapshot.c. */
#include "runtime/seq_state_impl.h"
#include "base/error.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"full KV", "window KV", "recurrent",
                                         "none", "latent KV"};

const char *sp_state_kind_name(sp_state_kind kind) {
    return (int)kind >= 0 && (int)kind < 5 ? kind_names[kind] : NULL;
}

/* Elements of one recurrent slot past which sizes are refused (16 GiB). */
#define MAX_RECURRENT_FLOATS ((int64_t)1 << 32)

spindle_status sp_layer_state_desc_check(const sp_layer_state_desc *d,
                                         int layer, spindle_error *err) {
    switch (d->kind) {
    case SP_STATE_WINDOW_KV:
        if (d->window <= 0)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "layer %d: window KV state with window %d", layer,
                           d->window);
        /* fall through */
    case SP_STATE_LATENT_KV:
        if (d->kind == SP_STATE_LATENT_KV && d->n_kv_heads != 1)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "layer %d: latent KV state of %d heads (one row "
                           "per position)", layer, d->n_kv_heads);
        /* fall through */
    case SP_STATE_FULL_KV:
        if (d->n_kv_heads <= 0 || d->head_dim <= 0 ||
            (int64_t)d->n_kv_heads * d->head_dim > (1 << 24))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "layer %d: KV state of %d heads of %d elements",
                           layer, d->n_kv_heads, d->head_dim);
        return SPINDLE_OK;
    case SP_STATE_RECURRENT: {
        if (d->conv_kernel < 0 || d->conv_channels < 0 || d->state_floats < 0)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "layer %d: recurrent state with a negative size",
                           layer);
        const int64_t total = sp_recurrent_conv_floats(d) + d->state_floats;
        if (total <= 0 || total > MAX_RECURRENT_FLOATS)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "layer %d: recurrent state of %lld floats", layer,
                           (long long)total);
        return SPINDLE_OK;
    }
    case SP_STATE_NONE:
        return SPINDLE_OK;
    }
    return sp_fail(err, SPINDLE_ERR_FORMAT, "layer %d: unknown state kind %d",
                   layer, (int)d->kind);
}

int64_t sp_recurrent_conv_floats(const sp_layer_state_desc *d) {
    return d->conv_kernel > 1
               ? (int64_t)(d->conv_kernel - 1) * d->conv_channels
               : 0;
}

bool sp_layer_is_kv(const sp_layer_state *L) {
    return sp_state_kind_paged(L->d.kind) || L->d.kind == SP_STATE_WINDOW_KV;
}

/* ------------------------------------------------------- recurrent slots */

static size_t slot_bytes(const sp_layer_state *L) {
    return L->floats * sizeof(float);
}

static int find_free(const sp_layer_state *L) {
    for (int i = 0; i < L->n_slots; i++)
        if (L->slots[i].role == SP_SLOT_FREE) return i;
    return -1;
}

/* Index of a newly allocated free slot; -1 when out of memory. */
static int new_slot(sp_layer_state *L, bool zeroed) {
    if (L->n_slots == L->cap_slots) {
        int cap = L->cap_slots ? 2 * L->cap_slots : 4;
        sp_state_slot *p = realloc(L->slots, (size_t)cap * sizeof *p);
        if (!p) return -1;
        L->slots = p;
        L->cap_slots = cap;
    }
    float *data = zeroed ? calloc(L->floats, sizeof(float))
                         : malloc(slot_bytes(L));
    if (!data) return -1;
    L->slots[L->n_slots] = (sp_state_slot){data, SP_SLOT_FREE, 0};
    return L->n_slots++;
}

static int free_slots(const sp_layer_state *L) {
    int n = 0;
    for (int i = 0; i < L->n_slots; i++) n += L->slots[i].role == SP_SLOT_FREE;
    return n;
}

/* Forget what an abandoned pass wrote (its work slot and checkpoints). */
static void drop_pass(sp_layer_state *L) {
    for (int i = 0; i < L->n_slots; i++)
        if (L->slots[i].role == SP_SLOT_WORK || L->slots[i].role == SP_SLOT_NEW)
            L->slots[i].role = SP_SLOT_FREE;
    L->work = -1;
}

/* Every kept state but the current one is released. */
void sp_recurrent_forget_kept(sp_layer_state *L) {
    for (int i = 0; i < L->n_slots; i++)
        if (i != L->current) L->slots[i].role = SP_SLOT_FREE;
    L->work = -1;
}

/* ------------------------------------------------------------- lifecycle */

spindle_status sp_seq_state_new(const sp_layer_state_desc *layers,
                                int n_layers, const sp_seq_state_options *opt,
                                sp_seq_state **out, spindle_error *err) {
    *out = NULL;
    if (n_layers < 0 || (n_layers > 0 && !layers) || !opt ||
        opt->max_rollback < 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "bad sequence state layout");
    spindle_status st = SPINDLE_OK;
    for (int l = 0; l < n_layers && !st; l++)
        st = sp_layer_state_desc_check(&layers[l], l, err);
    if (st) return st;
    sp_seq_state *s = calloc(1, sizeof *s);
    if (s) s->layers = calloc((size_t)n_layers + 1, sizeof *s->layers);
    if (!s || !s->layers) {
        free(s);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    s->n_layers = n_layers;
    s->opt = *opt;
    for (int l = 0; l < n_layers && !st; l++) {
        sp_layer_state *L = &s->layers[l];
        L->d = layers[l];
        L->work = -1;
        if (sp_layer_is_kv(L)) {
            st = sp_kv_buffer_init(&L->kv, L->d.n_kv_heads, L->d.head_dim,
                                   opt->kv_type, err);
        } else if (L->d.kind == SP_STATE_RECURRENT) {
            L->floats = (size_t)(sp_recurrent_conv_floats(&L->d) +
                                 L->d.state_floats);
            L->current = new_slot(L, true);
            if (L->current < 0)
                st = sp_fail(err, SPINDLE_ERR_MEMORY,
                             "out of memory for the recurrent state of "
                             "layer %d", l);
            else
                L->slots[L->current].role = SP_SLOT_CURRENT;
        }
    }
    if (!st) st = sp_blocks_init(s, err);
    if (st) {
        sp_seq_state_free(s);
        return st;
    }
    *out = s;
    return SPINDLE_OK;
}

void sp_seq_state_free(sp_seq_state *s) {
    if (!s) return;
    sp_blocks_free(s);
    for (int l = 0; l < s->n_layers; l++) {
        sp_layer_state *L = &s->layers[l];
        sp_kv_buffer_free(&L->kv);
        for (int i = 0; i < L->n_slots; i++) free(L->slots[i].data);
        free(L->slots);
    }
    free(s->layers);
    free(s);
}

int sp_seq_state_length(const sp_seq_state *s) { return s->length; }

size_t sp_seq_state_bytes(const sp_seq_state *s) {
    size_t n = sizeof *s + (size_t)s->n_layers * sizeof *s->layers;
    for (int l = 0; l < s->n_layers; l++) {
        const sp_layer_state *L = &s->layers[l];
        n += sp_kv_buffer_bytes(&L->kv) +
             (size_t)L->n_slots * (slot_bytes(L) + sizeof *L->slots);
    }
    if (s->has_full)
        n += (size_t)s->n_blocks * sp_kv_pool_block_bytes(s->pool) +
             (size_t)s->cap_blocks * (sizeof *s->blocks + sizeof *s->hashes +
                                      SP_KV_BLOCK_TOKENS * sizeof *s->tokens);
    return n;
}

/* ------------------------------------------------------------- KV kinds */

/* Positions a window layer keeps behind the length: its window and the
 * rollback margin. */
static int64_t window_keep(const sp_seq_state *s, const sp_layer_state *L) {
    return (int64_t)L->d.window - 1 + s->opt.max_rollback;
}

static int64_t clip_to_limit(const sp_seq_state *s, int64_t cap) {
    if (s->opt.max_length > 0 && cap > s->opt.max_length)
        cap = s->opt.max_length;
    return cap;
}

static spindle_status too_long(int64_t rows, spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_LIMIT,
                   "a KV cache of %lld positions is too large",
                   (long long)rows);
}

/* Window KV: slide the kept positions to the front when the buffer would
 * overflow; grow it only when what is kept plus the new tokens would leave
 * less than a margin of free rows (so a slide happens at most every
 * window - 1 + K tokens and moves as many rows: amortized O(1)). */
spindle_status sp_window_fit(sp_seq_state *s, sp_layer_state *L,
                             int64_t end, int64_t rows_at_least,
                             spindle_error *err) {
    sp_kv_buffer *b = &L->kv;
    if (b->k && end - b->base <= b->capacity && rows_at_least <= b->capacity)
        return SPINDLE_OK;
    const int64_t keep = window_keep(s, L);
    int64_t base = s->length - keep;
    if (base < b->base) base = b->base;
    const int64_t need = end - base > rows_at_least ? end - base : rows_at_least;
    int64_t cap = b->capacity;
    if (!b->k || need + keep > cap) {
        cap = (need + keep + 63) / 64 * 64;
        cap = clip_to_limit(s, cap);
        if (cap < need) cap = need;
    }
    if (cap > INT_MAX / 2) return too_long(cap, err);
    return sp_kv_buffer_relayout(b, (int)base, (int)cap, s->length, err);
}

/* ------------------------------------------------------------ the pass */

static spindle_status reserve_recurrent(sp_seq_state *s, sp_layer_state *L,
                                        int l, int n_new, spindle_error *err) {
    drop_pass(L);
    const int copies = n_new - 1 < s->opt.max_rollback ? n_new - 1
                                                        : s->opt.max_rollback;
    for (int have = free_slots(L); have < copies + 1; have++)
        if (new_slot(L, false) < 0)
            return sp_fail(err, SPINDLE_ERR_MEMORY,
                           "out of memory for the recurrent checkpoints of "
                           "layer %d", l);
    L->work = find_free(L);
    memcpy(L->slots[L->work].data, L->slots[L->current].data, slot_bytes(L));
    L->slots[L->work].role = SP_SLOT_WORK;
    return SPINDLE_OK;
}

spindle_status sp_seq_state_reserve(sp_seq_state *s, int n_new,
                                    spindle_error *err) {
    s->pending = 0;
    if (n_new < 1)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "no new tokens to reserve");
    const int64_t end = (int64_t)s->length + n_new;
    if (s->opt.max_length > 0 && end > s->opt.max_length)
        return sp_fail(err, SPINDLE_ERR_LIMIT,
                       "context of %lld tokens exceeds the limit of %d",
                       (long long)end, s->opt.max_length);
    spindle_status st = sp_blocks_fit(s, end, err);
    for (int l = 0; l < s->n_layers && !st; l++) {
        sp_layer_state *L = &s->layers[l];
        switch (L->d.kind) {
        case SP_STATE_FULL_KV: break;
        case SP_STATE_LATENT_KV: break;
        case SP_STATE_WINDOW_KV: st = sp_window_fit(s, L, end, 0, err); break;
        case SP_STATE_RECURRENT:
            st = reserve_recurrent(s, L, l, n_new, err);
            break;
        case SP_STATE_NONE: break;
        }
    }
    if (!st) s->pending = n_new;
    return st;
}

void sp_seq_state_kv_store(sp_seq_state *s, int layer, int pos,
                           const float *k, const float *v) {
    if (sp_state_kind_paged(s->layers[layer].d.kind))
        sp_kv_pool_store(s->pool, layer, s->blocks, pos, k, v);
    else
        sp_kv_buffer_store(&s->layers[layer].kv, pos, k, v);
}

sp_kv_view sp_seq_state_kv_view(const sp_seq_state *s, int layer) {
    if (sp_state_kind_paged(s->layers[layer].d.kind))
        return sp_kv_pool_view(s->pool, layer, s->blocks, s->n_blocks);
    return sp_kv_buffer_view(&s->layers[layer].kv);
}

sp_recurrent_state sp_seq_state_recurrent(sp_seq_state *s, int layer) {
    sp_layer_state *L = &s->layers[layer];
    sp_recurrent_state r = {NULL, NULL};
    if (L->d.kind != SP_STATE_RECURRENT || L->work < 0) return r;
    float *data = L->slots[L->work].data;
    const int64_t conv = sp_recurrent_conv_floats(&L->d);
    r.conv = conv ? data : NULL;
    r.state = L->d.state_floats ? data + conv : NULL;
    return r;
}

int sp_seq_state_first_checkpoint(const sp_seq_state *s) {
    const int first = s->pending - 1 - s->opt.max_rollback;
    return first > 0 ? first : 0;
}

void sp_seq_state_checkpoint(sp_seq_state *s, int layer, int t) {
    sp_layer_state *L = &s->layers[layer];
    if (L->d.kind != SP_STATE_RECURRENT || L->work < 0 ||
        t < sp_seq_state_first_checkpoint(s) || t >= s->pending - 1)
        return;
    const int length = s->length + t + 1;
    int slot = -1;
    for (int i = 0; i < L->n_slots && slot < 0; i++)
        if (L->slots[i].role == SP_SLOT_NEW && L->slots[i].length == length)
            slot = i;                      /* the same token recorded again */
    if (slot < 0) slot = find_free(L);
    if (slot < 0) return; /* more calls than the pass has tokens */
    memcpy(L->slots[slot].data, L->slots[L->work].data, slot_bytes(L));
    L->slots[slot].role = SP_SLOT_NEW;
    L->slots[slot].length = length;
}

void sp_seq_state_commit(sp_seq_state *s) {
    const int n_new = s->pending;
    if (n_new < 1) return;
    sp_blocks_commit(s, n_new);
    for (int l = 0; l < s->n_layers; l++) {
        sp_layer_state *L = &s->layers[l];
        if (L->d.kind != SP_STATE_RECURRENT) continue;
        for (int i = 0; i < L->n_slots; i++) {
            sp_state_slot *slot = &L->slots[i];
            if (slot->role == SP_SLOT_KEPT) slot->role = SP_SLOT_FREE;
            else if (slot->role == SP_SLOT_NEW) slot->role = SP_SLOT_KEPT;
        }
        sp_state_slot *before = &L->slots[L->current];
        before->role = n_new <= s->opt.max_rollback ? SP_SLOT_KEPT
                                                    : SP_SLOT_FREE;
        before->length = s->length;
        L->current = L->work;
        L->slots[L->current].role = SP_SLOT_CURRENT;
        L->slots[L->current].length = s->length + n_new;
        L->work = -1;
    }
    s->length += n_new;
    s->pending = 0;
    sp_blocks_boundary_state(s);
}

/* ------------------------------------------------------------- truncate */

static int kept_slot(const sp_layer_state *L, int length) {
    for (int i = 0; i < L->n_slots; i++)
        if (L->slots[i].role == SP_SLOT_KEPT && L->slots[i].length == length)
            return i;
    return -1;
}

/* Why layer l cannot be truncated to `length` (SPINDLE_OK if it can). */
static spindle_status can_truncate(const sp_seq_state *s, int l, int length,
                                   spindle_error *err) {
    const sp_layer_state *L = &s->layers[l];
    if (length == 0 || length == s->length) return SPINDLE_OK;
    if (L->d.kind == SP_STATE_WINDOW_KV) {
        int64_t first = (int64_t)length - L->d.window + 1;
        if (first < 0) first = 0;
        if (L->kv.base <= first) return SPINDLE_OK;
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "cannot truncate a sequence of %d tokens to %d: layer "
                       "%d (window KV, window %d) keeps positions %d on "
                       "(rollback is guaranteed for %d tokens)",
                       s->length, length, l, L->d.window, L->kv.base,
                       s->opt.max_rollback);
    }
    if (L->d.kind == SP_STATE_RECURRENT && kept_slot(L, length) < 0)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "cannot truncate a sequence of %d tokens to %d: layer "
                       "%d (recurrent) keeps only the states of the last "
                       "forward pass, up to %d tokens back",
                       s->length, length, l, s->opt.max_rollback);
    return SPINDLE_OK;
}

static void truncate_recurrent(sp_layer_state *L, int length) {
    if (length == 0) {
        sp_recurrent_forget_kept(L);
        memset(L->slots[L->current].data, 0, slot_bytes(L));
        L->slots[L->current].length = 0;
        return;
    }
    const int slot = kept_slot(L, length);
    L->slots[L->current].role = SP_SLOT_FREE;
    L->current = slot;
    L->slots[slot].role = SP_SLOT_CURRENT;
    /* Kept states of shorter lengths are still states of this sequence. */
    for (int i = 0; i < L->n_slots; i++)
        if (L->slots[i].role == SP_SLOT_KEPT && L->slots[i].length > length)
            L->slots[i].role = SP_SLOT_FREE;
}

spindle_status sp_seq_state_truncate(sp_seq_state *s, int length,
                                     spindle_error *err) {
    if (length < 0 || length > s->length)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "cannot truncate a sequence of %d tokens to %d",
                       s->length, length);
    for (int l = 0; l < s->n_layers; l++) {
        spindle_status st = can_truncate(s, l, length, err);
        if (st) return st;
    }
    s->pending = 0;
    sp_blocks_truncate(s, length);
    for (int l = 0; l < s->n_layers; l++) {
        sp_layer_state *L = &s->layers[l];
        if (L->d.kind == SP_STATE_RECURRENT) {
            drop_pass(L);
            if (length != s->length) truncate_recurrent(L, length);
        } else if (L->d.kind == SP_STATE_WINDOW_KV && length == 0) {
            L->kv.base = 0; /* nothing stored is needed any more */
        }
    }
    s->length = length;
    return SPINDLE_OK;
}
