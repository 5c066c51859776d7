/* UTF-8 encoding and decoding, shared by the tokenizer and the template
 * engine. Decoding never fails and never reads past `n`: an ill-formed
 * sequence (Unicode 15, table 3-7) decodes as its first byte alone, with
 * that byte's value, so a scan always advances. */
#ifndef SP_BASE_UTF8_H
#define SP_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"

/* The code point at s (n >= 1 bytes left); *len gets its byte length. */
uint32_t sp_utf8_next(const char *s, size_t n, int *len);
/* Write cp (at most 0x10FFFF) to out; returns the byte count, 1 to 4. */
size_t sp_utf8_encode(uint32_t cp, char out[4]);
/* True when s[0..n) is well-formed UTF-8. */
bool sp_utf8_valid(const char *s, size_t n);
/* Offset of the first byte of s[0..n) that starts no well-formed sequence,
 * or n when there is none. */
size_t sp_utf8_invalid_at(const char *s, size_t n);
/* Append s to out, replacing every maximal invalid subpart with U+FFFD
 * (the rule of Rust's String::from_utf8_lossy and Python's 'replace'). */
bool sp_utf8_lossy(const char *s, size_t n, sp_strbuf *out);

static inline bool sp_utf8_is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }
/* Code points in s[0..n): the bytes that are not continuation bytes. */
size_t sp_utf8_count(const char *s, size_t n);
/* Byte offset of code point `index` in s[0..n), or n when there are fewer. */
size_t sp_utf8_offset(const char *s, size_t n, size_t index);
/* The sequence length a lead byte announces, without checking the rest
 * (llama.cpp's unicode_len_utf8): 1 for ASCII and stray continuation bytes. */
static inline size_t sp_utf8_lead_len(unsigned char c) {
    static const unsigned char len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

#endif
