/* Matchers of one grammar share its automaton (grammar/automaton.h) from
 * several threads at once: each thread's matchers, fed random inputs that
 * keep creating states (counts of long bounded repetitions), must accept
 * and reject exactly what a matcher on a private automaton does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

#define THREADS 4
#define ROUNDS 30
#define AUTOMATA 10   /* fresh ones: the races are where states are created */
#define MAX_INPUT 900

static const char GRAMMAR[] =
    "root ::= item (\",\" item)*\n"
    "item ::= [a-z]{1,300} | \"(\" [0-9]{0,40} \")\"\n";

typedef struct worker {
    sp_gauto *shared;
    const sp_gram *g;
    unsigned seed;
    int mismatches;
} worker;

static int random_input(unsigned *seed, uint8_t *out) {
    int n = 1 + rand_r(seed) % MAX_INPUT;
    for (int i = 0; i < n; i++) {
        int r = rand_r(seed) % 40;
        out[i] = (uint8_t)(r < 26 ? 'a' + r : r < 30 ? ',' : r < 32 ? '(' : r < 34 ? ')'
                                                                          : '0' + r - 34);
    }
    return n;
}

static void *run(void *arg) {
    worker *w = arg;
    spindle_error err = {0};
    uint8_t input[MAX_INPUT];
    for (int round = 0; round < ROUNDS; round++) {
        sp_gmatch *shared = NULL, *alone = NULL;
        if (sp_gmatch_new_on(w->shared, &shared, &err) || sp_gmatch_new(w->g, NULL, &alone, &err)) {
            w->mismatches++;
            sp_gmatch_free(shared);
            sp_gmatch_free(alone);
            return NULL;
        }
        int n = random_input(&w->seed, input);
        for (int i = 0; i < n; i++) {
            bool a = sp_gmatch_accept_bytes(shared, input + i, 1, &err);
            bool b = sp_gmatch_accept_bytes(alone, input + i, 1, &err);
            if (a != b || sp_gmatch_accepting(shared) != sp_gmatch_accepting(alone))
                w->mismatches++;
        }
        sp_gmatch_free(shared);
        sp_gmatch_free(alone);
    }
    return NULL;
}

static void test_threads_share_one_automaton(void **state) {
    (void)state;
    sp_gram g;
    spindle_error err = {0};
    assert_int_equal(sp_gbnf_parse(GRAMMAR, strlen(GRAMMAR), &g, &err), SPINDLE_OK);
    for (int k = 0; k < AUTOMATA; k++) {
        sp_gauto *a = NULL;
        assert_int_equal(sp_gauto_new(&g, NULL, &a, &err), SPINDLE_OK);
        worker w[THREADS];
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++) {
            w[i] = (worker){.shared = a, .g = &g, .seed = 17u * (unsigned)k + (unsigned)i};
            assert_int_equal(pthread_create(&t[i], NULL, run, &w[i]), 0);
        }
        for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < THREADS; i++) assert_int_equal(w[i].mismatches, 0);
        assert_false(sp_gauto_crowded(a));
        sp_gauto_release(a);
    }
    sp_gram_free(&g);
}

/* The last reference frees: a matcher keeps its automaton alive after the
 * creator's reference is gone (as when a grammar replaces a crowded one). */
static void test_matcher_outlives_the_creators_reference(void **state) {
    (void)state;
    sp_gram g;
    spindle_error err = {0};
    assert_int_equal(sp_gbnf_parse(GRAMMAR, strlen(GRAMMAR), &g, &err), SPINDLE_OK);
    sp_gauto *a = NULL;
    sp_gmatch *m = NULL;
    assert_int_equal(sp_gauto_new(&g, NULL, &a, &err), SPINDLE_OK);
    assert_int_equal(sp_gmatch_new_on(a, &m, &err), SPINDLE_OK);
    sp_gauto_release(a);
    assert_true(sp_gmatch_accept_bytes(m, (const uint8_t *)"ab,(12)", 7, &err));
    assert_true(sp_gmatch_accepting(m));
    sp_gmatch_free(m);
    sp_gram_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_one_automaton),
        cmocka_unit_test(test_matcher_outlives_the_creators_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
