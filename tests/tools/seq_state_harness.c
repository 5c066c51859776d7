/* Rollback, snapshot/restore and failed-forward checks of a model's
 * sequence state through the public API (driven by
 * tests/parity/test_seq_state.py on the tiny parity models).
 *
 *   seq_state_harness MODEL [--max-rollback K] [--window W] [--recurrent 1]
 *                     [--threads N]
 *   seq_state_harness MODEL --bytes N1,N2,...
 *
 * Every comparison is between two sequences of the same model that must be
 * in the same state, so their next logits must agree bit for bit:
 *  - rollback: a sequence that saw N tokens, then j more (one chunk, or one
 *    token at a time), truncated to N, against one that only saw N; for
 *    j <= K the truncation must succeed; for larger j it may, and must then
 *    be exact too. With --window W (the model has sliding-window layers of
 *    that window) a sequence stepped far past N must refuse truncation to N
 *    with SPINDLE_ERR_UNSUPPORTED naming "window KV", and be unchanged.
 *    With --recurrent (the model has recurrent layers, which keep the
 *    states of the last forward pass only) the truncation must succeed
 *    exactly when the j tokens came in one pass and j <= K, and otherwise
 *    be refused with SPINDLE_ERR_UNSUPPORTED naming "recurrent", the
 *    sequence unchanged; and within a pass of j <= 4 tokens truncation to
 *    every length inside it must match a sequence whose last pass ended
 *    there, within summation order (the two passes have different row
 *    counts, and f32 products of quantized weights tile rows, so their
 *    sums may round differently; a wrong checkpoint is off by far more);
 *  - snapshot: continue k tokens, restore, continue the same k tokens (in
 *    the sequence itself and in a fresh one); a snapshot restores into no
 *    other model (a second load of the same files); saved as a state file
 *    that records an adapter key, it is refused by the plain load and
 *    read back with its key by the keyed one, and steps as before;
 *  - a forward pass that fails (one batch entry over the context limit)
 *    leaves the other entry's sequence as it was;
 *  - one decode step of two sequences in one batch equals each one's step
 *    alone.
 * Prints one JSON object; exits 1 when a check failed, 2 on a usage or
 * load error. --bytes prints spindle_seq_state_bytes after each length. */
#include "spindle.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROMPT 40          /* the first PROMPT tokens go in one chunk */
#define CONTEXT 512        /* max_context of the load */
#define MAX_FAILURES 20

typedef struct harness {
    spindle_model *model;
    int vocab;
    int k;                 /* guaranteed rollback */
    int window;            /* 0: no window layers expected */
    int recurrent;         /* recurrent layers expected */
    int recurrent_refused; /* refusals seen, each as expected */
    int checks, n_failures;
    char failures[MAX_FAILURES][256];
    float *want, *got;     /* vocab floats each */
} harness;

static void fail(harness *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail(harness *h, const char *fmt, ...) {
    if (h->n_failures < MAX_FAILURES) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->failures[h->n_failures], sizeof h->failures[0], fmt, ap);
        va_end(ap);
    }
    h->n_failures++;
}

/* The token at position i of the main stream, and of a draft stream that
 * a rollback discards (different ids, as a rejected speculation). */
static int32_t token(const harness *h, int i, int draft) {
    uint32_t x = (uint32_t)i * 2654435761u + (draft ? 0x9E3779B9u : 17u);
    x ^= x >> 15;
    return (int32_t)(x % (uint32_t)h->vocab);
}

static void must(spindle_status st, const spindle_error *err,
                 const char *what) {
    if (st) {
        fprintf(stderr, "seq_state_harness: %s: %s\n", what, err->message);
        exit(2);
    }
}

