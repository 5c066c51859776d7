/* The checkpoint file (spindle.h "checkpoints"), little-endian:
 *   "SPCKPT\n\x1a"  u32 version (1)  u32 section count
 *   sections: char tag[4], u32 0, u64 payload length, payload
 *     META  fingerprint, counts, flags, random stream, every parameter
 *     TOKS  i32 prompt ++ generated
 *     STOP / BIAS / XTCS   stop ids, (i32 id, f32 bias) pairs, XTC ids
 *     EXTN  u8 name length, name, the extension's bytes (one per extension)
 *     SNAP  the sequence snapshot's flat block (last: written in place)
 *   XXH3-128 of everything before it (16 bytes, canonical order).
 * Unknown tags are skipped; a repeated known tag, a short section or any
 * count that disagrees with another is refused. */
#include "generation/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/strbuf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files are written in the host's (little-endian) order"
#endif

static const char MAGIC[8] = {'S', 'P', 'C', 'K', 'P', 'T', '\n', 0x1a};
#define VERSION 1u
#define HEAD_BYTES 16u
#define SECTION_BYTES 16u
#define SUM_BYTES 16u
#define MAX_TOKENS (1 << 26)

/* ----------------------------------------------------------------- META */

/* The fixed part, as stored (no padding between the fields' groups). */
typedef struct meta_record {
    char fingerprint[SPINDLE_FINGERPRINT_LEN];
    int32_t n_prompt, n_generated, max_tokens, prefill_chunk;
    uint32_t flags;
    uint32_t reserved;
    uint64_t rng[4];
    uint64_t seed;
    float temperature, top_p, min_p, xtc_probability, xtc_threshold;
    int32_t top_k, min_tokens_to_keep;
    float repetition_penalty, presence_penalty, frequency_penalty;
    int32_t repetition_context, presence_context, frequency_context;
} meta_record;

#define FLAG_IGNORE_EOS 1u
#define FLAG_SEED_EXPLICIT 2u
#define FLAG_PROMPT_STATE 4u

static void meta_from(const spindle_checkpoint *ck, meta_record *m) {
    const spindle_gen_params *g = &ck->params;
    memset(m, 0, sizeof *m);
    memcpy(m->fingerprint, ck->fingerprint, SPINDLE_FINGERPRINT_LEN);
    m->n_prompt = ck->n_prompt;
    m->n_generated = ck->n_generated;
    m->max_tokens = g->max_tokens;
    m->prefill_chunk = g->prefill_chunk;
    m->flags = (g->ignore_eos ? FLAG_IGNORE_EOS : 0) |
               (ck->seed_explicit ? FLAG_SEED_EXPLICIT : 0) |
               (ck->prompt_state ? FLAG_PROMPT_STATE : 0);
    memcpy(m->rng, ck->rng, sizeof m->rng);
    m->seed = g->sampler.seed;
    m->temperature = g->sampler.temperature;
    m->top_p = g->sampler.top_p;
    m->min_p = g->sampler.min_p;
    m->xtc_probability = g->sampler.xtc_probability;
    m->xtc_threshold = g->sampler.xtc_threshold;
    m->top_k = g->sampler.top_k;
    m->min_tokens_to_keep = g->sampler.min_tokens_to_keep;
    m->repetition_penalty = g->repetition_penalty;
    m->presence_penalty = g->presence_penalty;
    m->frequency_penalty = g->frequency_penalty;
    m->repetition_context = g->repetition_context_size;
    m->presence_context = g->presence_context_size;
    m->frequency_context = g->frequency_context_size;
}

