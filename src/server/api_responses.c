/* OpenAI's Responses API body -> the server's chat request (api_request.h).
 *
 * As for Anthropic's Messages (api_anthropic.c), the body is translated
 * into the chat body that means the same, which the chat route's parser
 * then reads: instructions as the system message, message items as
 * messages, function_call items as an assistant turn's tool_calls,
 * function_call_output items as tool messages, flat function tools as
 * chat functions, input_image parts as image_url parts (api_media.c),
 * text.format as response_format, max_output_tokens as max_tokens.
 * previous_response_id's conversation (the store's, through the caller's
 * lookup) comes between the instructions and the input; the
 * instructions are not part of what a later response continues, as in
 * OpenAI's API.
 * Pure functions, fuzzed by tests/fuzz/fuzz_server_request.c. */
#include "base/strbuf.h"
#include "server/api_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool out_of_memory(sp_api_error *err) {
    return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
}

static const char *string_field(const cJSON *obj, const char *key) {
    const cJSON *v = field(obj, key);
    return cJSON_IsObject(obj) && cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Adds a copy of `v` under `key` (NULL v: nothing). */
static bool copy_to(cJSON *obj, const char *key, const cJSON *v, sp_api_error *err) {
    if (!v) return true;
    return cJSON_AddItemToObject(obj, key, cJSON_Duplicate(v, true)) || out_of_memory(err);
}

/* An input_image part as a chat image_url part: image_url a data URL or
 * a remote URL (the chat parser checks which it may take). detail is
 * taken and changes nothing: the encoder has one input size. */
static bool add_image(sp_api_content *c, const cJSON *part, const char *param,
                      sp_api_error *err) {
    const cJSON *url = field(part, "image_url"), *detail = field(part, "detail");
    char where[112];
    snprintf(where, sizeof where, "%s.image_url", param);
    if (field(part, "file_id"))
        return sp_api_bad(err, param, "'%s.file_id': file inputs are not supported; send "
                          "image_url", param);
    if (!cJSON_IsString(url))
        return sp_api_bad(err, where, "'%s' must be a string (a data URL)", where);
    if (detail && (!cJSON_IsString(detail) ||
                   (strcmp(detail->valuestring, "auto") && strcmp(detail->valuestring, "low") &&
                    strcmp(detail->valuestring, "high"))))
        return sp_api_bad(err, param, "'%s.detail' must be \"auto\", \"low\" or \"high\"",
                          param);
    return sp_api_content_image(c, url->valuestring, where, err);
}

/* A message's content: a string, or an array of input_text / output_text
 * parts, and input_image parts where `images` (else refused), into `c`. */
static bool add_content(const cJSON *content, const char *param, bool images,
                        sp_api_content *c, sp_api_error *err) {
    if (cJSON_IsString(content)) {
        sp_api_content_text(c, content->valuestring);
        return true;
    }
    if (!cJSON_IsArray(content))
        return sp_api_bad(err, param, "'%s' must be a string or an array of content parts",
                          param);
    int i = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const char *type = string_field(part, "type");
        const char *t = string_field(part, "text");
        char where[96];
        snprintf(where, sizeof where, "%s[%d]", param, i++);
        if (!type)
            return sp_api_bad(err, where, "'%s' must be an object with a string 'type'", where);
        if (images && !strcmp(type, "input_image")) {
            if (!add_image(c, part, where, err)) return false;
            continue;
        }
        if (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text"))
            return sp_api_bad(err, where, "'%s': content parts of type '%.40s' are not "
                              "supported (only input_text, output_text%s)", where, type,
                              images ? " and input_image" : "");
        if (!t) return sp_api_bad(err, where, "'%s.text' must be a string", where);
        sp_api_content_text(c, t);
    }
    return true;
}

/* {"role", "content": text} appended to `msgs` (NULL when out of memory). */
static cJSON *add_message(cJSON *msgs, const char *role, const char *text) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", text) || !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

static bool add_message_item(cJSON *msgs, const cJSON *item, const char *param,
                             sp_api_image_names *names, sp_api_error *err) {
    static const char *const roles[] = {"user", "assistant", "system", "developer"};
    const char *role = string_field(item, "role");
    bool known = false;
    for (size_t i = 0; role && i < sizeof roles / sizeof *roles; i++)
        known |= !strcmp(role, roles[i]);
    if (!known)
        return sp_api_bad(err, param, "'%s.role' must be user, assistant, system or "
                          "developer", param);
    char where[96];
    snprintf(where, sizeof where, "%s.content", param);
    const cJSON *content = field(item, "content");
    if (!content) return sp_api_bad(err, where, "'%s' is required", where);
    sp_api_content c = {.names = names};
    bool ok = add_content(content, where, true, &c, err);
    if (ok && !sp_api_content_message(msgs, role, &c)) ok = out_of_memory(err);
    sp_api_content_free(&c);
    return ok;
}

/* A function_call item as a tool call of the assistant turn it follows
 * (the turn's text and its calls are one chat message), or of a new one. */
static bool add_function_call(cJSON *msgs, const cJSON *item, const char *param,
                              sp_api_error *err) {
    const char *call_id = string_field(item, "call_id"), *name = string_field(item, "name");
    const char *args = string_field(item, "arguments");
    if (!call_id || !name || !args)
        return sp_api_bad(err, param, "'%s' (function_call) needs string 'call_id', 'name' "
                          "and 'arguments'", param);
    cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const char *last_role = string_field(last, "role");
    cJSON *turn = last_role && !strcmp(last_role, "assistant") ? last
                                                               : add_message(msgs, "assistant", "");
    cJSON *calls = turn ? cJSON_GetObjectItemCaseSensitive(turn, "tool_calls") : NULL;
    if (turn && !calls) calls = cJSON_AddArrayToObject(turn, "tool_calls");
    cJSON *call = calls ? cJSON_CreateObject() : NULL;
    cJSON *fn = call ? cJSON_CreateObject() : NULL;
    if (!fn || !cJSON_AddStringToObject(call, "id", call_id) ||
        !cJSON_AddStringToObject(call, "type", "function") ||
        !cJSON_AddStringToObject(fn, "name", name) ||
        !cJSON_AddStringToObject(fn, "arguments", args)) {
        cJSON_Delete(fn);
        cJSON_Delete(call);
        return out_of_memory(err);
    }
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToArray(calls, call);
    return true;
}

static bool add_function_output(cJSON *msgs, const cJSON *item, const char *param,
                                sp_api_error *err) {
    const char *call_id = string_field(item, "call_id");
    const cJSON *output = field(item, "output");
    if (!call_id || !output)
        return sp_api_bad(err, param, "'%s' (function_call_output) needs a string 'call_id' "
                          "and an 'output'", param);
    char where[96];
    snprintf(where, sizeof where, "%s.output", param);
    sp_api_content text = {0};
    bool ok = add_content(output, where, false, &text, err);
    cJSON *m = ok ? sp_api_content_message(msgs, "tool", &text) : NULL;
    if (ok && (!m || !cJSON_AddStringToObject(m, "tool_call_id", call_id)))
        ok = out_of_memory(err);
    sp_api_content_free(&text);
    return ok;
}

static bool add_item(cJSON *msgs, const cJSON *item, int index, sp_api_image_names *names,
                     sp_api_error *err) {
    char param[48];
    snprintf(param, sizeof param, "input[%d]", index);
    if (!cJSON_IsObject(item)) return sp_api_bad(err, param, "'%s' must be an object", param);
    const cJSON *type_v = field(item, "type");
    if (type_v && !cJSON_IsString(type_v))
        return sp_api_bad(err, param, "'%s.type' must be a string", param);
    /* An item without a type is a message (the SDK's EasyInputMessage). */
    const char *type = type_v ? type_v->valuestring : "message";
    if (!strcmp(type, "message")) return add_message_item(msgs, item, param, names, err);
    if (!strcmp(type, "function_call")) return add_function_call(msgs, item, param, err);
    if (!strcmp(type, "function_call_output"))
        return add_function_output(msgs, item, param, err);
    /* Earlier reasoning is not shown to the template again. */
    if (!strcmp(type, "reasoning")) return true;
    return sp_api_bad(err, param, "'%s': input items of type '%.40s' are not supported "
                      "(message, function_call, function_call_output, reasoning)", param, type);
}

/* previous_response_id's conversation, then the input, onto `conv`. */
static bool add_conversation(cJSON *conv, const cJSON *root, sp_api_history_fn history,
                             void *ctx, sp_api_image_names *names, sp_api_error *err) {
    const cJSON *prev = field(root, "previous_response_id");
    if (prev && !cJSON_IsString(prev))
        return sp_api_bad(err, "previous_response_id", "'previous_response_id' must be a "
                          "string");
    if (prev) {
        char *text = history ? history(ctx, prev->valuestring) : NULL;
        cJSON *earlier = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (!cJSON_IsArray(earlier)) {
            cJSON_Delete(earlier);
            return sp_api_fail(err, 404, "invalid_request_error", "previous_response_id",
                               "previous_response_not_found", "Previous response with id "
                               "'%.100s' not found.", prev->valuestring);
        }
        cJSON *m;
        while ((m = cJSON_DetachItemFromArray(earlier, 0))) {
            for (int k = sp_api_count_image_parts(m); k > 0; k--)
                sp_api_image_name(names, "previous_response_id");
            cJSON_AddItemToArray(conv, m);
        }
        cJSON_Delete(earlier);
    }
    const cJSON *input = field(root, "input");
    if (!input) return sp_api_bad(err, "input", "'input' is required");
    if (cJSON_IsString(input))
        return add_message(conv, "user", input->valuestring) || out_of_memory(err);
    if (!cJSON_IsArray(input))
        return sp_api_bad(err, "input", "'input' must be a string or an array of items");
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, input) {
        if (!add_item(conv, item, i++, names, err)) return false;
    }
    if (cJSON_GetArraySize(conv) == 0) return sp_api_bad(err, "input", "'input' is empty");
    return true;
}