static void forward(harness *h, spindle_seq *s, int from, int n, int draft,
                    float *logits) {
    int32_t ids[CONTEXT];
    for (int i = 0; i < n; i++) ids[i] = token(h, from + i, draft);
    spindle_batch_entry e = {.seq = s, .tokens = ids, .n_tokens = n,
                             .logits_mode = logits ? SPINDLE_LOGITS_LAST
                                                   : SPINDLE_LOGITS_NONE,
                             .logits = logits};
    spindle_error err = {0};
    must(spindle_forward(h->model, &e, 1, &err), &err, "forward");
}

/* A new sequence that saw n main-stream tokens: the prompt in one chunk,
 * then one token at a time (so every sequence built to n is in the same
 * state, bit for bit). */
static spindle_seq *build(harness *h, int n) {
    spindle_seq *s = NULL;
    spindle_error err = {0};
    must(spindle_seq_new(h->model, &s, &err), &err, "new sequence");
    const int chunk = n < PROMPT ? n : PROMPT;
    if (chunk > 0) forward(h, s, 0, chunk, 0, NULL);
    for (int i = chunk; i < n; i++) forward(h, s, i, 1, 0, NULL);
    return s;
}

/* Whether got matches want: bit for bit at tolerance 0, else within
 * tolerance times the largest |want| (summation-order differences). */
static int first_mismatch(const harness *h, float tolerance) {
    float scale = 0;
    for (int i = 0; i < h->vocab; i++)
        if (fabsf(h->want[i]) > scale) scale = fabsf(h->want[i]);
    for (int i = 0; i < h->vocab; i++) {
        const float d = fabsf(h->want[i] - h->got[i]);
        if (tolerance == 0 ? h->want[i] != h->got[i] : !(d <= tolerance * scale))
            return i;
    }
    return -1;
}

/* Both sequences take the next main-stream tokens (3 steps); their logits
 * must agree each time (see first_mismatch). */
static void compare_within(harness *h, spindle_seq *want, spindle_seq *got,
                           const char *what, float tolerance) {
    for (int step = 0; step < 3; step++) {
        const int len = spindle_seq_length(want);
        if (spindle_seq_length(got) != len) {
            fail(h, "%s: length %d, want %d", what, spindle_seq_length(got), len);
            return;
        }
        forward(h, want, len, 1, 0, h->want);
        forward(h, got, len, 1, 0, h->got);
        h->checks++;
        const int i = first_mismatch(h, tolerance);
        if (i >= 0) {
            fail(h, "%s, step %d: logits[%d] = %.9g, want %.9g", what, step, i,
                 (double)h->got[i], (double)h->want[i]);
            return;
        }
    }
}

static void compare_next(harness *h, spindle_seq *want, spindle_seq *got,
                         const char *what) {
    compare_within(h, want, got, what, 0);
}

/* Recurrent checkpoints: s saw n tokens, then j drafts in one pass;
 * truncated to n + a it must be the sequence that saw n, then a drafts. */
static void check_mid_pass(harness *h, int n, int j) {
    for (int a = 1; a < j; a++) {
        spindle_seq *s = build(h, n), *twin = build(h, n);
        forward(h, s, n, j, 1, NULL);
        forward(h, twin, n, a, 1, NULL);
        spindle_error err = {0};
        char what[128];
        snprintf(what, sizeof what, "N %d + %d in one chunk, truncated to N + %d",
                 n, j, a);
        if (spindle_seq_truncate(s, n + a, &err))
            fail(h, "%s: %s", what, err.message);
        else
            compare_within(h, twin, s, what, 1e-5f);
        spindle_seq_free(twin);
        spindle_seq_free(s);
    }
}

/* The expectations of a model with recurrent layers for the truncation
 * (status st) of s, which saw n tokens and then j drafts, to n: exact
 * within one pass of at most K tokens, else refused with s unchanged (as
 * a twin that saw the same tokens). */