static void meta_into(const meta_record *m, spindle_checkpoint *ck) {
    spindle_gen_params *g = &ck->params;
    *g = spindle_gen_defaults();
    memcpy(ck->fingerprint, m->fingerprint, SPINDLE_FINGERPRINT_LEN);
    ck->fingerprint[SPINDLE_FINGERPRINT_LEN] = '\0';
    ck->n_prompt = m->n_prompt;
    ck->n_generated = m->n_generated;
    g->max_tokens = m->max_tokens;
    g->prefill_chunk = m->prefill_chunk;
    g->ignore_eos = m->flags & FLAG_IGNORE_EOS;
    ck->seed_explicit = m->flags & FLAG_SEED_EXPLICIT;
    ck->prompt_state = m->flags & FLAG_PROMPT_STATE;
    memcpy(ck->rng, m->rng, sizeof ck->rng);
    g->sampler.seed = m->seed;
    g->sampler.temperature = m->temperature;
    g->sampler.top_p = m->top_p;
    g->sampler.min_p = m->min_p;
    g->sampler.xtc_probability = m->xtc_probability;
    g->sampler.xtc_threshold = m->xtc_threshold;
    g->sampler.top_k = m->top_k;
    g->sampler.min_tokens_to_keep = m->min_tokens_to_keep;
    g->repetition_penalty = m->repetition_penalty;
    g->presence_penalty = m->presence_penalty;
    g->frequency_penalty = m->frequency_penalty;
    g->repetition_context_size = m->repetition_context;
    g->presence_context_size = m->presence_context;
    g->frequency_context_size = m->frequency_context;
}

/* ------------------------------------------------------------- writing */

static bool add_header(sp_strbuf *b, const char tag[4], uint64_t len) {
    uint32_t zero = 0;
    return sp_strbuf_add(b, tag, 4) &&
           sp_strbuf_add(b, (const char *)&zero, 4) &&
           sp_strbuf_add(b, (const char *)&len, 8);
}

/* A section whose payload is a followed by c. */
static bool add_section(sp_strbuf *b, const char tag[4], const void *a,
                        size_t na, const void *c, size_t nc) {
    return add_header(b, tag, na + nc) &&
           (na == 0 || sp_strbuf_add(b, a, na)) &&
           (nc == 0 || sp_strbuf_add(b, c, nc));
}

/* Everything up to the snapshot's bytes (whose SNAP header ends it). */
static bool build_head(const spindle_checkpoint *ck, size_t snap_n,
                       sp_strbuf *b) {
    const spindle_gen_params *g = &ck->params;
    meta_record m;
    meta_from(ck, &m);
    uint32_t head[2] = {VERSION, (uint32_t)(6 + ck->n_ext)};
    bool ok = sp_strbuf_add(b, MAGIC, 8) &&
              sp_strbuf_add(b, (const char *)head, 8) &&
              add_section(b, "META", &m, sizeof m, NULL, 0) &&
              add_section(b, "TOKS", ck->tokens,
                          (size_t)(ck->n_prompt + ck->n_generated) * 4, NULL, 0) &&
              add_section(b, "STOP", g->stop_ids, (size_t)g->n_stop_ids * 4,
                          NULL, 0) &&
              add_section(b, "XTCS", g->sampler.xtc_special_tokens,
                          (size_t)g->sampler.n_xtc_special_tokens * 4, NULL, 0);
    /* BIAS: ids then values (two arrays of n). */
    ok = ok && add_section(b, "BIAS", g->logit_bias_ids,
                           (size_t)g->n_logit_bias * 4, g->logit_bias_values,
                           (size_t)g->n_logit_bias * 4);
    for (int i = 0; ok && i < ck->n_ext; i++) {
        unsigned char len = (unsigned char)strlen(ck->ext[i].name);
        sp_strbuf name = {0};
        ok = sp_strbuf_addc(&name, (char)len) &&
             sp_strbuf_add(&name, ck->ext[i].name, len) &&
             add_section(b, "EXTN", name.p, name.len, ck->ext[i].data,
                         ck->ext[i].n);
        sp_strbuf_free(&name);
    }
    return ok && add_header(b, "SNAP", snap_n);
}

static void snapshot_bytes(const spindle_checkpoint *ck, const void **data,
                           size_t *n) {
    if (ck->snap) {
        *data = spindle_seq_snapshot_data(ck->snap);
        *n = spindle_seq_snapshot_bytes(ck->snap);
    } else {
        *data = ck->snap_data;
        *n = ck->snap_n;
    }
}