/* The instructions (as a system message), then the conversation. */
static bool add_messages(cJSON *chat, const cJSON *root, const cJSON *conv,
                         sp_api_error *err) {
    const cJSON *instructions = field(root, "instructions");
    if (instructions && !cJSON_IsString(instructions))
        return sp_api_bad(err, "instructions", "'instructions' must be a string");
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    if (!msgs) return out_of_memory(err);
    if (instructions && instructions->valuestring[0] &&
        !add_message(msgs, "system", instructions->valuestring))
        return out_of_memory(err);
    const cJSON *m;
    cJSON_ArrayForEach(m, conv) {
        if (!cJSON_AddItemToArray(msgs, cJSON_Duplicate(m, true))) return out_of_memory(err);
    }
    return true;
}

/* tools: [{type: "function", name, description, parameters, strict}]. */
static bool add_tools(cJSON *chat, const cJSON *root, sp_api_error *err) {
    const cJSON *tools = field(root, "tools");
    if (!tools) return true;
    if (!cJSON_IsArray(tools)) return sp_api_bad(err, "tools", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    if (!out) return out_of_memory(err);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char param[48];
        snprintf(param, sizeof param, "tools[%d]", i++);
        const char *type = string_field(t, "type");
        if (type && strcmp(type, "function"))
            return sp_api_bad(err, param, "'%s': tools of type '%.40s' are not supported "
                              "(only function tools)", param, type);
        const cJSON *name = field(t, "name"), *params = field(t, "parameters");
        const cJSON *desc = field(t, "description");
        if (!type || !cJSON_IsString(name) || (params && !cJSON_IsObject(params)) ||
            (desc && !cJSON_IsString(desc)))
            return sp_api_bad(err, param, "'%s' needs \"type\": \"function\", a string "
                              "'name' (and 'parameters' an object, 'description' a string)",
                              param);
        cJSON *tool = cJSON_CreateObject();
        cJSON *fn = cJSON_AddStringToObject(tool, "type", "function")
                        ? cJSON_AddObjectToObject(tool, "function") : NULL;
        if (!fn || !cJSON_AddItemToArray(out, tool)) {
            cJSON_Delete(tool);
            return out_of_memory(err);
        }
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (!copy_to(fn, "description", desc, err) || !copy_to(fn, "parameters", params, err))
            return false;
    }
    return true;
}