static void recurrent_case(harness *h, spindle_seq *ref, spindle_seq *s,
                           int n, int j, int chunked, spindle_status st,
                           const spindle_error *err, const char *what) {
    const int reachable = chunked ? j <= h->k : j == 1;
    if (reachable) {
        if (st == SPINDLE_OK) compare_next(h, ref, s, what);
        else fail(h, "%s: refused within one pass of at most %d (%s)", what,
                  h->k, err->message);
        if (chunked && j <= 4) check_mid_pass(h, n, j);
        return;
    }
    if (st != SPINDLE_ERR_UNSUPPORTED || !strstr(err->message, "recurrent")) {
        fail(h, "%s: status %d (%s), want a recurrent refusal", what, (int)st,
             st ? err->message : "accepted");
        return;
    }
    h->recurrent_refused++;
    spindle_seq *twin = build(h, n);
    if (chunked) forward(h, twin, n, j, 1, NULL);
    else
        for (int i = 0; i < j; i++) forward(h, twin, n + i, 1, 1, NULL);
    char after[160];
    snprintf(after, sizeof after, "%s: after the refusal", what);
    compare_next(h, twin, s, after);
    spindle_seq_free(twin);
}

/* Whether the truncation of a sequence that saw n tokens and j drafts to
 * n was accepted; `ref` (restored from `at_n` here) only saw the n. */
static int rollback_case(harness *h, spindle_seq *ref,
                         const spindle_seq_snapshot *at_n, int n, int j,
                         int chunked) {
    spindle_seq *s = build(h, n);
    if (chunked) forward(h, s, n, j, 1, NULL);
    else
        for (int i = 0; i < j; i++) forward(h, s, n + i, 1, 1, NULL);
    spindle_error err = {0};
    must(spindle_seq_snapshot_restore(ref, at_n, &err), &err, "restore");
    char what[128];
    snprintf(what, sizeof what, "N %d + %d %s, truncated to N", n, j,
             chunked ? "in one chunk" : "one at a time");
    spindle_status st = spindle_seq_truncate(s, n, &err);
    if (h->recurrent) {
        recurrent_case(h, ref, s, n, j, chunked, st, &err, what);
        spindle_seq_free(s);
        return st == SPINDLE_OK;
    }
    if (st == SPINDLE_OK) compare_next(h, ref, s, what);
    else if (st != SPINDLE_ERR_UNSUPPORTED)
        fail(h, "%s: status %d (%s)", what, (int)st, err.message);
    else if (j <= h->k || !h->window)
        fail(h, "%s: refused within the guaranteed %d (%s)", what, h->k,
             err.message);
    spindle_seq_free(s);
    return st == SPINDLE_OK;
}

/* Rollbacks to n of j in [j_from, j_to] tokens, stepped (and in one chunk
 * if `chunks`), against one reference sequence that saw n. */
static void rollbacks_at(harness *h, int n, int j_from, int j_to, int chunks,
                         int *pairs, int *beyond_ok) {
    spindle_seq *ref = build(h, n);
    spindle_seq_snapshot *at_n = NULL;
    spindle_error err = {0};
    must(spindle_seq_snapshot_take(ref, &at_n, &err), &err, "snapshot");
    for (int j = j_from; j <= j_to; j++)
        for (int chunked = 0; chunked <= chunks; chunked++, ++*pairs)
            *beyond_ok += rollback_case(h, ref, at_n, n, j, chunked) && j > h->k;
    spindle_seq_snapshot_free(at_n);
    spindle_seq_free(ref);
}

/* Lengths around the first slides of a window-8 buffer (K = 8: at 64 and
 * 113) with j past the guarantee by more than a window; then every N
 * around the first slide (at 64 for K <= 24 here) stepping exactly K - 1
 * and K tokens: a slide on the last step is where a margin short by a
 * position shows. */
static void check_rollback(harness *h, int *pairs, int *beyond_ok) {
    const int lengths[] = {1, PROMPT, 56, 64, 100};
    const int extra = h->window ? h->window + 2 : 2;
    for (size_t a = 0; a < sizeof lengths / sizeof *lengths; a++)
        rollbacks_at(h, lengths[a], 1, h->k + extra, 1, pairs, beyond_ok);
    for (int n = 64 - h->k - 2; n <= 66; n++)
        rollbacks_at(h, n, h->k > 1 ? h->k - 1 : 1, h->k, 0, pairs, beyond_ok);
}