/* The three parts of the file: head, snapshot, checksum. */
static spindle_status file_parts(const spindle_checkpoint *ck, sp_strbuf *head,
                                 const void **snap, size_t *snap_n,
                                 unsigned char sum[SUM_BYTES],
                                 spindle_error *err) {
    if (!ck->tokens || ck->n_prompt < 1 || ck->n_generated < (ck->prompt_state ? 0 : 1))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the checkpoint holds no generation to save");
    snapshot_bytes(ck, snap, snap_n);
    if (!build_head(ck, *snap_n, head))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    XXH3_state_t *st = XXH3_createState();
    if (!st) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, head->p, head->len);
    XXH3_128bits_update(st, *snap, *snap_n);
    XXH128_canonicalFromHash((XXH128_canonical_t *)sum, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    return SPINDLE_OK;
}

spindle_status sp_checkpoint_serialize(const spindle_checkpoint *ck,
                                       unsigned char **out, size_t *n,
                                       spindle_error *err) {
    *out = NULL;
    *n = 0;
    sp_strbuf head = {0};
    const void *snap;
    size_t snap_n;
    unsigned char sum[SUM_BYTES];
    spindle_status st = file_parts(ck, &head, &snap, &snap_n, sum, err);
    unsigned char *buf = st ? NULL : malloc(head.len + snap_n + SUM_BYTES);
    if (!st && !buf) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) {
        memcpy(buf, head.p, head.len);
        memcpy(buf + head.len, snap, snap_n);
        memcpy(buf + head.len + snap_n, sum, SUM_BYTES);
        *out = buf;
        *n = head.len + snap_n + SUM_BYTES;
    }
    sp_strbuf_free(&head);
    return st;
}

spindle_status spindle_checkpoint_save(const spindle_checkpoint *ck,
                                       const char *path, spindle_error *err) {
    if (!ck || !path) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    sp_strbuf head = {0};
    const void *snap;
    size_t snap_n;
    unsigned char sum[SUM_BYTES];
    spindle_status st = file_parts(ck, &head, &snap, &snap_n, sum, err);
    if (!st) {
        const void *parts[3] = {head.p, snap, sum};
        size_t sizes[3] = {head.len, snap_n, SUM_BYTES};
        st = sp_atomic_write(path, parts, sizes, 3,
                             "SPINDLE_TEST_CHECKPOINT_PAUSE_MS", err);
    }
    sp_strbuf_free(&head);
    return st;
}

/* ------------------------------------------------------------- reading */

typedef struct cursor {
    const unsigned char *p;
    size_t n, at;
} cursor;

static const unsigned char *take(cursor *c, size_t n) {
    if (c->n - c->at < n) return NULL;
    const unsigned char *p = c->p + c->at;
    c->at += n;
    return p;
}

/* The len / 4 four-byte values of payload p, copied (NULL for none);
 * *ok false on a bad length or no memory. */
static void *copy_words(const unsigned char *p, uint64_t len, int *n, bool *ok) {
    *n = 0;
    if (len % 4 || len / 4 > MAX_TOKENS) {
        *ok = false;
        return NULL;
    }
    *n = (int)(len / 4);
    if (*n == 0) return NULL;
    void *out = malloc((size_t)len);
    if (!out) *ok = false;
    else memcpy(out, p, (size_t)len);
    return out;
}

static spindle_status add_parsed_extension(spindle_checkpoint *ck,
                                           const unsigned char *p,
                                           uint64_t len, spindle_error *err) {
    if (len < 1 || p[0] < 1 || p[0] > SP_CHECKPOINT_NAME_MAX || len - 1 < p[0])
        return sp_fail(err, SPINDLE_ERR_FORMAT, "a malformed extension section");
    char name[SP_CHECKPOINT_NAME_MAX + 1];
    memcpy(name, p + 1, p[0]);
    name[p[0]] = '\0';
    if (spindle_checkpoint_extension(ck, name, NULL))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "extension \"%s\" repeated", name);
    spindle_status st = spindle_checkpoint_set_extension(
        ck, name, p + 1 + p[0], (size_t)(len - 1 - p[0]), err);
    return st == SPINDLE_ERR_ARGUMENT
               ? sp_fail(err, SPINDLE_ERR_FORMAT, "an extension with an invalid name")
               : st;
}

/* Section `tag` (payload p, len bytes) into ck; *seen tracks the known
 * tags (bits in the order of `known`). */
