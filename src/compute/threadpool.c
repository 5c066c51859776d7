/* Persistent worker pool for the compute kernels.
 *
 * A decode step runs hundreds of short parallel regions, so a region must cost
 * a few microseconds at most: workers stay alive, spin for a short while after
 * each region (so the next one starts without a futex round trip) and only
 * then sleep on a condition variable. Work inside a region is handed out by an
 * atomic chunk counter, so a late or descheduled worker simply takes fewer
 * chunks instead of holding everybody up.
 *
 * Job publication protocol (all atomics are sequentially consistent where the
 * argument depends on a total order):
 *   - `gen` is odd while a job is open and even while the pool is idle.
 *   - A worker announces itself in `active` BEFORE reading `gen`; it touches
 *     the job fields only if `gen` is odd and new to it.
 *   - The caller closes the job (gen -> even) once every chunk is done, then
 *     waits for `active` to drop to zero before it may rewrite the fields for
 *     the next job. A worker that read an odd `gen` incremented `active`
 *     before that read, hence before the close, so the caller sees it.
 */
#include "compute/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SP_POOL_MAX_THREADS 256
/* How long an idle worker (or a caller waiting for stragglers) spins before
 * it falls back to sleeping / yielding. Long enough to bridge the serial gap
 * between two kernels of one layer, short enough not to burn a core when the
 * model is idle. */
#define SP_POOL_SPIN_NS 20000

struct sp_pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    int n_started;

    pthread_mutex_t region_mu; /* serializes regions from different threads */
    pthread_mutex_t sleep_mu;
    pthread_cond_t sleep_cv;
    atomic_int sleepers;
    atomic_bool stop;

    atomic_uint_fast64_t gen;
    atomic_int active;

    /* The job: written only while gen is even and active == 0. */
    sp_range_fn fn;
    void *ctx;
    int64_t n, grain, n_chunks;
    atomic_int_fast64_t next_chunk;
    atomic_int_fast64_t done_chunks;
};

typedef struct sp_worker_arg {
    sp_pool *pool;
    int id;
} sp_worker_arg;

/* The pool region this thread is currently executing, for nested calls. */
static _Thread_local const sp_pool *tls_pool;
static _Thread_local int tls_thread_id;

static inline void sp_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t sp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Claim and run chunks of the current job until none is left. */
static void sp_pool_run_chunks(sp_pool *pool, int thread_id) {
    const int64_t n = pool->n, grain = pool->grain, n_chunks = pool->n_chunks;
    int64_t done = 0;
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&pool->next_chunk, 1,
                                              memory_order_relaxed);
        if (c >= n_chunks) break;
        int64_t begin = c * grain;
        int64_t end = begin + grain < n ? begin + grain : n;
        pool->fn(pool->ctx, begin, end, thread_id);
        done++;
    }
    if (done)
        atomic_fetch_add_explicit(&pool->done_chunks, done,
                                  memory_order_release);
}

static void *sp_worker_main(void *p) {
    sp_worker_arg *arg = p;
    sp_pool *pool = arg->pool;
    const int id = arg->id;
    free(arg);
    /* Not the current gen: a job may already be open when this thread gets
     * to run, and it should help with it. */
    uint64_t seen = 0;

    while (!atomic_load_explicit(&pool->stop, memory_order_relaxed)) {
        /* Wait for a generation we have not handled yet: spin, then sleep. */
        uint64_t g = atomic_load_explicit(&pool->gen, memory_order_relaxed);
        if (g == seen || !(g & 1)) {
            uint64_t t0 = sp_now_ns();
            unsigned spins = 0;
            bool woke = false;
            for (;;) {
                sp_cpu_relax();
                g = atomic_load_explicit(&pool->gen, memory_order_relaxed);
                if ((g != seen && (g & 1)) ||
                    atomic_load_explicit(&pool->stop, memory_order_relaxed)) {
                    woke = true;
                    break;
                }
                if ((++spins & 63) == 0 && sp_now_ns() - t0 > SP_POOL_SPIN_NS)
                    break;
            }
            if (!woke) {
                pthread_mutex_lock(&pool->sleep_mu);
                atomic_fetch_add(&pool->sleepers, 1);
                for (;;) {
                    g = atomic_load(&pool->gen);
                    if ((g != seen && (g & 1)) || atomic_load(&pool->stop))
                        break;
                    pthread_cond_wait(&pool->sleep_cv, &pool->sleep_mu);
                }
                atomic_fetch_sub(&pool->sleepers, 1);
                pthread_mutex_unlock(&pool->sleep_mu);
            }
            continue; /* re-check stop and gen from the top */
        }

        /* Announce first, then confirm the job is still open (see header). */
        atomic_fetch_add(&pool->active, 1);
        g = atomic_load(&pool->gen);
        if ((g & 1) && g != seen) {
            seen = g;
            tls_pool = pool;
            tls_thread_id = id;
            sp_pool_run_chunks(pool, id);
            tls_pool = NULL;
        } else {
            seen = g;
        }
        atomic_fetch_sub(&pool->active, 1);
    }
    return NULL;
}

