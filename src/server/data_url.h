/* An image sent inline as an RFC 2397 data URL ("data:image/png;base64,
 * ..."), as OpenAI's image_url content parts carry it. A pure function,
 * fuzzed by tests/fuzz/fuzz_data_url.c. */
#ifndef SP_SERVER_DATA_URL_H
#define SP_SERVER_DATA_URL_H

#include <stdbool.h>
#include <stddef.h>

/* `url` (len bytes, need not end in NUL) decoded into *bytes (malloc'd,
 * *n bytes) when it is a base64 data URL of a PNG, JPEG, WebP or GIF
 * whose decoded bytes start with that format's signature and number at
 * most max_bytes. Otherwise false, *bytes NULL, and `why` (why_cap bytes)
 * one line naming the problem: not a data URL, a media type other than
 * the four, no ";base64", invalid base64, too large, or bytes that are not
 * the declared format. Thread-safe. */
bool sp_data_url_image(const char *url, size_t len, size_t max_bytes,
                       unsigned char **bytes, size_t *n, char *why, size_t why_cap);

#endif