/* Stepped far past N, a window layer no longer holds N's window. */
static int check_beyond_window(harness *h) {
    const int n = 50, j = 4 * (h->window + h->k) + 64;
    spindle_seq *twin = build(h, n), *s = build(h, n);
    for (int i = 0; i < j; i++) {
        forward(h, s, n + i, 1, 0, NULL);
        forward(h, twin, n + i, 1, 0, NULL);
    }
    spindle_error err = {0};
    spindle_status st = spindle_seq_truncate(s, n, &err);
    int refused = st == SPINDLE_ERR_UNSUPPORTED &&
                  strstr(err.message, "window KV") != NULL;
    if (!refused)
        fail(h, "truncating %d tokens back: status %d (%s), want a window KV "
             "refusal", j, (int)st, err.message);
    compare_next(h, twin, s, "after a refused truncation");
    spindle_seq_free(twin);
    spindle_seq_free(s);
    return refused;
}

/* The snapshot (of the first n main-stream tokens) as a saved state file
 * recording an adapter key: the plain load refuses it (it would pass for
 * the base model's), the keyed one gives the key, the tokens and a state
 * whose next step (draft token n) has the logits `next`; a file saved
 * without a key gives none. */
static void check_state_file(harness *h, const spindle_seq_snapshot *snap,
                             int n, const float *next) {
    char path[] = "/tmp/spindle-seq-state-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) {
        fail(h, "no temporary file");
        return;
    }
    close(fd);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = token(h, i, 0);
    unsigned char key[SPINDLE_ADAPTER_KEY_BYTES], got[SPINDLE_ADAPTER_KEY_BYTES];
    for (int i = 0; i < SPINDLE_ADAPTER_KEY_BYTES; i++) key[i] = (unsigned char)(i + 1);
    spindle_error err = {0};
    must(spindle_seq_state_save_keyed(h->model, snap, ids, n, key, sizeof key, path,
                                      &err), &err, "save a keyed state");
    spindle_seq_snapshot *back = NULL;
    int32_t *toks = NULL;
    int got_n = 0;
    size_t key_n = 0;
    h->checks++;
    if (spindle_seq_state_load(h->model, path, &back, &toks, &got_n, &err) !=
            SPINDLE_ERR_ARGUMENT || !strstr(err.message, "LoRA adapter"))
        fail(h, "a state saved under an adapter loaded as the base model's");
    must(spindle_seq_state_load_keyed(h->model, path, &back, &toks, &got_n, got, &key_n,
                                      &err), &err, "load a keyed state");
    h->checks++;
    if (key_n != sizeof key || memcmp(got, key, sizeof key) || got_n != n ||
        memcmp(toks, ids, (size_t)n * sizeof *ids))
        fail(h, "a keyed state file gave back another key or other tokens");
    spindle_seq *s = NULL;
    must(spindle_seq_new(h->model, &s, &err), &err, "new sequence");
    must(spindle_seq_snapshot_restore(s, back, &err), &err, "restore a loaded state");
    forward(h, s, n, 1, 1, h->got);
    h->checks++;
    if (memcmp(h->got, next, (size_t)h->vocab * sizeof(float)))
        fail(h, "a state read back from its file steps differently");
    spindle_seq_free(s);
    spindle_seq_snapshot_free(back);
    spindle_free(toks);
    must(spindle_seq_state_save(h->model, snap, ids, n, path, &err), &err, "save a state");
    must(spindle_seq_state_load_keyed(h->model, path, &back, &toks, &got_n, got, &key_n,
                                      &err), &err, "load a state");
    h->checks++;
    if (key_n != 0) fail(h, "a base-model state file gave an adapter key");
    spindle_seq_snapshot_free(back);
    spindle_free(toks);
    free(ids);
    unlink(path);
}

