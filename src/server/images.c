/* Images in a chat request (images.h): the image_url parts' files, which
 * the request parser decoded from their data URLs or which are fetched
 * here from their http(s) URLs (remote_media.h), through the model's
 * vision encoder into embeddings spans, the chat template's markers
 * expanded as spindle run --image expands them (spindle_vision_*). */
#include "server/images.h"
#include "base/log.h"
#include "server/remote_media.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sp_images_load(sp_server *s) {
    spindle_error err = {0};
    spindle_status st = spindle_vision_new(s->model, NULL, &s->vision, &err);
    if (st == SPINDLE_ERR_UNSUPPORTED) {
        s->vision = NULL;
        return true;
    }
    if (st) {
        sp_log(SPINDLE_LOG_ERROR, "vision encoder: %s", err.message);
        return false;
    }
    spindle_vision_info info;
    spindle_vision_describe(s->vision, &info);
    s->limits.image_marker = spindle_tokenizer_id_to_token(s->tok, info.begin_token);
    if (s->opts.remote_media_hosts && !sp_remote_media_init()) {
        sp_log(SPINDLE_LOG_ERROR, "--allow-remote-media: libcurl did not start");
        return false;
    }
    return true;
}

void sp_images_unload(sp_server *s) {
    if (!s->vision) return;
    if (s->opts.remote_media_hosts) sp_remote_media_cleanup();
    spindle_vision_free(s->vision);
    s->vision = NULL;
}

/* Image i's file: the request's, or fetched from its URL into *fetched
 * (free it). False with the reason in err. */
static bool image_file(const sp_server *s, const sp_api_request *r, int i,
                       unsigned char **fetched, const unsigned char **bytes, size_t *n,
                       spindle_error *err) {
    *fetched = NULL;
    *bytes = r->images[i];
    *n = r->image_bytes[i];
    if (!r->image_urls[i]) return true;
    const sp_remote_media_policy policy = {
        .hosts = s->opts.remote_media_hosts,
        .max_bytes = s->limits.max_image_bytes ? s->limits.max_image_bytes
                                                : SP_API_IMAGE_BYTES_DEFAULT,
        .timeout_s = s->opts.remote_media_timeout_s};
    if (!sp_remote_media_fetch(r->image_urls[i], &policy, fetched, n, err->message,
                               sizeof err->message))
        return false;
    *bytes = *fetched;
    return true;
}

static bool encode_images(sp_server *s, const sp_api_request *r,
                          unsigned char (*digests)[SPINDLE_SPAN_DIGEST_BYTES],
                          sp_image_prompt *out, sp_api_error *e) {
    spindle_error err = {0};
    spindle_status st = SPINDLE_OK;
    /* The encoder runs one encode at a time itself; an image in its cache
     * (sent earlier) comes back without waiting for it. */
    for (int i = 0; i < r->n_images && !st; i++) {
        unsigned char *fetched = NULL;
        const unsigned char *bytes = NULL;
        size_t n = 0;
        if (!image_file(s, r, i, &fetched, &bytes, &n, &err)) st = SPINDLE_ERR_ARGUMENT;
        else st = spindle_vision_encode(s->vision, bytes, n, &out->rows[i], digests[i], &err);
        free(fetched);
        if (!st) out->n_images = i + 1;
        else {
            char msg[sizeof err.message];
            snprintf(msg, sizeof msg, "image %d: %.400s", i + 1, err.message);
            memcpy(err.message, msg, sizeof msg);
        }
    }
    if (st) sp_api_error_from_status(e, st, "messages", err.message);
    return !st;
}

bool sp_images_tokens(const sp_server *s, const sp_api_request *r, const char *rendered,
                      int32_t **ids, size_t *n, sp_api_error *e) {
    *ids = NULL;
    *n = 0;
    spindle_error err = {0};
    char *expanded = NULL;
    int found = 0;
    spindle_status st = spindle_vision_expand_text(s->vision, s->tok, rendered, &expanded,
                                                   &found, &err);
    if (!st && found != r->n_images) {
        spindle_free(expanded);
        /* A marker typed in a text part is one the model cannot tell apart. */
        return sp_api_bad(e, "messages", "the messages have %d image markers for %d images "
                          "(image_url parts)", found, r->n_images);
    }
    /* The template wrote the special tokens itself. */
    if (!st) st = spindle_tokenizer_encode(s->tok, expanded, strlen(expanded), false, ids, n,
                                           &err);
    spindle_free(expanded);
    if (st) sp_api_error_from_status(e, st, "messages", err.message);
    return !st;
}

bool sp_images_prompt(sp_server *s, const sp_api_request *r, const char *rendered,
                      int32_t **ids, int *n, sp_image_prompt *out, sp_api_error *e) {
    memset(out, 0, sizeof *out);
    *n = 0;
    size_t count = 0;
    if (!sp_images_tokens(s, r, rendered, ids, &count, e)) return false;
    *n = (int)count;
    spindle_error err = {0};
    spindle_status st;
    unsigned char digests[SP_API_MAX_IMAGES][SPINDLE_SPAN_DIGEST_BYTES];
    if (!encode_images(s, r, digests, out, e)) return false;
    st = spindle_vision_prompt_spans(s->vision, *ids, *n, out->rows,
                                     (const unsigned char(*)[SPINDLE_SPAN_DIGEST_BYTES])digests,
                                     out->n_images, &out->spans, &out->n_spans, &err);
    if (st) sp_api_error_from_status(e, st, "messages", err.message);
    return !st;
}

void sp_image_prompt_free(sp_image_prompt *p) {
    for (int i = 0; i < p->n_images; i++) spindle_free(p->rows[i]);
    spindle_free(p->spans);
    memset(p, 0, sizeof *p);
}
