/* Chat messages of a request -> the JSON text the chat template renders
 * (api_json.h).
 * Pure functions, fuzzed by tests/fuzz/fuzz_server_request.c. */
#include "server/api_json.h"
#include "server/data_url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_MESSAGES 65536

static bool out_of_memory(sp_api_error *err) {
    return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
}

/* An image_url part's URL into r->images (a data URL, decoded) or
 * r->image_urls (an http(s) URL, fetched later); the text it leaves is the
 * model's image marker (*text). Remote URLs make the server fetch what a
 * client names (a request forgery risk): refused unless the server allows
 * them. */
static bool take_image(const cJSON *part, const char *param, const sp_api_limits *limits,
                       sp_api_request *r, const char **text, sp_api_error *err) {
    const cJSON *image = cJSON_GetObjectItemCaseSensitive(part, "image_url");
    const cJSON *url = cJSON_IsObject(image) ? cJSON_GetObjectItemCaseSensitive(image, "url")
                                             : image;   /* a bare string, as some clients send */
    if (!cJSON_IsString(url))
        return sp_api_bad(err, param, "'%s.image_url.url' must be a string", param);
    if (!limits)   /* a route that renders without a model's encoder */
        return sp_api_bad(err, param, "'%s': image parts are not taken by this route", param);
    if (!limits->image_marker)
        return sp_api_bad(err, param, "this model takes no images ('%s')", param);
    const char *u = url->valuestring;
    const bool remote = !strncasecmp(u, "http://", 7) || !strncasecmp(u, "https://", 8);
    if (remote && !limits->allow_remote_media)
        return sp_api_bad(err, param, "'%s': http(s) image URLs are fetched only when the "
                          "server runs with --allow-remote-media; send a base64 data URL",
                          param);
    if (r->n_images == SP_API_MAX_IMAGES)
        return sp_api_bad(err, param, "'%s': a request takes at most %d images", param,
                          SP_API_MAX_IMAGES);
    if (remote) {
        if (!(r->image_urls[r->n_images++] = strdup(u))) return out_of_memory(err);
        *text = limits->image_marker;
        return true;
    }
    const size_t max = limits->max_image_bytes ? limits->max_image_bytes
                                                : SP_API_IMAGE_BYTES_DEFAULT;
    char why[200];
    if (!sp_data_url_image(u, strlen(u), max, &r->images[r->n_images],
                           &r->image_bytes[r->n_images], why, sizeof why))
        return sp_api_bad(err, param, "'%s.image_url.url': %s", param, why);
    r->n_images++;
    *text = limits->image_marker;
    return true;
}

/* The text one content part contributes (borrowed), or false with a 400. */
static bool part_text(const cJSON *part, const char *param, const sp_api_limits *limits,
                      sp_api_request *r, const char **text, sp_api_error *err) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    if (!cJSON_IsObject(part) || !cJSON_IsString(type))
        return sp_api_bad(err, param, "'%s' must be an object with a string 'type'", param);
    if (!strcmp(type->valuestring, "image_url"))
        return take_image(part, param, limits, r, text, err);
    if (strcmp(type->valuestring, "text"))
        return sp_api_bad(err, param, "content parts of type '%.40s' are not supported "
                                      "(only 'text' and 'image_url')", type->valuestring);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsString(t)) return sp_api_bad(err, param, "'%s.text' must be a string", param);
    *text = t->valuestring;
    return true;
}

/* Replace an array of content parts by the concatenation of its texts,
 * an image part's text being the image marker. */
static bool join_parts(cJSON *msg, cJSON *content, int index, const sp_api_limits *limits,
                       sp_api_request *r, sp_api_error *err) {
    char param[64];
    const int n = cJSON_GetArraySize(content);
    const char **texts = calloc((size_t)n + 1, sizeof *texts);
    size_t total = 1;
    int j = 0;
    const cJSON *part;
    if (!texts) return out_of_memory(err);
    cJSON_ArrayForEach(part, content) {
        snprintf(param, sizeof param, "messages[%d].content[%d]", index, j);
        if (!part_text(part, param, limits, r, &texts[j], err)) {
            free(texts);
            return false;
        }
        total += strlen(texts[j++]);
    }
    char *joined = malloc(total), *at = joined;
    for (int i = 0; joined && i < j; i++) {
        size_t len = strlen(texts[i]);
        memcpy(at, texts[i], len);
        at += len;
    }
    free(texts);
    if (!joined) return out_of_memory(err);
    *at = '\0';
    cJSON *s = cJSON_CreateString(joined);
    free(joined);
    if (!s || !cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", s)) {
        cJSON_Delete(s);
        return out_of_memory(err);
    }
    return true;
}

/* Tool calls whose function.arguments is a JSON object in a string get the
 * object itself; arguments that do not parse stay strings. */
static void parse_tool_arguments(cJSON *msg) {
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    cJSON *call;
    if (!cJSON_IsArray(calls)) return;
    cJSON_ArrayForEach(call, calls) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsObject(fn) || !cJSON_IsString(args)) continue;
        cJSON *parsed = cJSON_Parse(args->valuestring);
        if (!cJSON_IsObject(parsed) ||
            !cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed))
            cJSON_Delete(parsed);
    }
}