static spindle_status parse_section(spindle_checkpoint *ck, const char *tag,
                                    const unsigned char *p, uint64_t len,
                                    unsigned *seen, spindle_error *err) {
    static const char known[6][5] = {"META", "TOKS", "STOP", "XTCS", "BIAS", "SNAP"};
    int k = -1;
    for (int i = 0; i < 6; i++)
        if (!memcmp(tag, known[i], 4)) k = i;
    if (!memcmp(tag, "EXTN", 4)) return add_parsed_extension(ck, p, len, err);
    if (k < 0) return SPINDLE_OK;   /* a newer writer's section */
    if (*seen & (1u << k))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "section %s repeated", known[k]);
    *seen |= 1u << k;
    spindle_gen_params *g = &ck->params;
    int n = 0;
    bool ok = true;
    switch (k) {
    case 0:
        if (len != sizeof(meta_record)) ok = false;
        else {
            meta_record m;
            memcpy(&m, p, sizeof m);
            meta_into(&m, ck);
        }
        break;
    case 1: ck->tokens = copy_words(p, len, &ck->n_tokens_read, &ok); break;
    case 2:
        g->stop_ids = ck->stop_ids = copy_words(p, len, &g->n_stop_ids, &ok);
        break;
    case 3:
        g->sampler.xtc_special_tokens = ck->xtc_special =
            copy_words(p, len, &g->sampler.n_xtc_special_tokens, &ok);
        break;
    case 4:
        ok = len % 8 == 0;
        if (!ok) break;
        g->logit_bias_ids = ck->bias_ids = copy_words(p, len / 2, &g->n_logit_bias, &ok);
        g->logit_bias_values = ck->bias_values = copy_words(p + len / 2, len / 2, &n, &ok);
        break;
    default:
        ck->snap_data = malloc(len ? (size_t)len : 1);
        ok = ck->snap_data != NULL;
        if (ok) memcpy(ck->snap_data, p, (size_t)len);
        ck->snap_n = (size_t)len;
    }
    return ok ? SPINDLE_OK
              : sp_fail(err, SPINDLE_ERR_FORMAT, "section %s is malformed", known[k]);
}

/* The counts against each other, once every section is in. */
static spindle_status check_parsed(const spindle_checkpoint *ck, unsigned seen,
                                   spindle_error *err) {
    if ((seen & 0x23u) != 0x23u)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "a section is missing (META, TOKS and SNAP are required)");
    const spindle_gen_params *g = &ck->params;
    if (ck->n_prompt < 1 || ck->n_generated < (ck->prompt_state ? 0 : 1) ||
        (ck->prompt_state && ck->n_generated != 0) ||
        ck->n_prompt > MAX_TOKENS - ck->n_generated ||
        ck->n_tokens_read != ck->n_prompt + ck->n_generated)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "token counts disagree (prompt %d, generated %d, %d stored)",
                       (int)ck->n_prompt, (int)ck->n_generated, ck->n_tokens_read);
    if (!ck->prompt_state && g->max_tokens <= ck->n_generated)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "generated %d of at most %d: nothing left to resume",
                       (int)ck->n_generated, g->max_tokens);
    for (int i = 0; i < SPINDLE_FINGERPRINT_LEN; i++) {
        char c = ck->fingerprint[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return sp_fail(err, SPINDLE_ERR_FORMAT, "a malformed model fingerprint");
    }
    return SPINDLE_OK;
}

static spindle_status parse_sections(cursor *c, uint32_t count,
                                     spindle_checkpoint *ck, spindle_error *err) {
    unsigned seen = 0;
    for (uint32_t i = 0; i < count; i++) {
        const unsigned char *h = take(c, SECTION_BYTES);
        if (!h) return sp_fail(err, SPINDLE_ERR_FORMAT, "truncated (section %u)", i);
        uint64_t len;
        memcpy(&len, h + 8, 8);
        const unsigned char *p = len <= c->n - c->at ? take(c, (size_t)len) : NULL;
        if (!p) return sp_fail(err, SPINDLE_ERR_FORMAT, "truncated (section %u)", i);
        char tag[5] = {(char)h[0], (char)h[1], (char)h[2], (char)h[3], 0};
        spindle_status st = parse_section(ck, tag, p, len, &seen, err);
        if (st) return st;
    }
    if (c->at != c->n)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "bytes after the last section");
    return check_parsed(ck, seen, err);
}

