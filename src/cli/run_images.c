/* --image FILE: the prompt text with the model's image markers, expanded as
 * its processor expands them, encoded, and split into token and image
 * spans (run_images.h). */
#include "cli/run_images.h"
#include "cli/chat_template_args.h"
#include "cli/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sp_image_arg(sp_run_images *im, const char *value) {
    if (im->n == SP_MAX_CLI_IMAGES) {
        fprintf(stderr, "spindle: at most %d --image options\n",
                SP_MAX_CLI_IMAGES);
        return false;
    }
    im->paths[im->n++] = value;
    return true;
}

static spindle_status read_file(const char *path, char **out, size_t *n,
                                spindle_error *err) {
    FILE *f = fopen(path, "rb");
    long size = -1;
    *out = NULL;
    if (f && !fseek(f, 0, SEEK_END) && (size = ftell(f)) >= 0 &&
        !fseek(f, 0, SEEK_SET) && (*out = malloc((size_t)size + 1)) &&
        fread(*out, 1, (size_t)size, f) != (size_t)size) {
        free(*out);
        *out = NULL;
    }
    if (f) fclose(f);
    if (!*out) {
        snprintf(err->message, sizeof err->message, "%s: cannot read the image",
                 path);
        return SPINDLE_ERR_IO;
    }
    *n = (size_t)size;
    return SPINDLE_OK;
}

/* -p with one image marker per image after the text when it has none
 * (where mlx-vlm's Gemma 3 formatting puts them), or as it is. */
static char *marked_text(const sp_run_images *im, const spindle_tokenizer *tok,
                         const char *text) {
    spindle_vision_info info;
    spindle_vision_describe(im->vision, &info);
    const char *marker = spindle_tokenizer_id_to_token(tok, info.begin_token);
    const size_t mlen = marker ? strlen(marker) : 0;
    const bool has = mlen && strstr(text, marker);
    char *s = malloc(strlen(text) + (has ? 0 : mlen * (size_t)im->n) + 1);
    if (!s) return NULL;
    strcpy(s, text);
    for (int i = 0; !has && i < im->n; i++) strcat(s, marker);
    return s;
}

/* The prompt text before expansion: the marked text, through the chat
 * template as the user's turn when `chat`. */
static spindle_status prompt_text(const sp_run_images *im,
                                  const spindle_tokenizer *tok,
                                  const char *system, const char *text,
                                  bool chat, const char *kwargs, char **out,
                                  spindle_error *err) {
    char *marked = marked_text(im, tok, text);
    if (!marked) return SPINDLE_ERR_MEMORY;
    if (!chat) {
        *out = marked;
        return SPINDLE_OK;
    }
    spindle_status st = SPINDLE_OK;
    char *msgs = sp_single_turn_messages(system, marked);
    if (!spindle_tokenizer_has_chat_template(tok))
        st = sp_chat_template_missing(err);
    else if (!msgs)
        st = SPINDLE_ERR_MEMORY;
    else
        st = spindle_chat_render(tok, msgs, NULL, true, kwargs, NULL, out, err);
    free(msgs);
    free(marked);
    return st;
}

spindle_status sp_run_images_prompt(sp_run_images *im, spindle_model *model,
                                    const spindle_tokenizer *tok,
                                    const char *system, const char *text,
                                    bool chat, const char *kwargs,
                                    int32_t **ids, int *n_ids,
                                    spindle_error *err) {
    char *raw = NULL, *expanded = NULL;
    int found = 0;
    size_t count = 0;
    spindle_status st = spindle_vision_new(model, NULL, &im->vision, err);
    if (!st) st = prompt_text(im, tok, system, text, chat, kwargs, &raw, err);
    if (!st) st = spindle_vision_expand_text(im->vision, tok, raw, &expanded,
                                             &found, err);
    if (!st && found != im->n) {
        snprintf(err->message, sizeof err->message,
                 "the prompt has %d image markers for %d --image files", found,
                 im->n);
        st = SPINDLE_ERR_ARGUMENT;
    }
    if (!st)
        st = spindle_tokenizer_encode(tok, expanded, strlen(expanded), !chat,
                                      ids, &count, err);
    *n_ids = (int)count;
    for (int i = 0; i < im->n && !st; i++) {
        char *bytes = NULL;
        size_t n = 0;
        st = read_file(im->paths[i], &bytes, &n, err);
        if (!st) st = spindle_vision_encode(im->vision, bytes, n, &im->rows[i],
                                            im->digests[i], err);
        if (st && err->message[0] && !strstr(err->message, im->paths[i])) {
            char msg[sizeof err->message];
            snprintf(msg, sizeof msg, "%.200s: %.300s", im->paths[i],
                     err->message);
            memcpy(err->message, msg, sizeof msg);
        }
        free(bytes);
    }
    if (!st)
        st = spindle_vision_prompt_spans(
            im->vision, *ids, *n_ids, im->rows,
            (const unsigned char(*)[SPINDLE_SPAN_DIGEST_BYTES])im->digests,
            im->n, &im->spans, &im->n_spans, err);
    spindle_free(raw);
    spindle_free(expanded);
    return st;
}

void sp_run_images_free(sp_run_images *im) {
    for (int i = 0; i < im->n; i++) spindle_free(im->rows[i]);
    spindle_free(im->spans);
    spindle_vision_free(im->vision);
    memset(im, 0, sizeof *im);
}
