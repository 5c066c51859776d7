/* The one UTF-8 decoder and encoder (utf8.h): every sequence checked, and
 * each maximal invalid subpart read as one U+FFFD where the caller asks for
 * replacement. */
#include "base/utf8.h"

/* Length of the well-formed sequence at u (0 when ill-formed); *sub gets
 * the length of the maximal invalid subpart when ill-formed. */
static int utf8_seq(const unsigned char *u, size_t n, int *sub) {
    unsigned c = u[0];
    *sub = 1;
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else return 0;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) { *sub = i; return 0; }
        unsigned d = u[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) {
            *sub = i;
            return 0;
        }
    }
    return need + 1;
}

uint32_t sp_utf8_next(const char *s, size_t n, int *len) {
    const unsigned char *u = (const unsigned char *)s;
    int sub, l = u[0] < 0x80 ? 1 : utf8_seq(u, n, &sub);
    switch (l) {
    case 2: *len = 2; return ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu);
    case 3:
        *len = 3;
        return ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
    case 4:
        *len = 4;
        return ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) |
               ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu);
    default: *len = 1; return u[0];
    }
}

size_t sp_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t sp_utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int sub, l = utf8_seq(u + i, n - i, &sub);
        if (!l) return i;
        i += (size_t)l;
    }
    return n;
}

bool sp_utf8_valid(const char *s, size_t n) {
    return sp_utf8_invalid_at(s, n) == n;
}

bool sp_utf8_lossy(const char *s, size_t n, sp_strbuf *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    if (!sp_strbuf_reserve(out, n)) return false;
    while (i < n) {
        int sub, l = u[i] < 0x80 ? 1 : utf8_seq(u + i, n - i, &sub);
        if (l) { i += (size_t)l; continue; }
        if (!sp_strbuf_add(out, s + run, i - run) ||
            !sp_strbuf_add(out, "\xEF\xBF\xBD", 3))
            return false;
        i += (size_t)sub;
        run = i;
    }
    return sp_strbuf_add(out, s + run, n - run);
}

size_t sp_utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += !sp_utf8_is_continuation((unsigned char)s[i]);
    return c;
}

size_t sp_utf8_offset(const char *s, size_t n, size_t index) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (sp_utf8_is_continuation((unsigned char)s[i])) continue;
        if (c == index) return i;
        c++;
    }
    return n;
}
