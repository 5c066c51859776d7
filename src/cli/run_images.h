/* --image FILE (run): images in the prompt through spindle_vision. */
#ifndef SP_CLI_RUN_IMAGES_H
#define SP_CLI_RUN_IMAGES_H

#include <stdbool.h>

#include "spindle.h"

#define SP_ARG_IMAGE_HELP \
    "  --image FILE            an image in the prompt (JPEG, PNG, WebP, GIF;\n" \
    "                          repeatable): where -p has the model's image marker\n" \
    "                          (Gemma 3: <start_of_image>), else after the text\n"
#define SP_MAX_CLI_IMAGES 16

typedef struct sp_run_images {
    const char *paths[SP_MAX_CLI_IMAGES];
    int n;
    spindle_vision *vision;
    float *rows[SP_MAX_CLI_IMAGES];
    unsigned char digests[SP_MAX_CLI_IMAGES][SPINDLE_SPAN_DIGEST_BYTES];
    spindle_span *spans;   /* over the caller's prompt ids */
    int n_spans;
} sp_run_images;

/* Add one --image value; false after a one-line message. */
bool sp_image_arg(sp_run_images *im, const char *value);

/* The prompt for -p `text` (with the chat template when `chat`, the
 * template's extra variables `kwargs`), its image markers expanded, into
 * *ids (malloc'd), and every image encoded into im->spans over them. */
spindle_status sp_run_images_prompt(sp_run_images *im, spindle_model *model,
                                    const spindle_tokenizer *tok,
                                    const char *system, const char *text,
                                    bool chat, const char *kwargs,
                                    int32_t **ids, int *n_ids,
                                    spindle_error *err);
void sp_run_images_free(sp_run_images *im);

#endif