static void check_snapshot(harness *h, const char *path, size_t *bytes) {
    const int n = 70, k = 6;
    spindle_seq *s = build(h, n), *fresh = NULL;
    spindle_seq_snapshot *snap = NULL;
    spindle_error err = {0};
    must(spindle_seq_snapshot_take(s, &snap, &err), &err, "snapshot");
    *bytes = spindle_seq_snapshot_bytes(snap);
    if (spindle_seq_snapshot_length(snap) != n)
        fail(h, "snapshot length %d, want %d", spindle_seq_snapshot_length(snap), n);
    float *first = malloc((size_t)k * h->vocab * sizeof(float));
    for (int i = 0; i < k; i++)
        forward(h, s, n + i, 1, 1, first + (size_t)i * h->vocab);
    must(spindle_seq_new(h->model, &fresh, &err), &err, "new sequence");
    spindle_seq *targets[2] = {s, fresh};
    for (int t = 0; t < 2; t++) {
        must(spindle_seq_snapshot_restore(targets[t], snap, &err), &err,
             "restore");
        for (int i = 0; i < k; i++) {
            forward(h, targets[t], n + i, 1, 1, h->got);
            h->checks++;
            if (memcmp(h->got, first + (size_t)i * h->vocab,
                       (size_t)h->vocab * sizeof(float))) {
                fail(h, "restored into the %s sequence: step %d differs",
                     t ? "fresh" : "same", i);
                break;
            }
        }
    }
    check_state_file(h, snap, n, first);
    /* The same files loaded again are another model. */
    spindle_load_options lo = {.n_threads = 1, .max_context = CONTEXT};
    spindle_model *other = NULL;
    spindle_seq *alien = NULL;
    must(spindle_model_load(path, &lo, &other, &err), &err, "second load");
    must(spindle_seq_new(other, &alien, &err), &err, "new sequence");
    if (spindle_seq_snapshot_restore(alien, snap, &err) != SPINDLE_ERR_ARGUMENT ||
        spindle_seq_length(alien) != 0)
        fail(h, "a snapshot restored into another model");
    spindle_seq_free(alien);
    spindle_model_free(other);
    free(first);
    spindle_seq_snapshot_free(snap);
    spindle_seq_free(fresh);
    spindle_seq_free(s);
}

/* One decode step of two sequences of different lengths in one batch
 * gives each the logits a step of its own gives (up to 4 rows a pass's
 * products are computed row by row, so the bits must agree). */
static void check_batched_step(harness *h) {
    spindle_seq *a = build(h, 70), *b = build(h, 9);
    spindle_seq *a1 = build(h, 70), *b1 = build(h, 9);
    float *la = malloc((size_t)h->vocab * sizeof(float));
    float *lb = malloc((size_t)h->vocab * sizeof(float));
    const int32_t ta = token(h, 70, 0), tb = token(h, 9, 0);
    spindle_batch_entry e[2] = {
        {.seq = a, .tokens = &ta, .n_tokens = 1,
         .logits_mode = SPINDLE_LOGITS_LAST, .logits = la},
        {.seq = b, .tokens = &tb, .n_tokens = 1,
         .logits_mode = SPINDLE_LOGITS_LAST, .logits = lb},
    };
    spindle_error err = {0};
    must(spindle_forward(h->model, e, 2, &err), &err, "batched forward");
    forward(h, a1, 70, 1, 0, h->want);
    h->checks += 2;
    if (memcmp(la, h->want, (size_t)h->vocab * sizeof(float)))
        fail(h, "a batched step differs from the same step alone (length 70)");
    forward(h, b1, 9, 1, 0, h->want);
    if (memcmp(lb, h->want, (size_t)h->vocab * sizeof(float)))
        fail(h, "a batched step differs from the same step alone (length 9)");
    compare_next(h, a1, a, "after a batched step");
    free(la);
    free(lb);
    spindle_seq_free(a);
    spindle_seq_free(b);
    spindle_seq_free(a1);
    spindle_seq_free(b1);
}

