/* The block file form of the on-disk prompt cache (prefix_block.h).
 * Pure, fuzzed by tests/fuzz/fuzz_prefix_block.c. */
#include "runtime/prefix_block.h"
#include "base/error.h"

#include <string.h>
#include <xxhash.h>

/* By kind (sp_prefix_file_kind), each with its NUL. */
static const char magics[2][8] = {"SPKVBLK", "SPKVSTA"};

#define SUM_AT 208

static void put32(unsigned char *at, uint32_t v) { memcpy(at, &v, 4); }
static void put64(unsigned char *at, uint64_t v) { memcpy(at, &v, 8); }
static uint32_t get32(const unsigned char *at) {
    uint32_t v;
    memcpy(&v, at, 4);
    return v;
}
static uint64_t get64(const unsigned char *at) {
    uint64_t v;
    memcpy(&v, at, 8);
    return v;
}

static void checksum(const unsigned char *head, const void *payload,
                     size_t payload_bytes, unsigned char out[16]) {
    XXH3_state_t *st = XXH3_createState();
    XXH128_hash_t h;
    if (st) {
        XXH3_128bits_reset(st);
        XXH3_128bits_update(st, head, SUM_AT);
        XXH3_128bits_update(st, payload, payload_bytes);
        h = XXH3_128bits_digest(st);
        XXH3_freeState(st);
    } else {   /* no memory for a state: the one-shot form of the same */
        h = XXH3_128bits(head, SUM_AT);
        h = XXH3_128bits_withSeed(payload, payload_bytes, h.low64 ^ h.high64);
    }
    XXH128_canonicalFromHash((XXH128_canonical_t *)out, h);
}

void sp_prefix_block_header(const sp_prefix_block_key *key,
                            const void *payload, unsigned char *out) {
    memset(out, 0, SP_PREFIX_BLOCK_HEADER);
    memcpy(out, magics[key->kind == SP_PREFIX_FILE_STATE], 8);
    put32(out + 8, SP_PREFIX_BLOCK_VERSION);
    put32(out + 12, key->kv_type);
    put32(out + 16, SP_KV_BLOCK_TOKENS);
    put64(out + 24, key->payload_bytes);
    memcpy(out + 32, key->fingerprint, SP_PREFIX_FP_LEN);
    put64(out + 64, key->hash);
    put64(out + 72, key->parent);
    memcpy(out + 80, key->tokens, sizeof key->tokens);
    checksum(out, payload, key->payload_bytes, out + SUM_AT);
}

spindle_status sp_prefix_block_parse(const void *data, size_t n,
                                     bool check_sum, sp_prefix_block_key *key,
                                     const void **payload,
                                     spindle_error *err) {
    const unsigned char *p = data;
    if (n < SP_PREFIX_BLOCK_HEADER)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "truncated: %zu bytes, shorter than the header", n);
    uint32_t kind = SP_PREFIX_FILE_BLOCK;
    while (kind < 2 && memcmp(p, magics[kind], 8) != 0) kind++;
    if (kind == 2)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "not a prompt cache file");
    if (get32(p + 8) != SP_PREFIX_BLOCK_VERSION)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "block format version %u",
                       get32(p + 8));
    if (get32(p + 16) != SP_KV_BLOCK_TOKENS || get32(p + 20) != 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "blocks of %u positions",
                       get32(p + 16));
    const uint64_t payload_bytes = get64(p + 24);
    if (payload_bytes != n - SP_PREFIX_BLOCK_HEADER)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "truncated or padded: %zu payload bytes, the header "
                       "says %llu", n - SP_PREFIX_BLOCK_HEADER,
                       (unsigned long long)payload_bytes);
    for (int i = 0; i < SP_PREFIX_FP_LEN; i++) {
        const char c = (char)p[32 + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return sp_fail(err, SPINDLE_ERR_FORMAT, "a malformed fingerprint");
    }
    if (check_sum) {
        unsigned char sum[16];
        checksum(p, p + SP_PREFIX_BLOCK_HEADER, (size_t)payload_bytes, sum);
        if (memcmp(sum, p + SUM_AT, 16) != 0)
            return sp_fail(err, SPINDLE_ERR_FORMAT, "checksum mismatch");
    }
    key->kind = kind;
    memcpy(key->fingerprint, p + 32, SP_PREFIX_FP_LEN);
    key->kv_type = get32(p + 12);
    key->payload_bytes = payload_bytes;
    key->hash = get64(p + 64);
    key->parent = get64(p + 72);
    memcpy(key->tokens, p + 80, sizeof key->tokens);
    *payload = p + SP_PREFIX_BLOCK_HEADER;
    return SPINDLE_OK;
}

bool sp_prefix_block_matches(const sp_prefix_block_key *got,
                             const sp_prefix_block_key *want,
                             spindle_error *err) {
    if (memcmp(got->fingerprint, want->fingerprint, SP_PREFIX_FP_LEN) != 0) {
        sp_fail(err, SPINDLE_ERR_FORMAT,
                "written for another model (fingerprint %.32s; this model's "
                "is %.32s)", got->fingerprint, want->fingerprint);
        return false;
    }
    if (got->kind != want->kind) {
        sp_fail(err, SPINDLE_ERR_FORMAT, "a %s where a %s belongs",
                got->kind == SP_PREFIX_FILE_STATE ? "boundary state" : "block",
                want->kind == SP_PREFIX_FILE_STATE ? "boundary state"
                                                    : "block");
        return false;
    }
    if (got->kv_type != want->kv_type ||
        (want->payload_bytes && got->payload_bytes != want->payload_bytes)) {
        if (want->payload_bytes)
            sp_fail(err, SPINDLE_ERR_FORMAT,
                    "another cache layout (type %u, %llu bytes; this one is "
                    "%u, %llu bytes)", got->kv_type,
                    (unsigned long long)got->payload_bytes, want->kv_type,
                    (unsigned long long)want->payload_bytes);
        else
            sp_fail(err, SPINDLE_ERR_FORMAT,
                    "another cache layout (type %u; this one is %u)",
                    got->kv_type, want->kv_type);
        return false;
    }
    if (got->hash != want->hash || got->parent != want->parent ||
        memcmp(got->tokens, want->tokens, sizeof got->tokens) != 0) {
        sp_fail(err, SPINDLE_ERR_FORMAT, "holds another prefix");
        return false;
    }
    return true;
}
