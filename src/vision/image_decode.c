/* Image decoding through stb_image (JPEG, PNG, GIF: Debian's libstb-dev,
 * the decoder llama.cpp's mtmd uses) and libwebp (WebP). Every input is
 * bounded before its pixels are decoded: its size in bytes, then the pixel
 * count its header declares. */
#include "vision/image.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_GIF
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_FAILURE_USERMSG
/* stb declares static helpers this file does not call; the warning comes
 * at the end of the file, after the push/pop below. */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmisleading-indentation"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

typedef enum image_kind { KIND_NONE, KIND_JPEG, KIND_PNG, KIND_GIF, KIND_WEBP } image_kind;

static image_kind kind_of(const unsigned char *p, size_t n) {
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return KIND_JPEG;
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return KIND_PNG;
    if (n >= 6 && (!memcmp(p, "GIF87a", 6) || !memcmp(p, "GIF89a", 6)))
        return KIND_GIF;
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4))
        return KIND_WEBP;
    return KIND_NONE;
}

static const char *const kind_names[] = {"", "JPEG", "PNG", "GIF", "WebP"};

static spindle_status check_pixels(int w, int h, const char *kind,
                                   const sp_image_limits *lim,
                                   spindle_error *err) {
    if (w <= 0 || h <= 0)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s image has no pixels (%dx%d)",
                       kind, w, h);
    if ((int64_t)w * h > lim->max_pixels)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "%s image of %dx%d pixels is over the limit of %lld "
                       "pixels", kind, w, h, (long long)lim->max_pixels);
    return SPINDLE_OK;
}

static spindle_status decode_webp(const unsigned char *p, size_t n,
                                  const sp_image_limits *lim, sp_image *out,
                                  spindle_error *err) {
    int w = 0, h = 0;
    if (!WebPGetInfo(p, n, &w, &h))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "WebP image is damaged "
                       "(bad header)");
    spindle_status st = check_pixels(w, h, "WebP", lim, err);
    if (st) return st;
    out->rgba = WebPDecodeRGBA(p, n, &w, &h);
    if (!out->rgba)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "WebP image is damaged or "
                       "truncated");
    /* libwebp's buffer is freed with WebPFree; keep one allocator. */
    uint8_t *copy = malloc((size_t)w * h * 4);
    if (copy) memcpy(copy, out->rgba, (size_t)w * h * 4);
    WebPFree(out->rgba);
    out->rgba = copy;
    if (!copy) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    out->width = w;
    out->height = h;
    return SPINDLE_OK;
}

static spindle_status decode_stb(const unsigned char *p, size_t n,
                                 image_kind kind, const sp_image_limits *lim,
                                 sp_image *out, spindle_error *err) {
    const char *name = kind_names[kind];
    int w = 0, h = 0, comp = 0;
    if (n > INT32_MAX || !stbi_info_from_memory(p, (int)n, &w, &h, &comp))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s image is damaged (%s)",
                       name, n > INT32_MAX ? "too large" : stbi_failure_reason());
    spindle_status st = check_pixels(w, h, name, lim, err);
    if (st) return st;
    /* A GIF decodes to its first frame. */
    unsigned char *px = stbi_load_from_memory(p, (int)n, &w, &h, &comp, 4);
    if (!px)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s image is damaged or "
                       "truncated (%s)", name, stbi_failure_reason());
    out->rgba = malloc((size_t)w * h * 4);
    if (out->rgba) memcpy(out->rgba, px, (size_t)w * h * 4);
    stbi_image_free(px);
    if (!out->rgba) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    out->width = w;
    out->height = h;
    return SPINDLE_OK;
}

spindle_status sp_image_decode(const void *data, size_t n,
                               const sp_image_limits *limits, sp_image *out,
                               spindle_error *err) {
    const sp_image_limits defaults = {SP_IMAGE_MAX_BYTES_DEFAULT,
                                      SP_IMAGE_MAX_PIXELS_DEFAULT};
    const sp_image_limits *lim = limits ? limits : &defaults;
    memset(out, 0, sizeof *out);
    if (!data && n) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    if (n == 0) return sp_fail(err, SPINDLE_ERR_FORMAT, "image is empty (0 bytes)");
    if (n > lim->max_bytes)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "image of %zu bytes is over the limit of %zu bytes", n,
                       lim->max_bytes);
    const unsigned char *p = data;
    image_kind kind = kind_of(p, n);
    if (kind == KIND_NONE)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "not a JPEG, PNG, WebP or GIF image (unknown signature)");
    spindle_status st = kind == KIND_WEBP ? decode_webp(p, n, lim, out, err)
                                          : decode_stb(p, n, kind, lim, out, err);
    if (st) sp_image_free(out);
    return st;
}

void sp_image_free(sp_image *img) {
    if (!img) return;
    free(img->rgba);
    img->rgba = NULL;
    img->width = img->height = 0;
}
