/* The recurrent kind of runtime/seq_state.h, driven as a recurrent layer
 * would drive it: a simulated layer (a conv window that shifts in each
 * token's input, and a state s' = a * s + conv . w) updates the work slot
 * in place token by token and records checkpoints. The reference recomputes
 * the same float operations from the zero state over the token prefix, so
 * every state the interface hands back must match it bit for bit: after
 * chunked forwards, after each allowed truncation, after a restore, and
 * after an abandoned forward. Also the refusals (kind and limit named, the
 * state unchanged) and a mixed layout of every kind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/seq_state.h"

enum { KERNEL = 4, CHANNELS = 3, STATE = 5, MAX_TOKENS = 400 };
#define CONV ((KERNEL - 1) * CHANNELS)

/* The input of token id at channel c: a value that is not a round
 * number, so a skipped or repeated step changes the bits. */
static float input(int token, int c) {
    return (float)((token * 37 + c * 11) % 101) / 97.0f - 0.5f;
}

/* One token through the simulated layer, in place. */
static void step(float *conv, float *state, int token) {
    memmove(conv, conv + CHANNELS, (KERNEL - 2) * CHANNELS * sizeof(float));
    for (int c = 0; c < CHANNELS; c++)
        conv[(KERNEL - 2) * CHANNELS + c] = input(token, c);
    float mix = 0.0f;
    for (int i = 0; i < CONV; i++) mix += conv[i] * (0.25f + 0.01f * (float)i);
    for (int i = 0; i < STATE; i++)
        state[i] = (0.9f - 0.03f * (float)i) * state[i] + mix * (float)(i + 1);
}

/* The state after tokens[0 .. n) from zero. */
static void reference(const int *tokens, int n, float *conv, float *state) {
    memset(conv, 0, CONV * sizeof(float));
    memset(state, 0, STATE * sizeof(float));
    for (int t = 0; t < n; t++) step(conv, state, tokens[t]);
}

static const sp_layer_state_desc recurrent = {
    .kind = SP_STATE_RECURRENT, .conv_kernel = KERNEL,
    .conv_channels = CHANNELS, .state_floats = STATE};

static int tokens[MAX_TOKENS];

static sp_seq_state *make(int n_layers, const sp_layer_state_desc *layers,
                          int k) {
    const sp_seq_state_options opt = {.kv_type = SP_KV_F32,
                                      .max_length = MAX_TOKENS,
                                      .max_rollback = k};
    sp_seq_state *s = NULL;
    spindle_error err = {0};
    assert_int_equal(sp_seq_state_new(layers, n_layers, &opt, &s, &err),
                     SPINDLE_OK);
    return s;
}

/* The layer's part of a pass over tokens[from .. from + n) of a state that
 * was reserved for n tokens. */
static void run_layer(sp_seq_state *s, int layer, int from, int n) {
    sp_recurrent_state r = sp_seq_state_recurrent(s, layer);
    assert_non_null(r.conv);
    assert_non_null(r.state);
    for (int t = 0; t < n; t++) {
        step(r.conv, r.state, tokens[from + t]);
        sp_seq_state_checkpoint(s, layer, t);
    }
}

/* A whole successful pass of n tokens over every recurrent layer. */
static void forward(sp_seq_state *s, int n_layers,
                    const sp_layer_state_desc *layers, int n) {
    spindle_error err = {0};
    const int from = sp_seq_state_length(s);
    assert_int_equal(sp_seq_state_reserve(s, n, &err), SPINDLE_OK);
    for (int l = 0; l < n_layers; l++)
        if (layers[l].kind == SP_STATE_RECURRENT) run_layer(s, l, from, n);
    sp_seq_state_commit(s);
    assert_int_equal(sp_seq_state_length(s), from + n);
}

/* The state's current value of `layer` (seen through the work slot of a
 * pass that is then abandoned) must be the reference at its length. */
static void check_current(sp_seq_state *s, int layer) {
    spindle_error err = {0};
    const int len = sp_seq_state_length(s);
    assert_int_equal(sp_seq_state_reserve(s, 1, &err), SPINDLE_OK);
    const sp_recurrent_state r = sp_seq_state_recurrent(s, layer);
    float conv[CONV], state[STATE];
    reference(tokens, len, conv, state);
    if (memcmp(conv, r.conv, sizeof conv) || memcmp(state, r.state, sizeof state))
        fail_msg("layer %d at length %d: the state differs from the "
                 "reference (state[0] %.9g, want %.9g)", layer, len,
                 (double)r.state[0], (double)state[0]);
}

