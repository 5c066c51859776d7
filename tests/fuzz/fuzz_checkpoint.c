/* The checkpoint file parser (src/generation/checkpoint_file.c):
 * sp_checkpoint_parse on the input, without the checksum (so that mutations
 * reach the sections) and with it, and the snapshot block's own structure
 * check (sp_state_snapshot_from_bytes), and a "drafter" extension's record
 * (sp_drafter_record_parse: on success a printable namespace, counts in
 * range, the drafter's own part within the extension).
 *
 * Invariants on success: the counts agree (prompt >= 1, generated >= 1, the
 * stored tokens are prompt + generated, max_tokens beyond generated); the
 * checkpoint serializes, the bytes parse again with the checksum checked,
 * and serializing that gives the same bytes (a round trip); extensions come
 * back by name with their sizes. */
#include "fuzz_common.h"

#include "generation/checkpoint.h"
#include "generation/speculative.h"
#include "runtime/seq_state.h"

static void check_round_trip(const spindle_checkpoint *ck) {
    FUZZ_CHECK(ck->n_prompt >= 1 && ck->n_generated >= 1 &&
                   ck->params.max_tokens > ck->n_generated && ck->tokens,
               "counts %d %d %d", ck->n_prompt, ck->n_generated, ck->params.max_tokens);
    unsigned char *bytes = NULL, *again = NULL;
    size_t n = 0, n_again = 0;
    spindle_error err = {0};
    FUZZ_CHECK(sp_checkpoint_serialize(ck, &bytes, &n, &err) == SPINDLE_OK, "serialize: %s",
               err.message);
    spindle_checkpoint *back = NULL;
    FUZZ_CHECK(sp_checkpoint_parse(bytes, n, true, &back, &err) == SPINDLE_OK,
               "the serialized checkpoint does not parse: %s", err.message);
    FUZZ_CHECK(back->n_prompt == ck->n_prompt && back->n_generated == ck->n_generated &&
                   !memcmp(back->tokens, ck->tokens,
                           (size_t)(ck->n_prompt + ck->n_generated) * sizeof *ck->tokens) &&
                   !memcmp(back->rng, ck->rng, sizeof ck->rng) && back->n_ext == ck->n_ext,
               "the round trip changed the checkpoint");
    for (int i = 0; i < ck->n_ext; i++) {
        size_t len = 0;
        const void *x = spindle_checkpoint_extension(back, ck->ext[i].name, &len);
        FUZZ_CHECK(x && len == ck->ext[i].n, "extension %s lost", ck->ext[i].name);
    }
    FUZZ_CHECK(sp_checkpoint_serialize(back, &again, &n_again, &err) == SPINDLE_OK &&
                   n_again == n && !memcmp(again, bytes, n),
               "serializing is not stable");
    free(bytes);
    free(again);
    spindle_checkpoint_free(back);
}

static void check_drafter_record(const spindle_checkpoint *ck) {
    size_t n = 0;
    const unsigned char *x = spindle_checkpoint_extension(ck, "drafter", &n);
    sp_drafter_record rec;
    if (!x || sp_drafter_record_parse(x, n, &rec)) return;
    size_t ns_n = strnlen(rec.ns, sizeof rec.ns);
    FUZZ_CHECK(ns_n < sizeof rec.ns, "namespace not terminated");
    for (size_t i = 0; i < ns_n; i++)
        FUZZ_CHECK(rec.ns[i] >= 0x20 && rec.ns[i] <= 0x7e, "unprintable namespace");
    FUZZ_CHECK(rec.rest >= x && rec.n_rest <= n && rec.rest + rec.n_rest == x + n,
               "the drafter's part lies outside the record");
    for (int j = 0; j < SPINDLE_MAX_DRAFT_TOKENS; j++)
        FUZZ_CHECK(rec.acc[j] >= 0 && rec.acc[j] <= rec.tried[j], "counts");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spindle_error err = {0};
    spindle_checkpoint *ck = NULL;
    if (sp_checkpoint_parse(data, size, true, &ck, &err) == SPINDLE_OK) {
        check_round_trip(ck);
        spindle_checkpoint_free(ck);
    } else {
        FUZZ_CHECK(err.message[0] && !strchr(err.message, '\n'), "no one-line error");
    }
    ck = NULL;
    if (sp_checkpoint_parse(data, size, false, &ck, &err) != SPINDLE_OK) {
        FUZZ_CHECK(err.message[0] && !strchr(err.message, '\n'), "no one-line error");
        if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "rejected: %s\n", err.message);
        return 0;
    }
    check_round_trip(ck);
    check_drafter_record(ck);
    sp_state_snapshot *snap = NULL;
    if (sp_state_snapshot_from_bytes(ck->snap_data, ck->snap_n, &snap, &err) == SPINDLE_OK) {
        FUZZ_CHECK(sp_state_snapshot_bytes(snap) == ck->snap_n, "snapshot size");
        sp_state_snapshot_free(snap);
    } else if (getenv("FUZZ_VERBOSE")) {
        fprintf(stderr, "snapshot rejected: %s\n", err.message);
    }
    spindle_checkpoint_free(ck);
    return 0;
}
