/* The image data-URL parser (src/server/data_url.c) on arbitrary bytes
 * under a small size limit.
 *
 * Invariants: a failure is one line with no image; a success has 1 ..
 * limit bytes that start with a PNG, JPEG, WebP or GIF signature, and the
 * same URL parses to the same bytes again (the parser keeps no state). */
#include "fuzz_common.h"

#include "server/data_url.h"

static bool signed_image(const unsigned char *b, size_t n) {
    return (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) ||
           (n >= 3 && !memcmp(b, "\xff\xd8\xff", 3)) ||
           (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) ||
           (n >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const size_t limit = 4096;
    unsigned char *bytes = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    char why[200] = "";
    if (!sp_data_url_image((const char *)data, size, limit, &bytes, &n, why, sizeof why)) {
        FUZZ_CHECK(!bytes && why[0] && !strchr(why, '\n'), "error '%s'", why);
        return 0;
    }
    FUZZ_CHECK(bytes && n >= 1 && n <= limit && signed_image(bytes, n), "%zu bytes", n);
    FUZZ_CHECK(sp_data_url_image((const char *)data, size, limit, &again, &n2, why, sizeof why) &&
                   n2 == n && !memcmp(again, bytes, n),
               "second parse differs");
    free(bytes);
    free(again);
    return 0;
}
