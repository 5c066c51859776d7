/* The file form of one KV block of the on-disk prompt cache
 * (runtime/prefix_disk.h): a fixed header that says whose block it is,
 * then the block's bytes, all covered by an XXH3-128 checksum. The
 * boundary state at a block's end (runtime/prefix_states.h: the recurrent
 * and window layers of a hybrid or sliding-window model) has the same
 * container under its own magic, keyed by the same block.
 *
 *   offset  size
 *        0     8  magic "SPKVBLK\0" (a block), "SPKVSTA\0" (a state)
 *        8     4  version (1)
 *       12     4  cache element type (sp_kv_dtype)
 *       16     4  positions per block (SP_KV_BLOCK_TOKENS)
 *       20     4  zero
 *       24     8  payload bytes (the pool's block bytes)
 *       32    32  model fingerprint (spindle_model_fingerprint, hex)
 *       64     8  chained block hash
 *       72     8  the parent block's hash
 *       80   128  the block's tokens (int32)
 *      208    16  XXH3-128 (canonical) of bytes [0, 208) and the payload
 *      224     -  payload: a block: every full-KV layer in order, each
 *                 as sp_kv_pool_read's form of positions [0, 32); a state:
 *                 the flat tail snapshot (sp_state_snapshot_data, every
 *                 layer but the full-KV ones) at the block's end
 * Little-endian (the only byte order Spindle builds for). Pure functions:
 * no I/O, so the parser is fuzzed as is (tests/fuzz/fuzz_prefix_block). */
#ifndef SP_RUNTIME_PREFIX_BLOCK_H
#define SP_RUNTIME_PREFIX_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spindle.h"
#include "runtime/kv_pool.h"

#define SP_PREFIX_BLOCK_VERSION 1
#define SP_PREFIX_BLOCK_HEADER 224
#define SP_PREFIX_FP_LEN 32

typedef enum sp_prefix_file_kind {
    SP_PREFIX_FILE_BLOCK = 0,   /* a full KV block (.kvb) */
    SP_PREFIX_FILE_STATE = 1,   /* the boundary state at its end (.kvs) */
} sp_prefix_file_kind;

/* What a block (or state) file must say to be used. */
typedef struct sp_prefix_block_key {
    uint32_t kind;               /* sp_prefix_file_kind */
    char fingerprint[SP_PREFIX_FP_LEN];
    uint32_t kv_type;
    uint64_t payload_bytes;
    uint64_t hash, parent;
    int32_t tokens[SP_KV_BLOCK_TOKENS];
} sp_prefix_block_key;

/* The header for `key` over `payload` into out[SP_PREFIX_BLOCK_HEADER]. */
void sp_prefix_block_header(const sp_prefix_block_key *key,
                            const void *payload, unsigned char *out);

/* Parse a whole block or state file: its header into *key (its kind from
 * the magic) and a pointer to its payload. With check_sum false the
 * checksum is not compared (the fuzzer reaches the fields that way).
 * SPINDLE_ERR_FORMAT with a one-line reason for anything else than a
 * complete version-1 file. */
spindle_status sp_prefix_block_parse(const void *data, size_t n,
                                     bool check_sum, sp_prefix_block_key *key,
                                     const void **payload,
                                     spindle_error *err);

/* Whether a parsed file is the one `want` asks for (kind, fingerprint,
 * type, size, hash, parent, tokens; want->payload_bytes 0: any size, for a
 * state, whose snapshot is checked against the sequence instead); else
 * false with the reason in err. */
bool sp_prefix_block_matches(const sp_prefix_block_key *got,
                             const sp_prefix_block_key *want,
                             spindle_error *err);

#endif
