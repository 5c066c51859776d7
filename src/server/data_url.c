/* Base64 image data URLs (data_url.h). */
#include "server/data_url.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool fail(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return false;
}

typedef struct image_kind {
    const char *mime;
    const char *name;
} image_kind;

/* The media types taken, and the name the error gives each. image/jpg is
 * not registered but browsers and SDK examples write it. */
static const image_kind KINDS[] = {
    {"image/png", "PNG"},  {"image/jpeg", "JPEG"}, {"image/jpg", "JPEG"},
    {"image/webp", "WebP"}, {"image/gif", "GIF"},
};

static bool has_signature(const char *name, const unsigned char *b, size_t n) {
    if (!strcmp(name, "PNG")) return n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8);
    if (!strcmp(name, "JPEG")) return n >= 3 && !memcmp(b, "\xff\xd8\xff", 3);
    if (!strcmp(name, "WebP")) return n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4);
    return n >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6));
}

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 (RFC 4648 section 4), padding optional; out holds at
 * least len / 4 * 3 + 2 bytes. */
static bool b64_decode(const char *s, size_t len, unsigned char *out, size_t *n,
                       char *why, size_t cap) {
    size_t pad = 0;
    while (pad < 2 && len > 0 && s[len - 1] == '=') {
        len--;
        pad++;
    }
    if (pad && (len + pad) % 4)
        return fail(why, cap, "the image's base64 has misplaced '=' padding");
    if (len % 4 == 1) return fail(why, cap, "the image's base64 is truncated (%zu characters)", len);
    uint32_t acc = 0;
    size_t bits = 0, k = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            return fail(why, cap, "the image's base64 has an invalid character at offset %zu", i);
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[k++] = (unsigned char)(acc >> bits);
        }
    }
    *n = k;
    return true;
}

/* The media type of "data:TYPE[;param]*;base64," into *kind, and where
 * the payload starts into *payload. */
static bool read_header(const char *url, size_t len, const image_kind **kind,
                        size_t *payload, char *why, size_t cap) {
    const char *comma = memchr(url, ',', len);
    if (len < 5 || strncasecmp(url, "data:", 5) || !comma)
        return fail(why, cap, "the image URL is not a data URL (data:image/png;base64,...)");
    const char *type = url + 5, *end = comma;
    const char *semi = memchr(type, ';', (size_t)(end - type));
    size_t tlen = (size_t)((semi ? semi : end) - type);
    *kind = NULL;
    for (size_t i = 0; i < sizeof KINDS / sizeof *KINDS && !*kind; i++)
        if (strlen(KINDS[i].mime) == tlen && !strncasecmp(type, KINDS[i].mime, tlen))
            *kind = &KINDS[i];
    if (!*kind) {
        char shown[61];   /* printable, so that the error stays one line */
        size_t k = 0;
        for (; k < tlen && k < sizeof shown - 1; k++)
            shown[k] = type[k] >= 0x20 && type[k] < 0x7f ? type[k] : '?';
        shown[k] = '\0';
        return fail(why, cap, "the image's media type '%s' is not one of image/png, "
                    "image/jpeg, image/webp, image/gif", shown);
    }
    if ((size_t)(end - type) < 7 || strncasecmp(end - 7, ";base64", 7))
        return fail(why, cap, "the image's data URL is not base64 (';base64,' expected)");
    *payload = (size_t)(comma + 1 - url);
    return true;
}

bool sp_data_url_image(const char *url, size_t len, size_t max_bytes,
                       unsigned char **bytes, size_t *n, char *why, size_t why_cap) {
    const image_kind *kind = NULL;
    size_t at = 0;
    *bytes = NULL;
    *n = 0;
    if (!read_header(url, len, &kind, &at, why, why_cap)) return false;
    const size_t chars = len - at;
    if (chars / 4 * 3 > max_bytes + 2)
        return fail(why, why_cap, "the image is larger than the server's limit of %zu bytes",
                    max_bytes);
    unsigned char *out = malloc(chars / 4 * 3 + 3);
    size_t got = 0;
    if (!out) return fail(why, why_cap, "out of memory for the image");
    bool ok = b64_decode(url + at, chars, out, &got, why, why_cap);
    if (ok && got > max_bytes)
        ok = fail(why, why_cap, "the image is larger than the server's limit of %zu bytes",
                  max_bytes);
    if (ok && !got) ok = fail(why, why_cap, "the image's data URL is empty");
    if (ok && !has_signature(kind->name, out, got))
        ok = fail(why, why_cap, "the image's bytes are not a %s file, as its media type "
                  "'%s' says", kind->name, kind->mime);
    if (!ok) {
        free(out);
        return false;
    }
    *bytes = out;
    *n = got;
    return true;
}
