/* The one growable string buffer, sp_strbuf (strbuf.h). */
#include "base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

bool sp_strbuf_reserve(sp_strbuf *b, size_t extra) {
    if (b->oom || b->overflow) return false;
    if (b->limit && (extra > b->limit || b->len > b->limit - extra)) {
        b->overflow = true;
        return false;
    }
    if (extra < b->cap && b->len < b->cap - extra) return true;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    /* A NUL-terminated string from its first reservation on, so a buffer
     * that stays empty can be handed out as "". */
    b->p[b->len] = '\0';
    return true;
}

bool sp_strbuf_add(sp_strbuf *b, const char *s, size_t n) {
    if (!sp_strbuf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool sp_strbuf_addc(sp_strbuf *b, char c) { return sp_strbuf_add(b, &c, 1); }

bool sp_strbuf_add_cp(sp_strbuf *b, uint32_t cp) {
    char tmp[4];
    return sp_strbuf_add(b, tmp, sp_utf8_encode(cp, tmp));
}

bool sp_strbuf_printf(sp_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sp_strbuf_reserve(b, (size_t)n)) return false;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return true;
}

void sp_strbuf_free(sp_strbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
