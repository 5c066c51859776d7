/* Persistent worker pool for the compute kernels.
 *
 * A decode step runs hundreds of short parallel regions, so a region must cost
 * a few microseconds at most: workers stay alive, spin for a short while after
 * each region (so the next one starts without a futex round trip) and only
 * then sleep on a condition variable. Work inside a region is handed out by an
 * atomic chunk counter, so a late or descheduled worker simply takes fewer
 * chunks instead of holding everybody up.
 *
 * Under contention (more runnable threads than cores: another process, or
 * other agents on a shared machine) spinning hurts: a spinning worker burns
 * the time slice it shares with the competing thread, and a caller spinning
 * for a descheduled straggler burns the core that straggler could have run
 * on. So the spin adapts to how long the caller's waits for stragglers run:
 * each wait long enough to mean a descheduled thread (SP_POOL_LONG_WAIT_NS)
 * halves it (down to SP_POOL_SPIN_MIN_NS), each other one grows it back by
 * a sixteenth. Past the spin a worker yields a few times and then sleeps,
 * and the caller yields a few times and then sleeps until the last chunk's
 * owner wakes it. A sleeper's wake-up preempts a CPU hog (the scheduler
 * credits sleepers), where a spinner only gets its fair share. Unloaded,
 * waits stay short and the full spin is kept.
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
/* The shortest adapted spin: about one futex round trip. */
#define SP_POOL_SPIN_MIN_NS 2000
/* sched_yield calls between the spin and sleeping. */
#define SP_POOL_YIELDS 4
/* A caller's wait this long means a straggler lost its core (a time slice
 * is milliseconds; waking a sleeping worker takes tens of microseconds, and
 * must not count, or an unloaded pool would talk itself out of spinning). */
#define SP_POOL_LONG_WAIT_NS 250000

struct sp_pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    int n_started;

    pthread_mutex_t region_mu; /* serializes regions from different threads */
    pthread_mutex_t sleep_mu;
    pthread_cond_t sleep_cv;
    atomic_int sleepers;
    atomic_bool stop;
    /* The caller sleeps on done_cv (under sleep_mu) for the last chunks. */
    pthread_cond_t done_cv;
    atomic_bool caller_sleeping;
    /* The adapted spin (see the header comment), written by the caller. */
    atomic_uint_fast64_t spin_ns;

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
    if (!done) return;
    /* seq_cst: the caller sets caller_sleeping before it checks the count
     * under sleep_mu, so either it sees this chunk or this thread sees it
     * asleep (and takes the mutex, so the wake cannot precede its wait). */
    if (atomic_fetch_add(&pool->done_chunks, done) + done == n_chunks &&
        thread_id != 0 && atomic_load(&pool->caller_sleeping)) {
        pthread_mutex_lock(&pool->sleep_mu);
        pthread_cond_signal(&pool->done_cv);
        pthread_mutex_unlock(&pool->sleep_mu);
    }
}

static uint64_t sp_spin_ns(const sp_pool *pool) {
    return atomic_load_explicit(&pool->spin_ns, memory_order_relaxed);
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
            const uint64_t t0 = sp_now_ns(), spin = sp_spin_ns(pool);
            unsigned spins = 0, yields = 0;
            bool woke = false;
            for (;;) {
                if (yields) sched_yield();
                else sp_cpu_relax();
                g = atomic_load_explicit(&pool->gen, memory_order_relaxed);
                if ((g != seen && (g & 1)) ||
                    atomic_load_explicit(&pool->stop, memory_order_relaxed)) {
                    woke = true;
                    break;
                }
                if (yields && ++yields > SP_POOL_YIELDS) break;
                if (!yields && (++spins & 63) == 0 && sp_now_ns() - t0 > spin)
                    yields = 1;
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
    pthread_cond_destroy(&pool->done_cv);
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
    atomic_init(&pool->caller_sleeping, false);
    atomic_init(&pool->spin_ns, SP_POOL_SPIN_NS);
    if (pthread_cond_init(&pool->sleep_cv, NULL) != 0) {
        pthread_mutex_destroy(&pool->sleep_mu);
        pthread_mutex_destroy(&pool->region_mu);
        free(pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->done_cv, NULL) != 0) {
        pthread_cond_destroy(&pool->sleep_cv);
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

/* The caller's wait for the chunks other threads still run: spin for the
 * adapted time, yield a few times, then sleep until the last one is done;
 * then adapt the spin to how long this wait took. */
static void sp_wait_for_chunks(sp_pool *pool) {
    if (sp_all_chunks_done(pool)) return;
    const uint64_t t0 = sp_now_ns(), spin = sp_spin_ns(pool);
    unsigned spins = 0, yields = 0;
    while (!sp_all_chunks_done(pool) && yields <= SP_POOL_YIELDS) {
        if (yields) {
            sched_yield();
            yields++;
        } else {
            sp_cpu_relax();
            if ((++spins & 63) == 0 && sp_now_ns() - t0 > spin) yields = 1;
        }
    }
    if (!sp_all_chunks_done(pool)) {
        pthread_mutex_lock(&pool->sleep_mu);
        atomic_store(&pool->caller_sleeping, true);
        while (!sp_all_chunks_done(pool))
            pthread_cond_wait(&pool->done_cv, &pool->sleep_mu);
        atomic_store(&pool->caller_sleeping, false);
        pthread_mutex_unlock(&pool->sleep_mu);
    }
    const uint64_t waited = sp_now_ns() - t0;
    uint64_t next = spin;
    if (waited > SP_POOL_LONG_WAIT_NS)
        next = spin / 2 > SP_POOL_SPIN_MIN_NS ? spin / 2 : SP_POOL_SPIN_MIN_NS;
    else if (spin < SP_POOL_SPIN_NS)
        next = spin + SP_POOL_SPIN_NS / 16;
    if (next > SP_POOL_SPIN_NS) next = SP_POOL_SPIN_NS;
    atomic_store_explicit(&pool->spin_ns, next, memory_order_relaxed);
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

    sp_wait_for_chunks(pool);
    atomic_fetch_add(&pool->gen, 1); /* close: even */
    sp_wait_until(pool, sp_no_worker_active);
    pthread_mutex_unlock(&pool->region_mu);
}