spindle_status sp_checkpoint_parse(const unsigned char *data, size_t n,
                                   bool verify_checksum,
                                   spindle_checkpoint **out,
                                   spindle_error *err) {
    *out = NULL;
    if (n < HEAD_BYTES + SUM_BYTES || memcmp(data, MAGIC, 8) != 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       n < HEAD_BYTES + SUM_BYTES ? "truncated"
                                                  : "not a Spindle checkpoint");
    uint32_t head[2];
    memcpy(head, data + 8, 8);
    if (head[0] != VERSION)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "checkpoint version %u (this build reads %u)", head[0], VERSION);
    size_t body = n - SUM_BYTES;
    if (verify_checksum) {
        XXH128_canonical_t sum;
        XXH128_canonicalFromHash(&sum, XXH3_128bits(data, body));
        if (memcmp(&sum, data + body, SUM_BYTES) != 0)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "checksum mismatch (corrupted or truncated)");
    }
    spindle_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    cursor c = {data, body, HEAD_BYTES};
    spindle_status st = parse_sections(&c, head[1], ck, err);
    if (st) {
        spindle_checkpoint_free(ck);
        return st;
    }
    *out = ck;
    return SPINDLE_OK;
}

/* A private copy, not a mapping: a file truncated under a mapping would
 * fault instead of failing. */
static spindle_status read_whole(const char *path, unsigned char **out,
                                 size_t *n, spindle_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return sp_fail(err, SPINDLE_ERR_IO, "checkpoint %s: no such file", path);
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    unsigned char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    bool ok = buf && fseek(f, 0, SEEK_SET) == 0 &&
              fread(buf, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    if (!ok) {
        free(buf);
        return sp_fail(err, buf || size < 0 ? SPINDLE_ERR_IO : SPINDLE_ERR_MEMORY,
                       "checkpoint %s: cannot read", path);
    }
    *out = buf;
    *n = (size_t)size;
    return SPINDLE_OK;
}

/* The parsed snapshot as one of `model`'s, of the length the tokens say. */
static spindle_status bind_snapshot(spindle_model *model, spindle_checkpoint *ck,
                                    spindle_error *err) {
    spindle_status st = spindle_seq_snapshot_from_data(model, ck->snap_data,
                                                       ck->snap_n, &ck->snap, err);
    if (st) return st;
    free(ck->snap_data);
    ck->snap_data = NULL;
    ck->snap_n = 0;
    int want = ck->n_prompt + ck->n_generated - (ck->prompt_state ? 0 : 1);
    if (spindle_seq_snapshot_length(ck->snap) != want)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "the state covers %d tokens, the tokens say %d",
                       spindle_seq_snapshot_length(ck->snap), want);
    return SPINDLE_OK;
}

