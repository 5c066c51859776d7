/* A generation request's prompt as token ids: a chat's messages through
 * the chat template, a completion's text or ids; checked against the
 * context (job.c and count_tokens use it). */
#include "server/images.h"
#include "server/reply.h"
#include "server/state.h"

#include <limits.h>
#include <string.h>

/* Room for the prompt and at least one generated token, and for all of
 * max_tokens when the request gave it (vLLM's 400: a request is never cut
 * short silently; the server's default is clamped to the room left). */
static bool prompt_fits(sp_server *s, const sp_api_request *r, int n, sp_api_error *e) {
    const char *param = r->kind == SP_API_CHAT ? "messages" : "prompt";
    if (n == 0) return sp_api_bad(e, param, "the prompt has no tokens");
    if (n >= s->context_length)
        return sp_api_fail(e, 400, "invalid_request_error", param, "context_length_exceeded",
                           "This model's maximum context length is %d tokens, but the "
                           "prompt has %d tokens", s->context_length, n);
    if (r->max_tokens_given && (long)n + r->max_tokens > s->context_length)
        return sp_api_fail(e, 400, "invalid_request_error", "max_tokens",
                           "context_length_exceeded",
                           "This model's maximum context length is %d tokens. However, you "
                           "requested %ld tokens (%d in the %s, %d in the completion). "
                           "Please reduce the length of the %s or completion.",
                           s->context_length, (long)n + r->max_tokens, n,
                           r->kind == SP_API_CHAT ? "messages" : "prompt", r->max_tokens,
                           r->kind == SP_API_CHAT ? "messages" : "prompt");
    return true;
}

bool sp_server_chat_prompt_ids(const sp_server *s, const sp_api_request *r, int32_t **ids,
                               size_t *n, char **rendered, sp_api_error *e) {
    char *text = NULL;
    if (!sp_reply_render_chat(s, r, &text, e)) return false;
    *rendered = text;
    if (r->n_images) return sp_images_tokens(s, r, text, ids, n, e);
    spindle_error err = {0};
    /* The template wrote the special tokens itself (as mlx-lm and
     * transformers' apply_chat_template(tokenize=True) do). */
    spindle_status st = spindle_tokenizer_encode(s->tok, text, strlen(text), false, ids, n, &err);
    if (st) sp_api_error_from_status(e, st, "messages", err.message);
    return !st;
}

/* A chat with images: its slot's and its checkpoint's state are token ids
 * only, and would lose the images. */
static bool image_prompt(sp_server *s, const sp_api_request *r, int32_t **ids, int *n,
                         char **rendered, sp_image_prompt *images, sp_api_error *e) {
    if (r->id_slot >= 0)
        return sp_api_bad(e, "id_slot", "'id_slot' cannot be given with images");
    if (r->resume_id)
        return sp_api_bad(e, "resume_id", "'resume_id' cannot be given with images");
    if (!sp_reply_render_chat(s, r, rendered, e)) return false;
    if (images)
        return sp_images_prompt(s, r, *rendered, ids, n, images, e) && prompt_fits(s, r, *n, e);
    size_t count = 0;   /* the render routes: the ids only, no image encoded */
    if (!sp_images_tokens(s, r, *rendered, ids, &count, e)) return false;
    *n = count > INT_MAX ? INT_MAX : (int)count;
    return prompt_fits(s, r, *n, e);
}

bool sp_server_prompt_ids(sp_server *s, sp_api_request *r, int32_t **ids, int *n,
                          char **rendered, sp_image_prompt *images, sp_api_error *e) {
    spindle_error err = {0};
    spindle_status st = SPINDLE_OK;
    size_t count = 0;
    if (r->n_images) return image_prompt(s, r, ids, n, rendered, images, e);
    if (r->kind == SP_API_CHAT) {
        if (!sp_server_chat_prompt_ids(s, r, ids, &count, rendered, e)) return false;
    } else if (r->prompt_ids) {
        *ids = r->prompt_ids;
        *n = r->n_prompt_ids;
        r->prompt_ids = NULL;
        r->n_prompt_ids = 0;
        return prompt_fits(s, r, *n, e);
    } else {
        st = spindle_tokenizer_encode(s->tok, r->prompt_text, strlen(r->prompt_text), true,
                                      ids, &count, &err);
    }
    if (st) {
        sp_api_error_from_status(e, st, "prompt", err.message);
        return false;
    }
    *n = (int)count;
    return prompt_fits(s, r, *n, e);
}

