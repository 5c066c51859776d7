/* spindle/vision.h: images in the prompt. Part of the public API: include
 * "spindle.h", whose opening comment states the conventions every call
 * here follows. */
#ifndef SPINDLE_VISION_H
#define SPINDLE_VISION_H

#include "spindle/model.h"
#include "spindle/sequence.h"
#include "spindle/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ vision
 * A vision-language model's image encoder: decoding (JPEG, PNG, WebP, the
 * first frame of a GIF), the image processor's pre-processing, the vision
 * tower and the projector, read from the model's own checkpoint. Gemma 3
 * (model_type "gemma3": SigLIP, 4 x 4 average pool, soft-embedding norm,
 * projection) for now. An encoded image is an embeddings span
 * (spindle/sequence.h) of the model's hidden width. */
typedef struct spindle_vision spindle_vision;

typedef struct spindle_vision_options {
    int n_threads;            /* the encoder's own threads; <= 0: every core */
    size_t max_image_bytes;   /* 0: 20 MiB */
    int64_t max_image_pixels; /* 0: 40 megapixels (as the header declares
                                 them: bombs are refused before decoding) */
    int64_t cache_bytes;      /* the encoded-image cache (an image sent
                                 again is not encoded again): 0: 256 MiB;
                                 < 0: none */
} spindle_vision_options;

#define SPINDLE_VISION_CACHE_BYTES_DEFAULT ((size_t)256 << 20)

/* Binds the encoder of `model` (borrowed: free the encoder first);
 * SPINDLE_ERR_UNSUPPORTED, one line, for a model without one. options may
 * be NULL. Safe concurrently with any model call. */
spindle_status spindle_vision_new(spindle_model *model,
                                  const spindle_vision_options *options,
                                  spindle_vision **out, spindle_error *err);
void spindle_vision_free(spindle_vision *v);

typedef struct spindle_vision_info {
    int tokens_per_image;   /* positions an image takes in the prompt */
    int hidden_size;        /* floats per row (the language model's width) */
    int32_t image_token;    /* the placeholder id at those positions */
    int32_t begin_token;    /* the chat template's image marker
                               (Gemma 3: <start_of_image>) */
    int32_t end_token;      /* (Gemma 3: <end_of_image>) */
} spindle_vision_info;

void spindle_vision_describe(const spindle_vision *v, spindle_vision_info *out);

/* One image file's bytes -> tokens_per_image rows of hidden_size floats
 * (*rows: spindle_free) and the span digest of the bytes and this encoder
 * (spindle_span_digest). A file that is no image of the four kinds, a
 * damaged one, or one over a limit fails with one line naming the problem
 * (SPINDLE_ERR_FORMAT / SPINDLE_ERR_ARGUMENT). An image whose digest the
 * encoded-image cache holds is a copy of its rows, not encoded again.
 * Thread-safe: encodes run one at a time (the encoder's pool and scratch),
 * a cache hit does not wait for them; safe beside other calls on the
 * model. */
spindle_status spindle_vision_encode(spindle_vision *v, const void *image,
                                     size_t n_bytes, float **rows,
                                     unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES],
                                     spindle_error *err);

typedef struct spindle_vision_stats {
    uint64_t encodes;          /* images run through the encoder */
    uint64_t cache_hits;       /* images answered from the cache */
    uint64_t cache_evictions;  /* images dropped for the cache's budget */
    size_t cache_bytes;        /* rows the cache holds now */
    int cache_entries;
} spindle_vision_stats;

/* The encoder's counters since spindle_vision_new. Thread-safe. */
void spindle_vision_get_stats(spindle_vision *v, spindle_vision_stats *out);

/* The prompt text with every image marker (the begin token's text, as the
 * chat template writes it) replaced by the image's whole sequence, as the
 * model's processor expands it (Gemma 3: "\n\n<start_of_image>" + one
 * image token per position + "<end_of_image>\n\n"); *n_images: how many.
 * *out: spindle_free. Thread-safe. */
spindle_status spindle_vision_expand_text(const spindle_vision *v,
                                          const spindle_tokenizer *tok,
                                          const char *text, char **out,
                                          int *n_images, spindle_error *err);

/* Prompt ids (the expanded text encoded) split into spans: the i-th run of
 * tokens_per_image image tokens becomes image i's embeddings span (rows[i],
 * digests[i], SPINDLE_SPAN_BIDIRECTIONAL: image positions see each other,
 * as the model was trained), the ids around them token spans. The spans
 * borrow ids and rows; *spans: spindle_free. SPINDLE_ERR_ARGUMENT, one
 * line, when the runs do not match n_images. Thread-safe. */
spindle_status spindle_vision_prompt_spans(
    const spindle_vision *v, const int32_t *ids, int n_ids,
    float *const *rows, const unsigned char (*digests)[SPINDLE_SPAN_DIGEST_BYTES],
    int n_images, spindle_span **spans, int *n_spans, spindle_error *err);

#ifdef __cplusplus
}
#endif

#endif
