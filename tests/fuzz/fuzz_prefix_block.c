/* The on-disk prompt cache's block and state file reader
 * (src/runtime/prefix_block.c):
 * sp_prefix_block_parse on the input with the checksum checked and without
 * it (so that mutations reach the fields), then sp_prefix_block_matches
 * against the parsed key and against another one.
 *
 * Invariants on success: the payload is the input's tail after the header
 * with the header's byte count; writing the header again from the parsed
 * key and payload gives the input's header bytes (every field is read, none
 * is ignored) and that file parses with its checksum; a key matches itself
 * and no key that differs in its kind, fingerprint, hash or tokens; a
 * state's payload is read back by sp_state_snapshot_from_bytes whole, or
 * refused in one line. */
#include "fuzz_common.h"

#include "runtime/prefix_block.h"
#include "runtime/seq_state.h"

static void check_parsed(const uint8_t *data, size_t size,
                         const sp_prefix_block_key *key, const void *payload) {
    FUZZ_CHECK((const uint8_t *)payload == data + SP_PREFIX_BLOCK_HEADER &&
                   key->payload_bytes == size - SP_PREFIX_BLOCK_HEADER,
               "payload at %td, %llu bytes of %zu",
               (const uint8_t *)payload - data,
               (unsigned long long)key->payload_bytes, size);
    unsigned char *again = malloc(size);
    FUZZ_CHECK(again != NULL, "out of memory");
    sp_prefix_block_header(key, payload, again);
    FUZZ_CHECK(!memcmp(again, data, 208), "the header does not round-trip");
    memcpy(again + SP_PREFIX_BLOCK_HEADER, payload, (size_t)key->payload_bytes);
    sp_prefix_block_key back;
    const void *p2 = NULL;
    spindle_error err = {0};
    FUZZ_CHECK(sp_prefix_block_parse(again, size, true, &back, &p2, &err) ==
                   SPINDLE_OK, "the rewritten file does not parse: %s",
               err.message);
    FUZZ_CHECK(sp_prefix_block_matches(&back, key, &err),
               "a key does not match itself: %s", err.message);
    sp_prefix_block_key other = *key;
    other.tokens[size % SP_KV_BLOCK_TOKENS] ^= 1;
    FUZZ_CHECK(!sp_prefix_block_matches(&back, &other, &err) && err.message[0],
               "another prefix matched");
    other = *key;
    other.kind = key->kind == SP_PREFIX_FILE_STATE ? SP_PREFIX_FILE_BLOCK
                                                   : SP_PREFIX_FILE_STATE;
    FUZZ_CHECK(!sp_prefix_block_matches(&back, &other, &err) && err.message[0],
               "a block matched as a state, or a state as a block");
    other = *key;
    other.fingerprint[size % SP_PREFIX_FP_LEN] ^= 1;
    FUZZ_CHECK(!sp_prefix_block_matches(&back, &other, &err) &&
                   strstr(err.message, "another model"),
               "another model's block matched");
    free(again);
    /* A state's payload is a flat snapshot: read back whole or refused in
     * one line (its layers are checked against a sequence later). */
    if (key->kind == SP_PREFIX_FILE_STATE) {
        sp_state_snapshot *snap = NULL;
        err = (spindle_error){0};
        if (sp_state_snapshot_from_bytes(payload, (size_t)key->payload_bytes,
                                         &snap, &err) == SPINDLE_OK) {
            FUZZ_CHECK(sp_state_snapshot_bytes(snap) == key->payload_bytes &&
                           !memcmp(sp_state_snapshot_data(snap), payload,
                                   (size_t)key->payload_bytes),
                       "the snapshot is not the payload");
            sp_state_snapshot_free(snap);
        } else {
            FUZZ_CHECK(err.message[0] && !strchr(err.message, '\n'),
                       "no one-line snapshot error");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int check_sum = 1; check_sum >= 0; check_sum--) {
        sp_prefix_block_key key;
        const void *payload = NULL;
        spindle_error err = {0};
        if (sp_prefix_block_parse(data, size, check_sum, &key, &payload,
                                  &err) == SPINDLE_OK) {
            check_parsed(data, size, &key, payload);
        } else {
            FUZZ_CHECK(err.message[0] && !strchr(err.message, '\n'),
                       "no one-line error");
            if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "rejected: %s\n", err.message);
        }
    }
    return 0;
}
