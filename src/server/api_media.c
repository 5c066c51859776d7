/* Images in the Anthropic and Responses bodies -> the chat body's
 * image_url parts (api_json.h).
 *
 * The translators keep a message's text and images in order as chat
 * content parts, so that the chat parser decodes every image once, in one
 * place, whichever API it came through. Its errors name the chat body's
 * part ("messages[2].content[1]"); sp_api_name_image_error gives them the
 * name of the field the client sent instead.
 * Pure functions, fuzzed by tests/fuzz/fuzz_server_request.c. */
#include "server/api_json.h"

#include <stdio.h>
#include <string.h>

void sp_api_content_text(sp_api_content *c, const char *text) {
    sp_strbuf_add(&c->text, text, strlen(text));
}

/* The text gathered since the last image as a text part of c->parts. */
static bool flush_text(sp_api_content *c) {
    if (!c->text.len) return true;
    cJSON *part = cJSON_CreateObject();
    if (!part || !cJSON_AddStringToObject(part, "type", "text") ||
        !cJSON_AddStringToObject(part, "text", c->text.p) || !cJSON_AddItemToArray(c->parts, part)) {
        cJSON_Delete(part);
        return false;
    }
    sp_strbuf_free(&c->text);
    return true;
}

static bool out_of_memory(sp_api_error *err) {
    return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
}

bool sp_api_content_image(sp_api_content *c, const char *url, const char *source,
                          sp_api_error *err) {
    if (!c->parts && !(c->parts = cJSON_CreateArray())) return out_of_memory(err);
    if (c->text.oom || !flush_text(c)) return out_of_memory(err);
    cJSON *part = cJSON_CreateObject();
    cJSON *image = part && cJSON_AddStringToObject(part, "type", "image_url")
                       ? cJSON_AddObjectToObject(part, "image_url") : NULL;
    if (!image || !cJSON_AddStringToObject(image, "url", url) ||
        !cJSON_AddItemToArray(c->parts, part)) {
        cJSON_Delete(part);
        return out_of_memory(err);
    }
    sp_api_image_name(c->names, source);
    return true;
}

cJSON *sp_api_content_take(sp_api_content *c) {
    cJSON *out = NULL;
    if (c->text.oom) return NULL;
    if (!c->parts) {
        out = cJSON_CreateString(c->text.p ? c->text.p : "");
    } else if (flush_text(c)) {
        out = c->parts;
        c->parts = NULL;
    }
    return out;
}

cJSON *sp_api_content_message(cJSON *msgs, const char *role, sp_api_content *c) {
    cJSON *m = cJSON_CreateObject(), *content = sp_api_content_take(c);
    if (!m || !content || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddItemToObject(m, "content", content)) {
        cJSON_Delete(m);
        cJSON_Delete(content);
        return NULL;
    }
    cJSON_AddItemToArray(msgs, m);
    return m;
}

bool sp_api_content_empty(const sp_api_content *c) {
    return !c->text.len && !c->parts;
}

void sp_api_content_free(sp_api_content *c) {
    sp_strbuf_free(&c->text);
    cJSON_Delete(c->parts);
    c->parts = NULL;
}

void sp_api_image_name(sp_api_image_names *names, const char *source) {
    if (!names || names->n >= SP_API_MAX_IMAGES + 1) return;
    snprintf(names->name[names->n++], sizeof names->name[0], "%s", source);
}

/* The first `from` in err->message replaced by `to`; false: none. */
static bool replace_in_message(sp_api_error *err, const char *from, const char *to) {
    const char *at = strstr(err->message, from);
    if (!at) return false;
    char msg[sizeof err->message];
    snprintf(msg, sizeof msg, "%.*s%s%s", (int)(at - err->message), err->message, to,
             at + strlen(from));
    memcpy(err->message, msg, sizeof msg);
    return true;
}

void sp_api_rename_param(sp_api_error *err, const char *chat_name, const char *name) {
    if (strcmp(err->param, chat_name)) return;
    snprintf(err->param, sizeof err->param, "%s", name);
    replace_in_message(err, chat_name, name);
}

static bool is_image_part(const cJSON *part) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    return cJSON_IsString(type) && !strcmp(type->valuestring, "image_url");
}

void sp_api_name_image_error(sp_api_error *err, const cJSON *messages,
                             const sp_api_image_names *names) {
    int at_message = -1, at_part = -1;
    if (sscanf(err->param, "messages[%d].content[%d]", &at_message, &at_part) != 2) return;
    /* The failing part is the k-th image part of the chat body, and the
     * translators named the images in that order. */
    int k = 0, i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *parts = cJSON_IsArray(content) ? content : NULL;
        int j = 0;
        const cJSON *part;
        cJSON_ArrayForEach(part, parts) {
            if (i == at_message && j == at_part) {
                if (!is_image_part(part) || k >= names->n) return;
                char chat_name[64], url_name[80];
                snprintf(chat_name, sizeof chat_name, "messages[%d].content[%d]", i, j);
                snprintf(url_name, sizeof url_name, "%s.image_url.url", chat_name);
                snprintf(err->param, sizeof err->param, "%s", names->name[k]);
                if (!replace_in_message(err, url_name, names->name[k]))
                    replace_in_message(err, chat_name, names->name[k]);
                return;
            }
            k += is_image_part(part);
            j++;
        }
        i++;
    }
}

int sp_api_count_image_parts(const cJSON *message) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(message, "content");
    const cJSON *parts = cJSON_IsArray(content) ? content : NULL, *part;
    int n = 0;
    cJSON_ArrayForEach(part, parts) n += is_image_part(part);
    return n;
}
