/* Text and chat prompts to token ids, and generated ids to streamed text, for
 * run and chat (prompt.h). */
#include "cli/prompt.h"
#include "cli/chat_template_args.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

spindle_status sp_chat_prompt_ids(const spindle_tokenizer *tok,
                                  const char *messages_json,
                                  const char *extra_vars_json, int32_t **ids,
                                  int *n, spindle_error *err) {
    if (!spindle_tokenizer_has_chat_template(tok)) return sp_chat_template_missing(err);
    char *text = NULL;
    spindle_status st = spindle_chat_render(tok, messages_json, NULL, true,
                                            extra_vars_json, NULL, &text, err);
    if (st) return st;
    size_t count = 0;
    st = spindle_tokenizer_encode(tok, text, strlen(text), false, ids, &count, err);
    spindle_free(text);
    *n = (int)count;
    return st;
}

char *sp_single_turn_messages(const char *system, const char *user) {
    cJSON *msgs = cJSON_CreateArray();
    if (!msgs) return NULL;
    if (system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", system);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", user);
    cJSON_AddItemToArray(msgs, m);
    char *out = cJSON_PrintUnformatted(msgs);
    cJSON_Delete(msgs);
    return out;
}

spindle_status sp_text_stream_init(sp_text_stream *s,
                                   const spindle_tokenizer *tok, FILE *out,
                                   spindle_error *err) {
    memset(s, 0, sizeof *s);
    s->out = out;
    return spindle_detokenizer_new(tok, true, &s->detok, err);
}

static void emit(sp_text_stream *s, const char *piece, size_t n) {
    if (!n) return;
    if (s->out) {
        fwrite(piece, 1, n, s->out);
        fflush(s->out);
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->len + n + 1) * 2;
        char *t = realloc(s->text, cap);
        if (!t) { s->failed = true; return; }
        s->text = t;
        s->cap = cap;
    }
    memcpy(s->text + s->len, piece, n);
    s->len += n;
    s->text[s->len] = '\0';
}

bool sp_text_stream_token(int32_t token, void *user) {
    sp_text_stream *s = user;
    const char *piece = NULL;
    if (spindle_detokenizer_push(s->detok, token, &piece, &s->err)) {
        s->failed = true;
        return false;
    }
    emit(s, piece, spindle_detokenizer_piece_len(s->detok));
    return true;
}

void sp_text_stream_finish(sp_text_stream *s) {
    const char *piece = NULL;
    if (!spindle_detokenizer_flush(s->detok, &piece, &s->err))
        emit(s, piece, spindle_detokenizer_piece_len(s->detok));
}

void sp_text_stream_free(sp_text_stream *s) {
    spindle_detokenizer_free(s->detok);
    free(s->text);
    memset(s, 0, sizeof *s);
}

int sp_tokenizer_stop_ids(const spindle_tokenizer *tok, int32_t *ids, int cap) {
    int n = 0;
    int32_t eos = spindle_tokenizer_eos_id(tok);
    if (eos >= 0 && n < cap) ids[n++] = eos;
    return n;
}
