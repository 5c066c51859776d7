/* The encoded-image cache (image_cache.c): an image's embeddings rows kept
 * under its span digest, so that an image sent again (the next turn of a
 * chat re-sends every earlier image) is not encoded again. A least
 * recently used list under a byte budget; thread-safe (one mutex). */
#ifndef SP_VISION_IMAGE_CACHE_H
#define SP_VISION_IMAGE_CACHE_H

#include "spindle.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sp_image_cache sp_image_cache;

/* A cache of at most max_bytes of rows (0: it keeps nothing); NULL when
 * out of memory. */
sp_image_cache *sp_image_cache_new(size_t max_bytes);
void sp_image_cache_free(sp_image_cache *c);

/* A copy (malloc'd, n_floats) of the rows kept under `digest` into *rows,
 * which become the most recently used: true. False, *rows NULL, when none
 * are kept (or they are of another length, or the copy finds no memory). */
bool sp_image_cache_get(sp_image_cache *c, const unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES],
                        size_t n_floats, float **rows);

/* A copy of `rows` kept under `digest` (replacing what was), the least
 * recently used dropped until the budget holds it; rows over the whole
 * budget, or a copy without memory, are not kept. */
void sp_image_cache_put(sp_image_cache *c, const unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES],
                        const float *rows, size_t n_floats);

typedef struct sp_image_cache_stats {
    uint64_t hits;       /* gets that found rows */
    uint64_t misses;     /* gets that did not */
    uint64_t evictions;  /* entries dropped for the budget */
    size_t bytes;        /* rows kept now */
    int entries;
} sp_image_cache_stats;

void sp_image_cache_stats_get(sp_image_cache *c, sp_image_cache_stats *out);

#endif