/* A batch whose second entry runs past the context limit fails (after the
 * first entry's sequence was reserved); that sequence must be as it was. */
static void check_failed_forward(harness *h) {
    const int n = 70;
    spindle_seq *a = build(h, n), *twin = build(h, n), *empty = build(h, 0);
    static int32_t ids[CONTEXT + 1];
    for (int i = 0; i <= CONTEXT; i++) ids[i] = token(h, n + i, 1);
    spindle_batch_entry e[2] = {
        {.seq = a, .tokens = ids, .n_tokens = 8},
        {.seq = empty, .tokens = ids, .n_tokens = CONTEXT + 1},
    };
    spindle_error err = {0};
    if (spindle_forward(h->model, e, 2, &err) != SPINDLE_ERR_LIMIT)
        fail(h, "a batch past the context limit: %s", err.message);
    compare_next(h, twin, a, "after a failed batch");
    spindle_seq_free(empty);
    spindle_seq_free(twin);
    spindle_seq_free(a);
}

static void print_bytes(harness *h, const char *list) {
    printf("{\"bytes\": [");
    char *copy = strdup(list), *save = NULL;
    int first = 1;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const int n = atoi(t);
        spindle_seq *s = build(h, n);
        printf("%s[%d, %zu]", first ? "" : ", ", n, spindle_seq_state_bytes(s));
        first = 0;
        spindle_seq_free(s);
    }
    free(copy);
    printf("]}\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: seq_state_harness MODEL [--max-rollback K] "
                        "[--window W] [--recurrent 1] [--threads N] "
                        "[--bytes N1,N2,...]\n");
        return 2;
    }
    harness h = {0};
    int threads = 2, max_rollback = 0;
    const char *bytes = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-rollback")) max_rollback = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--window")) h.window = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--recurrent")) h.recurrent = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bytes")) bytes = argv[i + 1];
        else return fprintf(stderr, "unknown option %s\n", argv[i]), 2;
    }
    spindle_load_options lo = {.n_threads = threads, .max_context = CONTEXT,
                               .max_rollback = max_rollback};
    spindle_error err = {0};
    must(spindle_model_load(argv[1], &lo, &h.model, &err), &err, "load");
    h.vocab = spindle_model_vocab_size(h.model);
    h.k = max_rollback ? max_rollback : SPINDLE_DEFAULT_MAX_ROLLBACK;
    h.want = malloc((size_t)h.vocab * sizeof(float));
    h.got = malloc((size_t)h.vocab * sizeof(float));
    if (bytes) {
        print_bytes(&h, bytes);
    } else {
        int pairs = 0, beyond_ok = 0, refused = 0;
        size_t snap_bytes = 0;
        check_rollback(&h, &pairs, &beyond_ok);
        if (h.window) refused = check_beyond_window(&h);
        check_snapshot(&h, argv[1], &snap_bytes);
        check_failed_forward(&h);
        check_batched_step(&h);
        printf("{\"max_rollback\": %d, \"rollback_cases\": %d, "
               "\"beyond_k_accepted\": %d, \"window_refused\": %s, "
               "\"recurrent_refused\": %d, "
               "\"snapshot_bytes\": %zu, \"checks\": %d, \"failures\": [",
               h.k, pairs, beyond_ok, refused ? "true" : "false",
               h.recurrent_refused, snap_bytes,
               h.checks);
        for (int i = 0; i < h.n_failures && i < MAX_FAILURES; i++) {
            printf("%s\"", i ? ", " : "");
            for (const char *c = h.failures[i]; *c; c++)
                if (*c == '"' || *c == '\\') printf("'");
                else putchar(*c);
            printf("\"");
        }
        printf("], \"n_failures\": %d}\n", h.n_failures);
    }
    free(h.want);
    free(h.got);
    spindle_model_free(h.model);
    return h.n_failures ? 1 : 0;
}
