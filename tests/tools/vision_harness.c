/* Drives src/vision/ for tests/vision: writes raw little-endian f32 files.
 *   vision_harness pixels IMAGE WIDTH HEIGHT RESAMPLE OUT
 *       decode + pre-process (rescale 1/255, mean = std = 0.5), [3][H][W]
 *   vision_harness encode MODEL_DIR IMAGE OUT
 *       spindle_vision_encode: [tokens_per_image][hidden], then the digest
 *       as 32 hex digits on stdout
 * Exit 1 with the library's one-line error on stderr. */
#include "vision/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const spindle_error *err) {
    fprintf(stderr, "%s: %s\n", what, err->message);
    return 1;
}

static int write_floats(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof *x, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        if (f) fclose(f);
        return 1;
    }
    return fclose(f) ? 1 : 0;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long size = -1;
    if (f && !fseek(f, 0, SEEK_END) && (size = ftell(f)) >= 0 &&
        !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)size + 1)) &&
        fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    if (f) fclose(f);
    if (!buf) fprintf(stderr, "cannot read %s\n", path);
    *n = (size_t)size;
    return buf;
}

static int cmd_pixels(char **argv) {
    spindle_error err = {0};
    size_t n = 0;
    char *data = read_file(argv[0], &n);
    if (!data) return 1;
    sp_image img;
    spindle_status st = sp_image_decode(data, n, NULL, &img, &err);
    free(data);
    if (st) return fail(argv[0], &err);
    sp_image_prep p = {.width = atoi(argv[1]), .height = atoi(argv[2]),
                       .resample = atoi(argv[3]), .rescale = 1.0 / 255.0,
                       .mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}};
    float *px = malloc((size_t)3 * p.width * p.height * sizeof *px);
    if (!px) return 1;
    st = sp_image_preprocess(&img, &p, px, &err);
    sp_image_free(&img);
    int rc = st ? fail("preprocess", &err)
                : write_floats(argv[4], px, (size_t)3 * p.width * p.height);
    free(px);
    return rc;
}

static int cmd_encode(char **argv) {
    spindle_error err = {0};
    spindle_model *m = NULL;
    spindle_vision *v = NULL;
    size_t n = 0;
    char *data = read_file(argv[1], &n);
    if (!data) return 1;
    int rc = 1;
    float *rows = NULL;
    unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES];
    if (spindle_model_load(argv[0], NULL, &m, &err) ||
        spindle_vision_new(m, NULL, &v, &err) ||
        spindle_vision_encode(v, data, n, &rows, digest, &err)) {
        fail(argv[1], &err);
    } else {
        spindle_vision_info info;
        spindle_vision_describe(v, &info);
        rc = write_floats(argv[2], rows,
                          (size_t)info.tokens_per_image * info.hidden_size);
        for (int i = 0; i < SPINDLE_SPAN_DIGEST_BYTES; i++) printf("%02x", digest[i]);
        printf("\n");
    }
    spindle_free(rows);
    spindle_vision_free(v);
    spindle_model_free(m);
    free(data);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "pixels")) return cmd_pixels(argv + 2);
    if (argc == 5 && !strcmp(argv[1], "encode")) return cmd_encode(argv + 2);
    fprintf(stderr, "usage: vision_harness pixels IMAGE W H RESAMPLE OUT\n"
                    "       vision_harness encode MODEL_DIR IMAGE OUT\n");
    return 2;
}
