/* The image processors' pre-processing, reproducing PIL bit for bit where
 * transformers calls it (the PIL backend of its image processors) on a
 * file that load_image opened:
 *  - Image.convert("RGB"): alpha dropped;
 *  - Image.resize: the separable antialiased convolution of PIL's
 *    Resample.c on 8-bit channels: one pass along each axis with an 8-bit
 *    intermediate, coefficients in 22-bit fixed point and the filter's
 *    support widened by the downscale factor;
 *  - rescale in double, stored as f32; normalize in f32. */
#include "vision/image.h"
#include "base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)   /* Resample.c's fixed point */

typedef struct resample_filter {
    double (*fn)(double x);
    double support;
} resample_filter;

static double box_filter(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

static double bilinear_filter(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double hamming_filter(double x) {
    if (x < 0.0) x = -x;
    if (x == 0.0) return 1.0;
    if (x >= 1.0) return 0.0;
    x = x * M_PI;
    return sin(x) / x * (0.54 + 0.46 * cos(x));
}

static double bicubic_filter(double x) {
    const double a = -0.5;   /* PIL's, not the -0.75 of some libraries */
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static double sinc_filter(double x) {
    if (x == 0.0) return 1.0;
    x = x * M_PI;
    return sin(x) / x;
}

static double lanczos_filter(double x) {
    return -3.0 <= x && x < 3.0 ? sinc_filter(x) * sinc_filter(x / 3) : 0.0;
}

/* Indexed by PIL's Resampling numbers; 0 (nearest) is not a convolution. */
static const resample_filter filters[] = {
    {NULL, 0}, {lanczos_filter, 3.0}, {bilinear_filter, 1.0},
    {bicubic_filter, 2.0}, {box_filter, 0.5}, {hamming_filter, 1.0}};

/* Per output index: the first input index, the count, and ksize fixed-point
 * coefficients (precompute_coeffs + normalize_coeffs_8bpc). */
typedef struct coeffs {
    int ksize;
    int *bounds;      /* [out][2] */
    int32_t *k;       /* [out][ksize] */
} coeffs;

static bool coeffs_init(coeffs *c, int in_size, int out_size,
                        const resample_filter *f) {
    double scale = (double)in_size / out_size, filterscale = scale;
    if (filterscale < 1.0) filterscale = 1.0;
    const double support = f->support * filterscale;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->bounds = malloc((size_t)out_size * 2 * sizeof *c->bounds);
    c->k = calloc((size_t)out_size * c->ksize, sizeof *c->k);
    double *w = malloc((size_t)c->ksize * sizeof *w);
    if (!c->bounds || !c->k || !w) {
        free(w);
        return false;
    }
    for (int xx = 0; xx < out_size; xx++) {
        const double center = (xx + 0.5) * scale, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            w[x] = f->fn((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        int32_t *k = c->k + (size_t)xx * c->ksize;
        for (int x = 0; x < xmax; x++) {
            const double v = ww != 0.0 ? w[x] / ww : w[x];
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                         : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = xmax;
    }
    free(w);
    return true;
}

static void coeffs_free(coeffs *c) {
    free(c->bounds);
    free(c->k);
}

static inline uint8_t clip8(int32_t v) {
    if (v >= (1 << PRECISION_BITS << 8)) return 255;
    if (v <= 0) return 0;
    return (uint8_t)(v >> PRECISION_BITS);
}

/* out[y][x][c] (RGB) from in rows first_row.. through the coefficients
 * along x. */
static void resample_horizontal(uint8_t *out, int out_w, int out_h,
                                const uint8_t *in, int in_w, int first_row,
                                const coeffs *c) {
    for (int y = 0; y < out_h; y++) {
        const uint8_t *row = in + (size_t)(y + first_row) * in_w * 3;
        for (int xx = 0; xx < out_w; xx++) {
            const int xmin = c->bounds[2 * xx], xmax = c->bounds[2 * xx + 1];
            const int32_t *k = c->k + (size_t)xx * c->ksize;
            int32_t s[3] = {1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1),
                            1 << (PRECISION_BITS - 1)};
            for (int x = 0; x < xmax; x++)
                for (int ch = 0; ch < 3; ch++)
                    s[ch] += row[(x + xmin) * 3 + ch] * k[x];
            for (int ch = 0; ch < 3; ch++)
                out[((size_t)y * out_w + xx) * 3 + ch] = clip8(s[ch]);
        }
    }
}

static void resample_vertical(uint8_t *out, int w, int out_h,
                              const uint8_t *in, const coeffs *c,
                              int first_row) {
    for (int yy = 0; yy < out_h; yy++) {
        const int ymin = c->bounds[2 * yy] - first_row;
        const int ymax = c->bounds[2 * yy + 1];
        const int32_t *k = c->k + (size_t)yy * c->ksize;
        for (int x = 0; x < w * 3; x++) {
            int32_t s = 1 << (PRECISION_BITS - 1);
            for (int y = 0; y < ymax; y++)
                s += in[(size_t)(y + ymin) * w * 3 + x] * k[y];
            out[(size_t)yy * w * 3 + x] = clip8(s);
        }
    }
}

/* The file's image as load_image (transformers' and mlx-vlm's) hands it
 * to the processor: Image.convert("RGB"), which drops the alpha channel
 * (llama.cpp's mtmd, reading 3 channels with stb_image, does the same). */
static void drop_alpha(const sp_image *img, uint8_t *rgb) {
    const size_t n = (size_t)img->width * img->height;
    for (size_t i = 0; i < n; i++)
        memcpy(rgb + 3 * i, img->rgba + 4 * i, 3);
}

/* The RGB image resized to p->width x p->height into out (RGB). Pillow
 * 13 runs the vertical pass first when the height shrinks by more than
 * twice as many pixels as the width (an 8-bit intermediate either way, so
 * the order shows in the last bit); earlier Pillows always began with the
 * horizontal pass, which only covers the rows the vertical pass reads. */
static bool resize_rgb(const uint8_t *rgb, int w, int h, const sp_image_prep *p,
                       uint8_t *out) {
    const resample_filter *f = &filters[p->resample];
    const int W = p->width, H = p->height;
    const bool need_h = W != w, need_v = H != h;
    const bool vertical_first = h - H > 0 && h - H > (w - W) * 2;
    coeffs ch = {0}, cv = {0};
    uint8_t *tmp = NULL;
    bool ok = coeffs_init(&ch, w, W, f) && coeffs_init(&cv, h, H, f);
    if (ok && need_h && need_v && vertical_first) {
        ok = (tmp = malloc((size_t)w * H * 3)) != NULL;
        if (ok) {
            resample_vertical(tmp, w, H, rgb, &cv, 0);
            resample_horizontal(out, W, H, tmp, w, 0, &ch);
        }
    } else if (ok && need_h && need_v) {
        const int first = cv.bounds[0];
        const int last = cv.bounds[2 * H - 2] + cv.bounds[2 * H - 1];
        ok = (tmp = malloc((size_t)W * (last - first) * 3)) != NULL;
        if (ok) {
            resample_horizontal(tmp, W, last - first, rgb, w, first, &ch);
            resample_vertical(out, W, H, tmp, &cv, first);
        }
    } else if (ok && need_h) {
        resample_horizontal(out, W, H, rgb, w, 0, &ch);
    } else if (ok && need_v) {
        resample_vertical(out, W, H, rgb, &cv, 0);
    } else if (ok) {
        memcpy(out, rgb, (size_t)w * h * 3);
    }
    free(tmp);
    coeffs_free(&ch);
    coeffs_free(&cv);
    return ok;
}

spindle_status sp_image_preprocess(const sp_image *img, const sp_image_prep *p,
                                   float *out, spindle_error *err) {
    if (p->resample < 1 || p->resample > 5)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "resample filter %d is not supported (PIL's 1-5)",
                       p->resample);
    if (p->width < 1 || p->height < 1 || p->width > 8192 || p->height > 8192)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "bad processor size %dx%d",
                       p->width, p->height);
    const int w = img->width, h = img->height;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    uint8_t *sized = malloc((size_t)p->width * p->height * 3);
    bool ok = rgb && sized;
    if (ok) drop_alpha(img, rgb);
    if (ok) ok = resize_rgb(rgb, w, h, p, sized);
    if (ok) {
        const size_t plane = (size_t)p->width * p->height;
        for (size_t i = 0; i < plane; i++)
            for (int ch = 0; ch < 3; ch++) {
                const float x = (float)((double)sized[3 * i + ch] * p->rescale);
                out[ch * plane + i] = (x - p->mean[ch]) / p->std[ch];
            }
    }
    free(rgb);
    free(sized);
    return ok ? SPINDLE_OK : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
}
