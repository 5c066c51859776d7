/* A growable byte string, kept NUL-terminated once anything was added.
 * Failures are sticky: after an allocation fails (`oom`) or an append would
 * pass `limit` (`overflow`), every later append fails too, so a caller may
 * append a run of pieces and check once at the end. */
#ifndef SP_BASE_STRBUF_H
#define SP_BASE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct sp_strbuf {
    char *p;
    size_t len, cap;
    size_t limit;  /* most bytes it may hold; 0: no limit */
    bool overflow; /* an append was refused by `limit` */
    bool oom;      /* an allocation failed */
} sp_strbuf;

/* Room for `extra` more bytes and the terminating NUL. */
bool sp_strbuf_reserve(sp_strbuf *b, size_t extra);
bool sp_strbuf_add(sp_strbuf *b, const char *s, size_t n);
bool sp_strbuf_addc(sp_strbuf *b, char c);
/* Append code point `cp` encoded as UTF-8. */
bool sp_strbuf_add_cp(sp_strbuf *b, uint32_t cp);
bool sp_strbuf_printf(sp_strbuf *b, const char *fmt, ...) SP_PRINTF(2, 3);
/* Release the bytes and reset every field (the limit too). */
void sp_strbuf_free(sp_strbuf *b);

#endif