/* A checkpoint (prompt_state false) or a saved state (true) of model. */
static spindle_status load_file(spindle_model *model, const char *path,
                                bool prompt_state, spindle_checkpoint **out,
                                spindle_error *err) {
    if (!model || !path || !out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    char fp[SPINDLE_FINGERPRINT_LEN + 1];
    spindle_status st = spindle_model_fingerprint(model, fp, err);
    if (st) return st;
    unsigned char *data = NULL;
    size_t n = 0;
    st = read_whole(path, &data, &n, err);
    if (st) return st;
    spindle_checkpoint *ck = NULL;
    spindle_error why = {0};
    st = sp_checkpoint_parse(data, n, true, &ck, &why);
    free(data);
    if (!st && strcmp(ck->fingerprint, fp) != 0)
        st = sp_fail(&why, SPINDLE_ERR_ARGUMENT,
                     "written for another model (fingerprint %s; this model's "
                     "is %s)", ck->fingerprint, fp);
    if (!st && ck->prompt_state != prompt_state)
        st = sp_fail(&why, SPINDLE_ERR_ARGUMENT, "%s",
                     prompt_state ? "a generation checkpoint, not a saved state"
                                  : "a saved sequence state, not a generation checkpoint");
    if (!st) st = bind_snapshot(model, ck, &why);
    if (st) {
        spindle_checkpoint_free(ck);
        return sp_fail(err, st, "%s %s: %s", prompt_state ? "state" : "checkpoint",
                       path, why.message);
    }
    *out = ck;
    return SPINDLE_OK;
}

spindle_status spindle_checkpoint_load(spindle_model *model, const char *path,
                                       spindle_checkpoint **out,
                                       spindle_error *err) {
    return load_file(model, path, false, out, err);
}

spindle_status spindle_seq_state_save_keyed(spindle_model *model,
                                            const spindle_seq_snapshot *snap,
                                            const int32_t *tokens, int n,
                                            const unsigned char *adapter_key,
                                            size_t adapter_key_n,
                                            const char *path,
                                            spindle_error *err) {
    if (!model || !snap || !tokens || !path || (adapter_key_n && !adapter_key))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    if (adapter_key_n != 0 && adapter_key_n != SPINDLE_ADAPTER_KEY_BYTES)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "an adapter key of %zu bytes (spindle_adapter_key "
                       "gives %d)", adapter_key_n, SPINDLE_ADAPTER_KEY_BYTES);
    if (n < 1 || n != spindle_seq_snapshot_length(snap))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%d tokens for a state of %d", n, spindle_seq_snapshot_length(snap));
    sp_checkpoint_extension adapter = {.name = SP_CHECKPOINT_ADAPTER_EXT,
                                       .data = (unsigned char *)adapter_key,
                                       .n = adapter_key_n};
    spindle_checkpoint ck = {.n_prompt = n, .prompt_state = true,
                             .tokens = (int32_t *)tokens,
                             .snap = (spindle_seq_snapshot *)snap,
                             .ext = adapter_key_n ? &adapter : NULL,
                             .n_ext = adapter_key_n ? 1 : 0};
    ck.params = spindle_gen_defaults();
    spindle_status st = spindle_model_fingerprint(model, ck.fingerprint, err);
    return st ? st : spindle_checkpoint_save(&ck, path, err);
}

spindle_status spindle_seq_state_save(spindle_model *model,
                                      const spindle_seq_snapshot *snap,
                                      const int32_t *tokens, int n,
                                      const char *path, spindle_error *err) {
    return spindle_seq_state_save_keyed(model, snap, tokens, n, NULL, 0, path,
                                        err);
}

spindle_status spindle_seq_state_load_keyed(
    spindle_model *model, const char *path, spindle_seq_snapshot **snap,
    int32_t **tokens, int *n,
    unsigned char adapter_key[SPINDLE_ADAPTER_KEY_BYTES],
    size_t *adapter_key_n, spindle_error *err) {
    if (!snap || !tokens || !n || !adapter_key_n)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    spindle_checkpoint *ck = NULL;
    spindle_status st = load_file(model, path, true, &ck, err);
    if (st) return st;
    size_t key_n = 0;
    const void *key =
        spindle_checkpoint_extension(ck, SP_CHECKPOINT_ADAPTER_EXT, &key_n);
    if (key && key_n != SPINDLE_ADAPTER_KEY_BYTES) {
        spindle_checkpoint_free(ck);
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "state %s: a malformed adapter record (%zu bytes)",
                       path, key_n);
    }
    if (key && !adapter_key) {
        spindle_checkpoint_free(ck);
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "state %s: computed under a LoRA adapter (read it with "
                       "spindle_seq_state_load_keyed)", path);
    }
    *adapter_key_n = key ? key_n : 0;
    if (key && adapter_key) memcpy(adapter_key, key, key_n);
    *snap = ck->snap;
    *tokens = ck->tokens;
    *n = ck->n_prompt;
    ck->snap = NULL;
    ck->tokens = NULL;
    spindle_checkpoint_free(ck);
    return SPINDLE_OK;
}

spindle_status spindle_seq_state_load(spindle_model *model, const char *path,
                                      spindle_seq_snapshot **snap,
                                      int32_t **tokens, int *n,
                                      spindle_error *err) {
    size_t key_n = 0;
    return spindle_seq_state_load_keyed(model, path, snap, tokens, n, NULL,
                                        &key_n, err);
}
