/* The byte string each token id stands for, as a grammar mask needs it:
 * the decoder's byte-level alphabet undone, SentencePiece's U+2581 turned
 * back into a space and <0xXX> byte-fallback tokens into their byte.
 * Added tokens have no bytes, special or not (<tool_call>, <think>): a
 * grammar never produces them, as llguidance treats them. */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "tokenizer/tok_gguf.h"

static bool decoder_has(const sp_dec *d, sp_dec_type type) {
    if (!d) return false;
    if (d->type == type) return true;
    for (int i = 0; i < d->n_subs; i++)
        if (decoder_has(&d->subs[i], type)) return true;
    return false;
}

static bool byte_level_bytes(const char *s, size_t n, sp_strbuf *out) {
    size_t at = out->len;
    for (size_t i = 0; i < n;) {
        int l;
        int b = sp_cp_to_byte(sp_utf8_next(s + i, n - i, &l));
        if (b < 0) { /* outside the byte alphabet: the token's own text */
            out->len = at;
            return sp_strbuf_add(out, s, n);
        }
        sp_strbuf_addc(out, (char)b);
        i += (size_t)l;
    }
    return !out->oom;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static bool sentencepiece_bytes(const spindle_tokenizer *tok, const char *s,
                                size_t n, sp_strbuf *out) {
    if (tok->model.byte_fallback && n == 6 && !memcmp(s, "<0x", 3) &&
        s[5] == '>' && hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0)
        return sp_strbuf_addc(out, (char)(hex_digit(s[3]) * 16 + hex_digit(s[4])));
    for (size_t i = 0; i < n; i++) {
        if (i + 2 < n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            sp_strbuf_addc(out, ' ');
            i += 2;
        } else {
            sp_strbuf_addc(out, s[i]);
        }
    }
    return !out->oom;
}

bool sp_tokenizer_token_bytes(const spindle_tokenizer *tok, int32_t id,
                              sp_strbuf *out) {
    if (!tok || id < 0 || id >= tok->vocab_size) return false;
    if (tok->gguf) return sp_gguf_token_bytes(tok, id, out);
    if (tok->added_of_id[id] >= 0) return false;
    size_t n = 0;
    const char *s = sp_tokenizer_token(tok, id, &n);
    if (!s) return false;
    if (decoder_has(tok->decoder, SP_DEC_BYTELEVEL))
        return byte_level_bytes(s, n, out);
    return sentencepiece_bytes(tok, s, n, out);
}
