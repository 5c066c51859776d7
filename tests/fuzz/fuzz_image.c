/* Image decoding and pre-processing (src/vision/image_decode.c,
 * image_resize.c): sp_image_decode on the input under small limits (so
 * that a fuzzed header cannot make a huge allocation look like a bug),
 * then sp_image_preprocess of what decoded to a small target size.
 *
 * Invariants: an error is one line; a decoded image has positive sides
 * within the pixel limit and a pixel buffer; every pre-processed value is
 * finite and within the range (0 - mean) / std .. (1 - mean) / std. */
#include "fuzz_common.h"

#include "vision/image.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const sp_image_limits lim = {.max_bytes = 1 << 20, .max_pixels = 1 << 20};
    sp_image img;
    spindle_error err = {0};
    spindle_status st = sp_image_decode(data, size, &lim, &img, &err);
    if (st) {
        FUZZ_CHECK(err.message[0] && !strchr(err.message, '\n'), "error '%s'",
                   err.message);
        return 0;
    }
    FUZZ_CHECK(img.width > 0 && img.height > 0 &&
                   (int64_t)img.width * img.height <= lim.max_pixels && img.rgba,
               "%dx%d", img.width, img.height);
    const sp_image_prep prep = {.width = 7, .height = 5,
                                .resample = 1 + (int)(size % 5),
                                .rescale = 1.0 / 255.0,
                                .mean = {0.5f, 0.5f, 0.5f},
                                .std = {0.5f, 0.5f, 0.5f}};
    float px[3 * 7 * 5];
    st = sp_image_preprocess(&img, &prep, px, &err);
    FUZZ_CHECK(st == SPINDLE_OK, "preprocess: %s", err.message);
    for (size_t i = 0; i < sizeof px / sizeof *px; i++)
        FUZZ_CHECK(isfinite(px[i]) && px[i] >= -1.0f && px[i] <= 1.0f,
                   "pixel %zu = %g", i, px[i]);
    sp_image_free(&img);
    return 0;
}
