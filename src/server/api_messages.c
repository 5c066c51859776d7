/* Chat messages of a request -> the JSON text the chat template renders
 * (api_json.h).
 * Pure functions, fuzzed by tests/fuzz/fuzz_server_request.c. */
#include "server/api_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGES 65536

static bool out_of_memory(sp_api_error *err) {
    return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
}

/* Replace an array of content parts by the concatenation of its texts. */
static bool join_text_parts(cJSON *msg, cJSON *content, int index, sp_api_error *err) {
    char param[64];
    size_t total = 1;
    int j = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        snprintf(param, sizeof param, "messages[%d].content[%d]", index, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return sp_api_bad(err, param, "'%s' must be an object with a string 'type'", param);
        if (strcmp(type->valuestring, "text"))
            return sp_api_bad(err, param, "content parts of type '%.40s' are not supported "
                                          "(only 'text')", type->valuestring);
        if (!cJSON_IsString(text))
            return sp_api_bad(err, param, "'%s.text' must be a string", param);
        total += strlen(text->valuestring);
    }
    char *joined = malloc(total), *at = joined;
    if (!joined) return out_of_memory(err);
    cJSON_ArrayForEach(part, content) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(at, t, n);
        at += n;
    }
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

static bool normalize_message(cJSON *msg, int index, sp_api_error *err) {
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
        if (!join_text_parts(msg, content, index, err)) return false;
    } else if (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) {
        return sp_api_bad(err, param, "'%s.content' must be a string, an array of text "
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

bool sp_api_messages_json(const cJSON *messages, char **out, sp_api_error *err) {
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
        if (!(ok = normalize_message(msg, i++, err))) break;
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