/* A state with K rollback that saw 5 tokens, then a pass of T. */
static sp_seq_state *after_two_passes(int K, int T) {
    sp_seq_state *s = make(1, &recurrent, K);
    forward(s, 1, &recurrent, 5);
    forward(s, 1, &recurrent, T);
    check_current(s, 0);
    return s;
}

static void test_rollback_within_last_pass(void **unused) {
    (void)unused;
    const int ks[] = {1, 4, 8};
    const int chunks[] = {1, 3, 8, 9, 20};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 5; b++) {
            const int K = ks[a], T = chunks[b], end = 5 + T;
            spindle_error err = {0};
            /* Every length the pass kept: end - min(T, K) .. end. */
            const int back = T < K ? T : K;
            for (int len = end; len >= end - back; len--) {
                sp_seq_state *s = after_two_passes(K, T);
                assert_int_equal(sp_seq_state_truncate(s, len, &err), SPINDLE_OK);
                assert_int_equal(sp_seq_state_length(s), len);
                check_current(s, 0);
                /* and it continues from there like a fresh sequence */
                forward(s, 1, &recurrent, 2);
                check_current(s, 0);
                sp_seq_state_free(s);
            }
            /* One further back: refused, naming the kind and the limit,
             * and nothing changes. */
            sp_seq_state *s = after_two_passes(K, T);
            assert_int_equal(sp_seq_state_truncate(s, end - back - 1, &err),
                             SPINDLE_ERR_UNSUPPORTED);
            assert_non_null(strstr(err.message, "recurrent"));
            char limit[32];
            snprintf(limit, sizeof limit, "%d tokens back", K);
            assert_non_null(strstr(err.message, limit));
            assert_int_equal(sp_seq_state_length(s), end);
            check_current(s, 0);
            /* Truncating twice: the shorter kept states stay valid. */
            if (back >= 2) {
                assert_int_equal(sp_seq_state_truncate(s, end - 1, &err), SPINDLE_OK);
                assert_int_equal(sp_seq_state_truncate(s, end - 2, &err), SPINDLE_OK);
                check_current(s, 0);
            }
            /* A snapshot restores the state (not its rollback copies): the
             * restored sequence continues like the original. */
            sp_state_snapshot *snap = NULL;
            assert_int_equal(sp_seq_state_snapshot(s, &snap, &err), SPINDLE_OK);
            forward(s, 1, &recurrent, 4);
            sp_seq_state *copy = make(1, &recurrent, K);
            assert_int_equal(sp_seq_state_restore(copy, snap, &err), SPINDLE_OK);
            assert_int_equal(sp_seq_state_restore(s, snap, &err), SPINDLE_OK);
            for (int i = 0; i < 2; i++) {
                sp_seq_state *x = i ? copy : s;
                assert_int_equal(sp_seq_state_length(x), sp_state_snapshot_length(snap));
                check_current(x, 0);
                forward(x, 1, &recurrent, 3);
                check_current(x, 0);
            }
            /* To 0: always, the zero state. */
            assert_int_equal(sp_seq_state_truncate(s, 0, &err), SPINDLE_OK);
            check_current(s, 0);
            forward(s, 1, &recurrent, 3);
            check_current(s, 0);
            sp_state_snapshot_free(snap);
            sp_seq_state_free(copy);
            sp_seq_state_free(s);
        }
}

static void test_first_checkpoint(void **unused) {
    (void)unused;
    sp_seq_state *s = make(1, &recurrent, 4);
    spindle_error err = {0};
    const int n[] = {1, 4, 5, 6, 30}, want[] = {0, 0, 0, 1, 25};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sp_seq_state_reserve(s, n[i], &err), SPINDLE_OK);
        assert_int_equal(sp_seq_state_first_checkpoint(s), want[i]);
    }
    sp_seq_state_free(s);
}

/* A pass that fails after the layer updated its work slot (no commit)
 * leaves the state and its rollback checkpoints as they were. */
static void test_abandoned_pass(void **unused) {
    (void)unused;
    sp_seq_state *s = make(1, &recurrent, 4);
    spindle_error err = {0};
    forward(s, 1, &recurrent, 10);
    forward(s, 1, &recurrent, 3);
    for (int attempt = 0; attempt < 3; attempt++) {
        assert_int_equal(sp_seq_state_reserve(s, 6, &err), SPINDLE_OK);
        run_layer(s, 0, 13, 6);    /* ... and the pass fails here */
    }
    assert_int_equal(sp_seq_state_length(s), 13);
    check_current(s, 0);
    assert_int_equal(sp_seq_state_truncate(s, 10, &err), SPINDLE_OK);
    check_current(s, 0);
    forward(s, 1, &recurrent, 6);
    check_current(s, 0);
    sp_seq_state_free(s);
}

