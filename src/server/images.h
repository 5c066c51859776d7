/* Images in a chat request (images.c): the server's one vision encoder and
 * a request's prompt as token and image spans. */
#ifndef SP_SERVER_IMAGES_H
#define SP_SERVER_IMAGES_H

#include "server/state.h"

/* A request's prompt with its images: the spans (borrowing ids and rows)
 * that the engine takes instead of plain ids. */
typedef struct sp_image_prompt {
    float *rows[SP_API_MAX_IMAGES];   /* each image's embeddings */
    int n_images;
    spindle_span *spans;
    int n_spans;
} sp_image_prompt;

/* At load: s->vision when the model has a vision tower (limits.image_marker
 * then names its image marker), else none. False, logged, when the tower
 * is there but cannot be read. */
bool sp_images_load(sp_server *s);
void sp_images_unload(sp_server *s);

/* The rendered chat text of r (which has images) with its markers
 * expanded as the model's processor does, tokenized into *ids
 * (spindle_free): what the prompt's length is, without encoding. False
 * with a 400 in *e when the marker and image counts differ. Thread-safe. */
bool sp_images_tokens(const sp_server *s, const sp_api_request *r, const char *rendered,
                      int32_t **ids, size_t *n, sp_api_error *e);

/* The rendered chat text of r (which has images) with its markers expanded
 * as the model's processor does, tokenized into *ids, each image encoded
 * (the shared encoder is thread-safe, and a cached image is not encoded
 * again) and split into spans (*out, sp_image_prompt_free). False with a 4xx in *e: marker
 * and image counts that differ, an image that does not decode. */
bool sp_images_prompt(sp_server *s, const sp_api_request *r, const char *rendered,
                      int32_t **ids, int *n, sp_image_prompt *out, sp_api_error *e);
void sp_image_prompt_free(sp_image_prompt *p);

#endif
