/* The grammar masks of a step computed while its forward pass runs.
 *
 * Once a step's tokens are sampled and its matchers advanced, the state
 * each constrained row will sample from next is known before the next
 * forward starts (after the speculative round too, which only looks at
 * the matchers and puts them back). The engine hands those gates to one
 * thread of its own, started at the first step that has a mask to
 * compute, and waits for it after the forward, before any sampling.
 *
 * Ownership: each gate of the job (its matcher and bits) is computed by
 * the one thread that claimed it; during the forward pass the stepping
 * thread touches no gate, matcher or request state it could free. The
 * automaton and mask cache behind the matchers are shared with other
 * requests and engines, and locked inside src/grammar/. Cancellation only
 * flags a request; it is ended and freed by the stepping thread after the
 * wait, so no gate is freed under the mask thread. */
#include "generation/engine.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"

/* A job is this step's gates; the mask thread and, once the forward is
 * done, the stepping thread itself claim them one at a time (`next`), so
 * sampling never waits for a thread that has not woken up yet, only for a
 * mask being computed. */
struct sp_mask_worker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    sp_grammar_gate **gates;    /* [max_seqs]: the job (set under lock) */
    int n_gates;
    atomic_int next;            /* gates claimed */
    unsigned job;               /* (lock) jobs handed over */
    bool active;                /* (lock) the mask thread is claiming */
    bool stopping;              /* (lock) */
};

bool sp_mask_overlap_wanted(const spindle_model *m) {
    const char *v = getenv("SPINDLE_GRAMMAR_OVERLAP");
    if (v && !strcmp(v, "0")) return false;
    if (v && !strcmp(v, "1")) return true;
    /* By default only where the forward leaves a core to the mask thread:
     * with every core computing it measured no gain beyond the noise
     * (bench/history/until-2026-12-07.md) and would take time slices from the
     * pool's workers, which meet at a barrier after every product. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 0 && sp_pool_size(m->pool) < cores;
}

/* Claim and compute the job's gates until none is left. */
static void run_gates(sp_mask_worker *w) {
    for (int i; (i = atomic_fetch_add(&w->next, 1)) < w->n_gates;)
        sp_grammar_gate_prefetch(w->gates[i]);
}

static void *mask_thread(void *arg) {
    sp_mask_worker *w = arg;
    unsigned seen = 0;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->job == seen && !w->stopping) pthread_cond_wait(&w->cond, &w->lock);
        if (w->job == seen) break;
        seen = w->job;
        if (atomic_load(&w->next) >= w->n_gates) continue;  /* all claimed */
        w->active = true;
        pthread_mutex_unlock(&w->lock);
        run_gates(w);
        pthread_mutex_lock(&w->lock);
        w->active = false;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void free_worker(sp_mask_worker *w) {
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w->gates);
    free(w);
}

/* The engine's mask thread, started now if it is not yet; NULL when it
 * cannot be (the masks are then computed at sampling, as with the overlap
 * off). */
static sp_mask_worker *worker(spindle_engine *e) {
    if (e->masks) return e->masks;
    sp_mask_worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->gates = calloc((size_t)e->max_seqs, sizeof *w->gates);
    if (!w->gates || pthread_mutex_init(&w->lock, NULL)) {
        free(w->gates);
        free(w);
        return NULL;
    }
    if (pthread_cond_init(&w->cond, NULL)) {
        pthread_mutex_destroy(&w->lock);
        free(w->gates);
        free(w);
        return NULL;
    }
    if (pthread_create(&w->thread, NULL, mask_thread, w)) {
        free_worker(w);
        e->mask_overlap = false;   /* do not retry every step */
        return NULL;
    }
    return e->masks = w;
}

/* Whether entry i's first logits row samples from a mask not yet
 * computed. */
static bool row_needs_mask(const spindle_engine *e, int i) {
    const sp_request *r = e->entry_req[i];
    return e->entries[i].logits_mode != SPINDLE_LOGITS_NONE && !sp_request_ending(r) &&
           sp_grammar_gate_mask_stale(&r->grammar);
}

void sp_mask_prefetch_start(spindle_engine *e, int n_entries) {
    if (!e->mask_overlap) return;
    int first = 0;
    while (first < n_entries && !row_needs_mask(e, first)) first++;
    if (first == n_entries) return;
    sp_mask_worker *w = worker(e);
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->n_gates = 0;
    for (int i = first; i < n_entries; i++)
        if (row_needs_mask(e, i)) w->gates[w->n_gates++] = &e->entry_req[i]->grammar;
    atomic_store(&w->next, 0);
    w->job++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void sp_mask_prefetch_wait(spindle_engine *e) {
    sp_mask_worker *w = e->masks;
    if (!w) return;
    run_gates(w);   /* what the mask thread has not claimed yet */
    pthread_mutex_lock(&w->lock);
    while (w->active) pthread_cond_wait(&w->cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

void sp_mask_prefetch_free(spindle_engine *e) {
    sp_mask_worker *w = e->masks;
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    free_worker(w);
    e->masks = NULL;
}
