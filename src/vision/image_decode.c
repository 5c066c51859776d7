/* Image decoding through the formats' reference libraries: libjpeg-turbo
 * (TurboJPEG; what PIL decodes JPEG with, so the pixels are PIL's), libpng
 * (its simplified API) and libwebp; GIF through stb_image (Debian's
 * libstb-dev), whose JPEG and PNG decoders fuzzing showed reading out of
 * bounds on damaged files, so it decodes GIF only. Every input is
 * bounded before its pixels are decoded: its size in bytes, then the pixel
 * count its header declares. A JPEG's EXIF orientation is applied, as the
 * references' load_image does (PNG and WebP EXIF are not read). */
#include "vision/image.h"
#include "base/error.h"

#include <limits.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
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

/* TurboJPEG's CMYK pixels (as stored) to RGBA as PIL gives them: PIL
 * reads every CMYK JPEG as Adobe's inverted CMYK ("CMYK;I", c = 255 -
 * stored) and Image.convert("RGB") computes nk - c * nk / 255 (rounded)
 * with nk = 255 - k, its cmyk2rgb. */
static void cmyk_to_rgba(uint8_t *px, size_t n_pixels) {
    for (size_t i = 0; i < n_pixels; i++, px += 4) {
        const int nk = px[3];
        for (int ch = 0; ch < 3; ch++) {
            const int t = (255 - px[ch]) * nk + 128;
            const int v = nk - (((t >> 8) + t) >> 8);
            px[ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
        px[3] = 255;
    }
}

static spindle_status decode_jpeg(const unsigned char *p, size_t n,
                                  const sp_image_limits *lim, sp_image *out,
                                  spindle_error *err) {
    tjhandle tj = tjInitDecompress();
    if (!tj) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    int w = 0, h = 0, subsamp = 0, colorspace = 0;
    spindle_status st = SPINDLE_OK;
    if (n > ULONG_MAX ||
        tjDecompressHeader3(tj, p, (unsigned long)n, &w, &h, &subsamp, &colorspace))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "JPEG image is damaged (%s)",
                     tjGetErrorStr2(tj));
    if (!st) st = check_pixels(w, h, "JPEG", lim, err);
    if (!st && !(out->rgba = malloc((size_t)w * h * 4)))
        st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    /* TurboJPEG's defaults are libjpeg's (and PIL's): the accurate integer
     * IDCT and fancy upsampling. A warning (a truncated file whose start
     * decodes) fails too: PIL refuses truncated images. */
    const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    if (!st && tjDecompress2(tj, p, (unsigned long)n, out->rgba, w, 0, h,
                             cmyk ? TJPF_CMYK : TJPF_RGBA, TJFLAG_STOPONWARNING))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "JPEG image is damaged or "
                     "truncated (%s)", tjGetErrorStr2(tj));
    if (!st && cmyk) cmyk_to_rgba(out->rgba, (size_t)w * h);
    tjDestroy(tj);
    out->width = w;
    out->height = h;
    return st;
}

static spindle_status decode_png(const unsigned char *p, size_t n,
                                 const sp_image_limits *lim, sp_image *out,
                                 spindle_error *err) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    spindle_status st = SPINDLE_OK;
    if (!png_image_begin_read_from_memory(&img, p, n))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "PNG image is damaged (%s)",
                     img.message);
    if (!st) st = check_pixels((int)img.width, (int)img.height, "PNG", lim, err);
    if (!st) {
        img.format = PNG_FORMAT_RGBA;
        out->rgba = malloc(PNG_IMAGE_SIZE(img));
        if (!out->rgba) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    if (!st && !png_image_finish_read(&img, NULL, out->rgba, 0, NULL))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "PNG image is damaged or "
                     "truncated (%s)", img.message);
    png_image_free(&img);
    out->width = (int)img.width;
    out->height = (int)img.height;
    return st;
}

/* A GIF's transparency: where the first image's Graphic Control
 * Extension keeps its flag (bit 0; 0 when the flag is not set) and the
 * colour its transparent index has in the image's palette (the local one,
 * else the global one). The blocks before the first image descriptor are
 * walked within n bytes. */
typedef struct gif_transparency {
    size_t flag_at;
    bool has_colour;
    uint8_t rgb[3];
} gif_transparency;

static gif_transparency gif_find_transparency(const unsigned char *p, size_t n) {
    gif_transparency t = {0};
    if (n < 13) return t;
    size_t at = 13, palette = 0, colours = 0;
    if (p[10] & 0x80) {
        palette = 13;
        colours = (size_t)2 << (p[10] & 7);
        at += 3 * colours;
    }
    int index = -1;
    while (at + 1 < n && p[at] == 0x21) {   /* extensions, up to the image (0x2c) */
        if (p[at + 1] == 0xf9 && at + 6 < n && p[at + 2] == 4) {
            t.flag_at = p[at + 3] & 1 ? at + 3 : 0;
            index = t.flag_at ? p[at + 6] : -1;
        }
        at += 2;
        while (at < n && p[at]) at += 1 + (size_t)p[at];   /* sub-blocks */
        at++;
    }
    if (at + 9 < n && p[at] == 0x2c && (p[at + 9] & 0x80)) {
        palette = at + 10;
        colours = (size_t)2 << (p[at + 9] & 7);
    }
    if (index >= 0 && (size_t)index < colours && palette + 3 * (size_t)index + 3 <= n) {
        t.has_colour = true;
        memcpy(t.rgb, p + palette + 3 * (size_t)index, 3);
    }
    return t;
}