int sp_pool_size(const sp_pool *pool) { return pool ? pool->n_threads : 1; }

static void sp_pool_shutdown(sp_pool *pool) {
    pthread_mutex_lock(&pool->sleep_mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->sleep_cv);
    pthread_mutex_unlock(&pool->sleep_mu);
    for (int i = 0; i < pool->n_started; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->sleep_cv);
    pthread_mutex_destroy(&pool->sleep_mu);
    pthread_mutex_destroy(&pool->region_mu);
    free(pool->threads);
    free(pool);
}

sp_pool *sp_pool_create(int n_threads) {
    if (n_threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = online > 0 ? (int)online : 1;
    }
    if (n_threads > SP_POOL_MAX_THREADS) n_threads = SP_POOL_MAX_THREADS;

    sp_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->stop, false);
    atomic_init(&pool->gen, 0);
    atomic_init(&pool->active, 0);
    atomic_init(&pool->next_chunk, 0);
    atomic_init(&pool->done_chunks, 0);
    if (pthread_mutex_init(&pool->region_mu, NULL) != 0) {
        free(pool);
        return NULL;
    }
    if (pthread_mutex_init(&pool->sleep_mu, NULL) != 0) {
        pthread_mutex_destroy(&pool->region_mu);
        free(pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->sleep_cv, NULL) != 0) {
        pthread_mutex_destroy(&pool->sleep_mu);
        pthread_mutex_destroy(&pool->region_mu);
        free(pool);
        return NULL;
    }
    pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
    if (!pool->threads) {
        sp_pool_shutdown(pool);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        sp_worker_arg *arg = malloc(sizeof *arg);
        if (!arg) {
            sp_pool_shutdown(pool);
            return NULL;
        }
        arg->pool = pool;
        arg->id = i;
        if (pthread_create(&pool->threads[pool->n_started], NULL,
                           sp_worker_main, arg) != 0) {
            free(arg);
            sp_pool_shutdown(pool);
            return NULL;
        }
        pool->n_started++;
    }
    return pool;
}

void sp_pool_destroy(sp_pool *pool) {
    if (pool) sp_pool_shutdown(pool);
}

static void sp_run_serial(int64_t n, int64_t grain, sp_range_fn fn, void *ctx,
                          int thread_id) {
    for (int64_t b = 0; b < n; b += grain)
        fn(ctx, b, b + grain < n ? b + grain : n, thread_id);
}

/* Spin, then yield, until `cond(pool)` holds. */
static void sp_wait_until(sp_pool *pool, bool (*cond)(sp_pool *)) {
    uint64_t t0 = 0;
    unsigned spins = 0;
    while (!cond(pool)) {
        if (spins < 64 || (t0 && sp_now_ns() - t0 < SP_POOL_SPIN_NS)) {
            sp_cpu_relax();
        } else if (!t0) {
            t0 = sp_now_ns();
        } else {
            sched_yield();
        }
        spins++;
    }
}

static bool sp_all_chunks_done(sp_pool *pool) {
    return atomic_load_explicit(&pool->done_chunks, memory_order_acquire) ==
           pool->n_chunks;
}

static bool sp_no_worker_active(sp_pool *pool) {
    return atomic_load(&pool->active) == 0;
}

void sp_pool_for(sp_pool *pool, int64_t n, int64_t grain, sp_range_fn fn,
                 void *ctx) {
    if (n <= 0 || !fn) return;
    int threads = sp_pool_size(pool);
    if (grain <= 0) grain = (n + threads - 1) / threads;
    int64_t n_chunks = (n - 1) / grain + 1;

    if (!pool || threads == 1 || n_chunks == 1) {
        sp_run_serial(n, grain, fn, ctx, tls_pool == pool ? tls_thread_id : 0);
        return;
    }
    /* A call from inside one of this pool's regions runs on the calling
     * thread alone: its workers are busy with the outer region. */
    if (tls_pool == pool) {
        sp_run_serial(n, grain, fn, ctx, tls_thread_id);
        return;
    }

    pthread_mutex_lock(&pool->region_mu);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n = n;
    pool->grain = grain;
    pool->n_chunks = n_chunks;
    atomic_store_explicit(&pool->next_chunk, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->done_chunks, 0, memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1); /* open: odd */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->sleep_mu);
        pthread_cond_broadcast(&pool->sleep_cv);
        pthread_mutex_unlock(&pool->sleep_mu);
    }

    const sp_pool *outer = tls_pool;
    int outer_id = tls_thread_id;
    tls_pool = pool;
    tls_thread_id = 0;
    sp_pool_run_chunks(pool, 0);
    tls_pool = outer;
    tls_thread_id = outer_id;

    sp_wait_until(pool, sp_all_chunks_done);
    atomic_fetch_add(&pool->gen, 1); /* close: even */
    sp_wait_until(pool, sp_no_worker_active);
    pthread_mutex_unlock(&pool->region_mu);
}
