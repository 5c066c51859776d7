/* Images in memory: decoding (vision/image_decode.c) and the processors'
 * pre-processing (vision/image_resize.c). Pure functions of their input:
 * no files, no model. */
#ifndef SP_VISION_IMAGE_H
#define SP_VISION_IMAGE_H

#include "spindle.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A decoded image: width * height RGBA pixels, 8 bits each, rows top down.
 * Formats without alpha decode with alpha 255. */
typedef struct sp_image {
    int width, height;
    uint8_t *rgba;
} sp_image;

/* What a decode accepts. A file past max_bytes is refused before it is
 * read, and one whose header declares more than max_pixels pixels (a
 * decompression bomb) before any pixel is decoded. */
typedef struct sp_image_limits {
    size_t max_bytes;
    int64_t max_pixels;
} sp_image_limits;

#define SP_IMAGE_MAX_BYTES_DEFAULT ((size_t)20 << 20)
#define SP_IMAGE_MAX_PIXELS_DEFAULT ((int64_t)40000000)

/* JPEG, PNG, WebP, or the first frame of a GIF, told apart by their
 * signatures; limits NULL: the defaults above. Fails with one line naming
 * what is wrong (SPINDLE_ERR_FORMAT for a file that is no image of these
 * kinds or a damaged one, SPINDLE_ERR_ARGUMENT for a limit). */
spindle_status sp_image_decode(const void *data, size_t n,
                               const sp_image_limits *limits, sp_image *out,
                               spindle_error *err);
void sp_image_free(sp_image *img);

/* How an image processor turns an image file into its pixel tensor, as
 * transformers' and mlx-vlm's load_image and image processors (PIL
 * backend) do: Image.convert("RGB") (alpha dropped), a resize to width x height with PIL's
 * filter `resample` (PIL's numbers: 0 nearest, 1 Lanczos, 2 bilinear,
 * 3 bicubic), then x * rescale, then (x - mean) / std per channel. */
typedef struct sp_image_prep {
    int width, height;
    int resample;
    double rescale;
    float mean[3], std[3];
} sp_image_prep;

/* out: 3 * height * width floats, channels first ([3][H][W], the
 * processors' pixel_values). SPINDLE_ERR_ARGUMENT for a filter PIL does
 * not have or a bad size. */
spindle_status sp_image_preprocess(const sp_image *img, const sp_image_prep *p,
                                   float *out, spindle_error *err);

#endif