/* The key of msg's that it reads or rewrites given twice, or NULL (cJSON
 * keeps both; the first would be checked and the second could surface
 * once the first is replaced). */
static const char *duplicate_key(const cJSON *msg) {
    static const char *const keys[] = {"role", "content", "tool_calls"};
    int seen[3] = {0};
    for (const cJSON *c = msg->child; c; c = c->next)
        for (int k = 0; k < 3; k++)
            if (c->string && !strcmp(c->string, keys[k]) && ++seen[k] > 1) return keys[k];
    return NULL;
}

static bool present(const cJSON *msg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);
    return v && !cJSON_IsNull(v);
}

/* OpenAI's roles; every message needs content except an assistant turn
 * that calls tools (tool_calls, or the older function_call). */
static bool check_role(const cJSON *msg, const char *role, const char *param,
                       sp_api_error *err) {
    static const char *const roles[] = {"system", "developer", "user", "assistant",
                                        "tool", "function"};
    bool known = false;
    for (size_t i = 0; i < sizeof roles / sizeof *roles && !known; i++)
        known = !strcmp(role, roles[i]);
    char where[80];
    if (!known) {
        snprintf(where, sizeof where, "%s.role", param);
        return sp_api_bad(err, where, "'%s' must be one of system, developer, user, "
                          "assistant, tool, function; got '%.40s'", where, role);
    }
    bool calls = !strcmp(role, "assistant") &&
                 (present(msg, "tool_calls") || present(msg, "function_call"));
    if (present(msg, "content") || calls) return true;
    snprintf(where, sizeof where, "%s.content", param);
    return sp_api_bad(err, where, "'%s' is required (a%s %s message%s)", where,
                      strchr("aeiou", role[0]) ? "n" : "", role,
                      strcmp(role, "assistant") ? "" : " without tool_calls");
}

static bool normalize_message(cJSON *msg, int index, const sp_api_limits *limits,
                              sp_api_request *r, sp_api_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", index);
    if (!cJSON_IsObject(msg)) return sp_api_bad(err, param, "'%s' must be an object", param);
    const char *twice = duplicate_key(msg);
    if (twice) return sp_api_bad(err, param, "'%s' has the key '%s' twice", param, twice);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    if (!cJSON_IsString(role))
        return sp_api_bad(err, param, "'%s.role' must be a string", param);
    if (!check_role(msg, role->valuestring, param, err)) return false;
    cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (cJSON_IsArray(content)) {
        if (!join_parts(msg, content, index, limits, r, err)) return false;
    } else if (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) {
        return sp_api_bad(err, param, "'%s.content' must be a string, an array of content "
                                      "parts or null", param);
    }
    parse_tool_arguments(msg);
    /* OpenAI clients send a tool-calling turn's content as null; templates
     * concatenate it as a string (llama-server passes "" too). */
    if (!strcmp(role->valuestring, "assistant") && (!content || cJSON_IsNull(content)) &&
        cJSON_GetObjectItemCaseSensitive(msg, "tool_calls")) {
        cJSON *empty = cJSON_CreateString("");
        if (!empty) return out_of_memory(err);
        cJSON_DeleteItemFromObjectCaseSensitive(msg, "content");
        cJSON_AddItemToObject(msg, "content", empty);
    }
    return true;
}

bool sp_api_messages_json(const cJSON *messages, const sp_api_limits *limits,
                          sp_api_request *r, sp_api_error *err) {
    char **out = &r->messages_json;
    *out = NULL;
    if (!messages) return sp_api_bad(err, "messages", "'messages' is required");
    if (!cJSON_IsArray(messages))
        return sp_api_bad(err, "messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(messages);
    if (n == 0) return sp_api_bad(err, "messages", "'messages' is empty");
    if (n > MAX_MESSAGES)
        return sp_api_bad(err, "messages", "'messages' has more than %d entries", MAX_MESSAGES);
    cJSON *copy = cJSON_Duplicate(messages, true);
    if (!copy) return out_of_memory(err);
    bool ok = true;
    int i = 0;
    cJSON *msg;
    cJSON_ArrayForEach(msg, copy) {
        if (!(ok = normalize_message(msg, i++, limits, r, err))) break;
    }
    if (ok && !(*out = cJSON_PrintUnformatted(copy))) ok = out_of_memory(err);
    cJSON_Delete(copy);
    return ok;
}

bool sp_api_optional_json(const cJSON *v, const char *name, int type, char **out,
                          sp_api_error *err) {
    *out = NULL;
    if (!v) return true;
    if ((v->type & 0xFF) != type)
        return sp_api_bad(err, name, "'%s' must be %s", name,
                          type == cJSON_Array ? "an array" : "an object");
    if (!(*out = cJSON_PrintUnformatted(v))) return out_of_memory(err);
    return true;
}
