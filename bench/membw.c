/* Streaming-read bandwidth with N threads, the roofline for decode.
 *
 * usage: membw [THREADS=2] [MIB=1024] [PASSES=7]
 * Prints one JSON object: best and median GB/s (1e9 bytes/s) over the passes.
 * The buffer is larger than any last-level cache so every pass comes from
 * DRAM, as a decode step's weights do; each thread reads its own contiguous
 * slice, like a row-split matmul. Built by bench/compare with -O3
 * -march=native so the reads are as wide as the engines' loads. The buffer
 * is asked for 2 MiB transparent huge pages, as Spindle's weights are, so
 * that TLB misses do not understate the roofline. (This VM's bandwidth also
 * drifts between ~30 and ~55 GB/s over minutes with the host's load: take
 * roofline shares as rough, the side-by-side ratios as the measurement.)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint64_t *p;
    size_t n;
    pthread_barrier_t *start;
    uint64_t sum;
} slice;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    slice *s = arg;
    pthread_barrier_wait(s->start);
    /* Eight independent accumulators let the compiler vectorize and keep
     * enough loads in flight; the sum is kept so the reads are not elided. */
    uint64_t a[8] = {0};
    for (size_t i = 0; i + 8 <= s->n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += s->p[i + k];
    s->sum = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    pthread_barrier_wait(s->start);
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    long mib = argc > 2 ? atol(argv[2]) : 1024;
    int passes = argc > 3 ? atoi(argv[3]) : 7;
    if (threads < 1 || threads > 256 || mib < 16 || passes < 1 || passes > 100) {
        fprintf(stderr, "usage: membw [THREADS] [MIB>=16] [PASSES]\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20, n = bytes / sizeof(uint64_t);
    uint64_t *buf = aligned_alloc((size_t)2 << 20, bytes);
    if (!buf) { fprintf(stderr, "membw: out of memory\n"); return 1; }
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    memset(buf, 1, bytes); /* fault every page in before timing */

    pthread_t tid[256];
    slice sl[256];
    pthread_barrier_t bar;
    double gbs[100];
    uint64_t total = 0;
    for (int p = 0; p < passes; p++) {
        pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
        size_t per = (n / threads) & ~(size_t)7;
        for (int t = 0; t < threads; t++) {
            sl[t] = (slice){buf + (size_t)t * per, per, &bar, 0};
            pthread_create(&tid[t], NULL, reader, &sl[t]);
        }
        pthread_barrier_wait(&bar);
        double t0 = now();
        pthread_barrier_wait(&bar);
        double dt = now() - t0;
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            total += sl[t].sum;
        }
        pthread_barrier_destroy(&bar);
        gbs[p] = (double)per * threads * sizeof(uint64_t) / dt / 1e9;
    }
    qsort(gbs, (size_t)passes, sizeof gbs[0], cmp);
    printf("{\"threads\": %d, \"mib\": %ld, \"passes\": %d, \"best_gbs\": %.3f, "
           "\"median_gbs\": %.3f, \"checksum\": %llu}\n",
           threads, mib, passes, gbs[passes - 1], gbs[passes / 2],
           (unsigned long long)(total & 0xff));
    free(buf);
    return 0;
}