/* tool_choice: "auto" | "none" | "required" | {type: "function", name}. */
static bool add_tool_choice(cJSON *chat, const cJSON *root, sp_api_error *err) {
    const cJSON *c = field(root, "tool_choice");
    if (!c || cJSON_IsString(c)) return copy_to(chat, "tool_choice", c, err);
    const char *type = string_field(c, "type"), *name = string_field(c, "name");
    if (!type || strcmp(type, "function") || !name)
        return sp_api_bad(err, "tool_choice", "'tool_choice' must be \"auto\", \"none\", "
                          "\"required\" or {\"type\": \"function\", \"name\"}");
    cJSON *choice = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON *fn = choice ? cJSON_AddObjectToObject(choice, "function") : NULL;
    if (!fn || !cJSON_AddStringToObject(choice, "type", "function") ||
        !cJSON_AddStringToObject(fn, "name", name))
        return out_of_memory(err);
    return true;
}

/* text.format {type: text | json_object | json_schema (name, schema,
 * strict)} as the chat body's response_format. */
static bool add_text_format(cJSON *chat, const cJSON *root, sp_api_error *err) {
    const cJSON *text = field(root, "text");
    if (!text) return true;
    const cJSON *format = field(text, "format");
    if (!cJSON_IsObject(text) || (format && !cJSON_IsObject(format)))
        return sp_api_bad(err, "text.format", "'text' must be an object and 'text.format' "
                          "an object");
    const char *type = string_field(format, "type");
    if (!format || (type && !strcmp(type, "text"))) return true;
    if (!type || (strcmp(type, "json_object") && strcmp(type, "json_schema")))
        return sp_api_bad(err, "text.format.type", "'text.format.type' must be \"text\", "
                          "\"json_object\" or \"json_schema\"");
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    if (!rf || !cJSON_AddStringToObject(rf, "type", type)) return out_of_memory(err);
    if (!strcmp(type, "json_object")) return true;
    const cJSON *schema = field(format, "schema");
    if (!schema)
        return sp_api_bad(err, "text.format.schema", "'text.format.schema' is required for "
                          "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    if (!js) return out_of_memory(err);
    return copy_to(js, "name", field(format, "name"), err) &&
           copy_to(js, "schema", schema, err) &&
           copy_to(js, "strict", field(format, "strict"), err);
}

/* The fields that mean the same in both APIs; max_output_tokens is
 * max_tokens. */
static bool copy_fields(cJSON *chat, const cJSON *root, sp_api_error *err) {
    static const char *const same[] = {"model", "stream", "temperature", "top_p",
                                       "parallel_tool_calls"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        if (!copy_to(chat, same[i], field(root, same[i]), err)) return false;
    return copy_to(chat, "max_tokens", field(root, "max_output_tokens"), err);
}

/* store (default true), reasoning and metadata: checked here, since the
 * chat parser does not know them. */
static bool read_own_fields(const cJSON *root, sp_api_request *out, sp_api_error *err) {
    const cJSON *store = field(root, "store");
    if (store && !cJSON_IsBool(store))
        return sp_api_bad(err, "store", "'store' must be a boolean");
    out->store = !cJSON_IsFalse(store);
    static const char *const objects[] = {"reasoning", "metadata"};
    for (size_t i = 0; i < sizeof objects / sizeof *objects; i++) {
        const cJSON *v = field(root, objects[i]);
        if (v && !cJSON_IsObject(v))
            return sp_api_bad(err, objects[i], "'%s' must be an object", objects[i]);
    }
    return true;
}

/* The request's fields that the response object repeats, as given. */
static bool keep_echo(const cJSON *root, sp_api_request *out, sp_api_error *err) {
    static const char *const echoed[] = {"instructions", "previous_response_id", "tools",
                                         "tool_choice", "temperature", "top_p",
                                         "max_output_tokens", "text", "parallel_tool_calls",
                                         "reasoning", "metadata", "user", "store"};
    cJSON *echo = cJSON_CreateObject();
    bool ok = echo != NULL || out_of_memory(err);
    for (size_t i = 0; ok && i < sizeof echoed / sizeof *echoed; i++)
        ok = copy_to(echo, echoed[i], field(root, echoed[i]), err);
    if (ok && !(out->responses_echo_json = cJSON_PrintUnformatted(echo))) ok = out_of_memory(err);
    cJSON_Delete(echo);
    return ok;
}

static bool build_chat(cJSON *chat, const cJSON *root, cJSON *conv, sp_api_history_fn history,
                       void *ctx, sp_api_image_names *names, sp_api_error *err) {
    return copy_fields(chat, root, err) && add_conversation(conv, root, history, ctx, names, err) &&
           add_messages(chat, root, conv, err) && add_tools(chat, root, err) &&
           add_tool_choice(chat, root, err) && add_text_format(chat, root, err);
}

bool sp_api_parse_responses(const char *body, size_t len, const sp_api_limits *limits,
                            sp_api_history_fn history, void *ctx, sp_api_request *out,
                            sp_api_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = SP_API_CHAT;
    out->dialect = SP_API_RESPONSES;
    cJSON *root = sp_api_parse_object(body, len, err);
    if (!root) return false;
    cJSON *chat = cJSON_CreateObject(), *conv = cJSON_CreateArray();
    bool ok = (chat && conv) || out_of_memory(err);
    sp_api_image_names names = {0};
    ok = ok && build_chat(chat, root, conv, history, ctx, &names, err);
    if (ok && !(ok = sp_api_parse_generation_root(SP_API_CHAT, chat, limits, out, err))) {
        sp_api_rename_param(err, "max_tokens", "max_output_tokens");
        sp_api_rename_param(err, "response_format", "text.format");
        sp_api_name_image_error(err, cJSON_GetObjectItemCaseSensitive(chat, "messages"), &names);
    }
    out->dialect = SP_API_RESPONSES;
    if (ok && out->grammar_text) out->grammar_param = "text.format";
    /* As on the Messages route: a max_output_tokens past the context stops
     * the reply there (status "incomplete") rather than being refused. */
    out->max_tokens_given = false;
    ok = ok && read_own_fields(root, out, err) && keep_echo(root, out, err);
    if (ok && !(out->conversation_json = cJSON_PrintUnformatted(conv))) ok = out_of_memory(err);
    if (!ok) sp_api_request_free(out);
    cJSON_Delete(conv);
    cJSON_Delete(chat);
    cJSON_Delete(root);
    return ok;
}