/* Without rollback (K = 0) a recurrent layer reaches only 0 and its
 * length, and keeps no copies. */
static void test_no_rollback(void **unused) {
    (void)unused;
    sp_seq_state *s = make(1, &recurrent, 0);
    spindle_error err = {0};
    forward(s, 1, &recurrent, 3);
    const size_t bytes = sp_seq_state_bytes(s);
    forward(s, 1, &recurrent, 1);
    forward(s, 1, &recurrent, 7);
    assert_int_equal(sp_seq_state_bytes(s), bytes);
    assert_int_equal(sp_seq_state_truncate(s, 10, &err), SPINDLE_ERR_UNSUPPORTED);
    assert_int_equal(sp_seq_state_truncate(s, 11, &err), SPINDLE_OK);
    check_current(s, 0);
    sp_seq_state_free(s);
}

/* Every kind in one state: a truncation is done for all layers or none. */
static void test_mixed_layers(void **unused) {
    (void)unused;
    const sp_layer_state_desc layers[] = {
        {.kind = SP_STATE_FULL_KV, .n_kv_heads = 2, .head_dim = 4},
        recurrent,
        {.kind = SP_STATE_WINDOW_KV, .n_kv_heads = 1, .head_dim = 8,
         .window = 4},
        {.kind = SP_STATE_NONE},
        {.kind = SP_STATE_RECURRENT, .conv_kernel = KERNEL,
         .conv_channels = CHANNELS, .state_floats = STATE},
    };
    sp_seq_state *s = make(5, layers, 2);
    spindle_error err = {0};
    forward(s, 5, layers, 12);
    forward(s, 5, layers, 4);
    /* 3 back: the window layer could (it holds 12 + 4 positions), the
     * recurrent ones cannot: refused as a whole. */
    assert_int_equal(sp_seq_state_truncate(s, 13, &err), SPINDLE_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "layer 1 (recurrent)"));
    assert_int_equal(sp_seq_state_length(s), 16);
    check_current(s, 1);
    check_current(s, 4);
    assert_int_equal(sp_seq_state_truncate(s, 14, &err), SPINDLE_OK);
    check_current(s, 1);
    check_current(s, 4);
    /* A snapshot of one layout does not go into another. */
    sp_state_snapshot *snap = NULL;
    assert_int_equal(sp_seq_state_snapshot(s, &snap, &err), SPINDLE_OK);
    assert_int_equal(sp_state_snapshot_length(snap), 14);
    assert_true(sp_state_snapshot_bytes(snap) >
                2 * (CONV + STATE) * sizeof(float) + 14 * 2 * 2 * 4 * 4);
    sp_seq_state *other = make(1, &recurrent, 2);
    assert_int_equal(sp_seq_state_restore(other, snap, &err), SPINDLE_ERR_ARGUMENT);
    assert_int_equal(sp_seq_state_length(other), 0);
    sp_seq_state_free(other);
    sp_state_snapshot_free(snap);
    sp_seq_state_free(s);
}

static void test_bad_descriptions(void **unused) {
    (void)unused;
    const sp_layer_state_desc bad[] = {
        {.kind = SP_STATE_RECURRENT},
        {.kind = SP_STATE_RECURRENT, .conv_kernel = 4, .conv_channels = -1,
         .state_floats = 8},
        {.kind = SP_STATE_WINDOW_KV, .n_kv_heads = 1, .head_dim = 8},
        {.kind = SP_STATE_FULL_KV, .n_kv_heads = 0, .head_dim = 8},
        {.kind = (sp_state_kind)9},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const sp_seq_state_options opt = {.kv_type = SP_KV_F32};
        sp_seq_state *s = NULL;
        spindle_error err = {0};
        const sp_layer_state_desc layers[2] = {recurrent, bad[i]};
        assert_int_equal(sp_seq_state_new(layers, 2, &opt, &s, &err),
                         SPINDLE_ERR_FORMAT);
        assert_null(s);
        assert_non_null(strstr(err.message, "layer 1"));
    }
}

int main(void) {
    for (int i = 0; i < MAX_TOKENS; i++) tokens[i] = (i * 7919 + 13) % 1000;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollback_within_last_pass),
        cmocka_unit_test(test_first_checkpoint),
        cmocka_unit_test(test_abandoned_pass),
        cmocka_unit_test(test_no_rollback),
        cmocka_unit_test(test_mixed_layers),
        cmocka_unit_test(test_bad_descriptions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