/* What transformers' image processors (convert_to_rgb) make of a GIF
 * with a transparent index: Image.convert("RGB") gives every pixel its
 * palette colour and keeps the transparent index's colour as the image's
 * transparency, and the processor then composites that colour, wherever
 * it is, onto white. */
static void gif_transparent_to_white(uint8_t *rgba, size_t n_pixels, const uint8_t rgb[3]) {
    for (size_t i = 0; i < n_pixels; i++, rgba += 4)
        if (!memcmp(rgba, rgb, 3)) memset(rgba, 255, 3);
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
    /* A GIF decodes to its first frame. Its transparent pixels take their
     * palette colour first (stb_image would leave them black): the
     * transparency flag is cleared in a copy. */
    const gif_transparency t = kind == KIND_GIF ? gif_find_transparency(p, n)
                                                : (gif_transparency){0};
    unsigned char *opaque = t.flag_at ? malloc(n) : NULL;
    if (t.flag_at && !opaque) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (opaque) {
        memcpy(opaque, p, n);
        opaque[t.flag_at] &= (unsigned char)~1u;
        p = opaque;
    }
    unsigned char *px = stbi_load_from_memory(p, (int)n, &w, &h, &comp, 4);
    free(opaque);
    if (!px)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s image is damaged or "
                       "truncated (%s)", name, stbi_failure_reason());
    out->rgba = malloc((size_t)w * h * 4);
    if (out->rgba) memcpy(out->rgba, px, (size_t)w * h * 4);
    stbi_image_free(px);
    if (!out->rgba) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (t.has_colour) gif_transparent_to_white(out->rgba, (size_t)w * h, t.rgb);
    out->width = w;
    out->height = h;
    return SPINDLE_OK;
}

static uint32_t read_u16(const unsigned char *p, bool big) {
    return big ? (uint32_t)p[0] << 8 | p[1] : (uint32_t)p[1] << 8 | p[0];
}

static uint32_t read_u32(const unsigned char *p, bool big) {
    return big ? read_u16(p, true) << 16 | read_u16(p + 2, true)
               : read_u16(p + 2, false) << 16 | read_u16(p, false);
}

/* The EXIF orientation (1-8) in a TIFF block, or 1. */
static int tiff_orientation(const unsigned char *t, size_t n) {
    if (n < 8 || (memcmp(t, "II", 2) && memcmp(t, "MM", 2))) return 1;
    const bool big = t[0] == 'M';
    const uint32_t ifd = read_u32(t + 4, big);
    if (ifd > n - 2) return 1;
    const uint32_t count = read_u16(t + ifd, big);
    for (uint32_t i = 0; i < count && ifd + 2 + 12 * (i + 1) <= n; i++) {
        const unsigned char *e = t + ifd + 2 + 12 * i;
        if (read_u16(e, big) == 0x0112 && read_u16(e + 2, big) == 3) {
            const uint32_t v = read_u16(e + 8, big);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
    return 1;
}

/* A JPEG's EXIF orientation (its APP1 segment before the scan), or 1. */
static int jpeg_orientation(const unsigned char *p, size_t n) {
    size_t i = 2;
    while (i + 4 <= n && p[i] == 0xFF) {
        const unsigned marker = p[i + 1];
        const size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
        if (marker == 0xDA || len < 2 || i + 2 + len > n) break;
        if (marker == 0xE1 && len >= 8 && !memcmp(p + i + 4, "Exif\0\0", 6))
            return tiff_orientation(p + i + 10, len - 8);
        i += 2 + len;
    }
    return 1;
}

/* The image turned upright as PIL's ImageOps.exif_transpose turns it
 * (transformers' and mlx-vlm's load_image call it): orientation 2-8 are
 * the mirror, rotations and transpositions EXIF defines. */
static spindle_status apply_orientation(sp_image *img, int orientation,
                                        spindle_error *err) {
    if (orientation <= 1) return SPINDLE_OK;
    const int w = img->width, h = img->height;
    const bool swap = orientation >= 5;
    const int ow = swap ? h : w, oh = swap ? w : h;
    uint8_t *out = malloc((size_t)w * h * 4);
    if (!out) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int sx = x, sy = y;
            switch (orientation) {
            case 2: sx = w - 1 - x; break;
            case 3: sx = w - 1 - x; sy = h - 1 - y; break;
            case 4: sy = h - 1 - y; break;
            case 5: sx = y; sy = x; break;
            case 6: sx = y; sy = h - 1 - x; break;
            case 7: sx = w - 1 - y; sy = h - 1 - x; break;
            case 8: sx = w - 1 - y; sy = x; break;
            }
            memcpy(out + ((size_t)y * ow + x) * 4,
                   img->rgba + ((size_t)sy * w + sx) * 4, 4);
        }
    free(img->rgba);
    img->rgba = out;
    img->width = ow;
    img->height = oh;
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
    spindle_status st =
        kind == KIND_WEBP   ? decode_webp(p, n, lim, out, err)
        : kind == KIND_JPEG ? decode_jpeg(p, n, lim, out, err)
        : kind == KIND_PNG  ? decode_png(p, n, lim, out, err)
                            : decode_stb(p, n, kind, lim, out, err);
    if (!st && kind == KIND_JPEG)
        st = apply_orientation(out, jpeg_orientation(p, n), err);
    if (st) sp_image_free(out);
    return st;
}

void sp_image_free(sp_image *img) {
    if (!img) return;
    free(img->rgba);
    img->rgba = NULL;
    img->width = img->height = 0;
}
