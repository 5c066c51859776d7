/* Anthropic's Messages API body -> the server's chat request (api_request.h).
 *
 * The body is translated into the OpenAI chat body that means the same
 * (system prompt first, image blocks as image_url parts where they stand
 * (api_media.c), tool_use blocks as an assistant turn's tool_calls,
 * tool_result blocks as tool messages, tools as functions, tool_choice's
 * auto / any / tool / none as auto / required / a named function / none),
 * which the chat route's parser then reads: one validation and one path
 * through the chat template for both APIs.
 * Pure functions, fuzzed by tests/fuzz/fuzz_server_request.c. */
#include "base/strbuf.h"
#include "server/api_json.h"

#include <stdio.h>
#include <string.h>

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool out_of_memory(sp_api_error *err) {
    return sp_api_fail(err, 503, "server_error", NULL, NULL, "out of memory");
}

static const char *block_type(const cJSON *block) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(block, "type");
    return cJSON_IsObject(block) && cJSON_IsString(t) ? t->valuestring : NULL;
}

/* `content` (a string, or an array of text blocks) appended to `text`. */
static bool add_text_content(const cJSON *content, const char *param, sp_strbuf *text,
                             sp_api_error *err) {
    if (cJSON_IsString(content)) {
        sp_strbuf_add(text, content->valuestring, strlen(content->valuestring));
        return true;
    }
    if (!cJSON_IsArray(content))
        return sp_api_bad(err, param, "'%s' must be a string or an array of text blocks",
                          param);
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *type = block_type(b);
        const cJSON *t = field(b, "text");
        if (!type || strcmp(type, "text") || !cJSON_IsString(t))
            return sp_api_bad(err, param, "'%s' must be a string or an array of "
                              "{\"type\": \"text\", \"text\"} blocks", param);
        sp_strbuf_add(text, t->valuestring, strlen(t->valuestring));
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

/* A tool_use block as an OpenAI tool call on `calls`. */
static bool add_tool_call(cJSON *calls, const cJSON *b, const char *param, sp_api_error *err) {
    const cJSON *id = field(b, "id"), *name = field(b, "name"), *input = field(b, "input");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || (input && !cJSON_IsObject(input)))
        return sp_api_bad(err, param, "'%s' (tool_use) needs a string 'id' and 'name' and an "
                          "object 'input'", param);
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON *args = input ? cJSON_Duplicate(input, true) : cJSON_CreateObject();
    if (!call || !fn || !args) {
        cJSON_Delete(call);
        cJSON_Delete(fn);
        cJSON_Delete(args);
        return out_of_memory(err);
    }
    cJSON_AddStringToObject(call, "id", id->valuestring);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddItemToObject(fn, "arguments", args);
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToArray(calls, call);
    return true;
}

/* A tool_result block as a tool message on `msgs`. */
static bool add_tool_result(cJSON *msgs, const cJSON *b, const char *param,
                            sp_api_error *err) {
    const cJSON *id = field(b, "tool_use_id"), *content = field(b, "content");
    if (!cJSON_IsString(id))
        return sp_api_bad(err, param, "'%s' (tool_result) needs a string 'tool_use_id'", param);
    sp_strbuf text = {0};
    char where[128];
    snprintf(where, sizeof where, "%s.content", param);
    if (content && !add_text_content(content, where, &text, err)) {
        sp_strbuf_free(&text);
        return false;
    }
    cJSON *m = text.oom ? NULL : add_message(msgs, "tool", text.p ? text.p : "");
    sp_strbuf_free(&text);
    if (!m || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring))
        return out_of_memory(err);
    return true;
}

/* An image block's source as the URL of a chat image_url part: base64
 * {media_type, data} as a data URL, {url} as it is. */
static bool add_image(sp_api_content *c, const cJSON *b, const char *param, sp_api_error *err) {
    const cJSON *source = field(b, "source");
    const char *type = block_type(source);
    const cJSON *media = field(source, "media_type"), *data = field(source, "data");
    const cJSON *url = field(source, "url");
    char where[112];
    snprintf(where, sizeof where, "%s.source", param);
    if (type && !strcmp(type, "url")) {
        if (!cJSON_IsString(url))
            return sp_api_bad(err, where, "'%s.url' must be a string", where);
        return sp_api_content_image(c, url->valuestring, where, err);
    }
    if (!type || strcmp(type, "base64"))
        return sp_api_bad(err, where, "'%s' must be {\"type\": \"base64\", \"media_type\", "
                          "\"data\"} or {\"type\": \"url\", \"url\"}", where);
    if (!cJSON_IsString(media) || !cJSON_IsString(data))
        return sp_api_bad(err, where, "'%s' (base64) needs a string 'media_type' and 'data'",
                          where);
    sp_strbuf data_url = {0};
    sp_strbuf_printf(&data_url, "data:%s;base64,", media->valuestring);
    sp_strbuf_add(&data_url, data->valuestring, strlen(data->valuestring));
    bool ok = !data_url.oom ? sp_api_content_image(c, data_url.p, where, err)
                            : out_of_memory(err);
    sp_strbuf_free(&data_url);
    return ok;
}

/* One block of message `index`'s content: text and images into `content`,
 * tool_use into `calls` (assistant), tool_result into `msgs` (user; they
 * come before the turn's text, as the tool messages answering the
 * previous turn). */
static bool add_block(cJSON *msgs, cJSON *calls, sp_api_content *content, const cJSON *b,
                      bool assistant, const char *param, sp_api_error *err) {
    const char *type = block_type(b);
    if (!type) return sp_api_bad(err, param, "'%s' must be an object with a string 'type'", param);
    const cJSON *t = field(b, "text");
    if (!strcmp(type, "text")) {
        if (!cJSON_IsString(t)) return sp_api_bad(err, param, "'%s.text' must be a string", param);
        sp_api_content_text(content, t->valuestring);
        return true;
    }
    if (!strcmp(type, "image") && !assistant) return add_image(content, b, param, err);
    if (!strcmp(type, "tool_use") && assistant) return add_tool_call(calls, b, param, err);
    if (!strcmp(type, "tool_result") && !assistant) return add_tool_result(msgs, b, param, err);
    /* Earlier reasoning is not shown to the template again. */
    if ((!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) && assistant)
        return true;
    return sp_api_bad(err, param, "content blocks of type '%.40s' are not supported in a%s "
                      "message", type, assistant ? "n assistant" : " user");
}

static bool add_turn(cJSON *msgs, const cJSON *m, int index, sp_api_image_names *names,
                     sp_api_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", index);
    const cJSON *role = field(m, "role"), *content = field(m, "content");
    if (!cJSON_IsObject(m)) return sp_api_bad(err, param, "'%s' must be an object", param);
    if (!cJSON_IsString(role) ||
        (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return sp_api_bad(err, param, "'%s.role' must be \"user\" or \"assistant\"", param);
    bool assistant = !strcmp(role->valuestring, "assistant");
    if (cJSON_IsString(content))
        return add_message(msgs, role->valuestring, content->valuestring) || out_of_memory(err);
    if (!cJSON_IsArray(content))
        return sp_api_bad(err, param, "'%s.content' must be a string or an array of content "
                          "blocks", param);
    sp_api_content text = {.names = names};
    cJSON *calls = cJSON_CreateArray();
    bool ok = calls != NULL || out_of_memory(err);
    int j = 0, n_results = cJSON_GetArraySize(msgs);
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        char where[96];
        snprintf(where, sizeof where, "%s.content[%d]", param, j++);
        if (!(ok = ok && add_block(msgs, calls, &text, b, assistant, where, err))) break;
    }
    n_results = cJSON_GetArraySize(msgs) - n_results;
    bool has_calls = ok && cJSON_GetArraySize(calls) > 0;
    /* A user turn of tool results only is those tool messages. */
    if (ok && (!sp_api_content_empty(&text) || has_calls || n_results == 0)) {
        cJSON *turn = sp_api_content_message(msgs, role->valuestring, &text);
        if (!turn) {
            ok = out_of_memory(err);
        } else if (has_calls) {
            cJSON_AddItemToObject(turn, "tool_calls", calls);
            calls = NULL;
        }
    }
    cJSON_Delete(calls);
    sp_api_content_free(&text);
    return ok;
}

static bool add_messages(cJSON *body, const cJSON *root, sp_api_image_names *names,
                         sp_api_error *err) {
    cJSON *msgs = cJSON_AddArrayToObject(body, "messages");
    if (!msgs) return out_of_memory(err);
    const cJSON *system = field(root, "system");
    if (system) {
        sp_strbuf text = {0};
        bool ok = add_text_content(system, "system", &text, err);
        if (ok && text.len && !add_message(msgs, "system", text.p)) ok = out_of_memory(err);
        sp_strbuf_free(&text);
        if (!ok) return false;
    }
    const cJSON *messages = field(root, "messages");
    if (!messages) return sp_api_bad(err, "messages", "'messages' is required");
    if (!cJSON_IsArray(messages)) return sp_api_bad(err, "messages", "'messages' must be an array");
    if (cJSON_GetArraySize(messages) == 0)
        return sp_api_bad(err, "messages", "'messages' is empty");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
        if (!add_turn(msgs, m, i++, names, err)) return false;
    }
    return true;
}

/* tools: [{name, description, input_schema}] as OpenAI functions. */
static bool add_tools(cJSON *body, const cJSON *root, sp_api_error *err) {
    const cJSON *tools = field(root, "tools");
    if (!tools) return true;
    if (!cJSON_IsArray(tools)) return sp_api_bad(err, "tools", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(body, "tools");
    if (!out) return out_of_memory(err);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char param[48];
        snprintf(param, sizeof param, "tools[%d]", i++);
        const char *type = cJSON_IsObject(t) ? block_type(t) : NULL;
        const cJSON *name = field(t, "name"), *schema = field(t, "input_schema");
        const cJSON *desc = field(t, "description");
        if (type && strcmp(type, "custom"))
            return sp_api_bad(err, param, "tools of type '%.40s' are not supported (only "
                              "client tools with an input_schema)", type);
        if (!cJSON_IsString(name) || !cJSON_IsObject(schema) || (desc && !cJSON_IsString(desc)))
            return sp_api_bad(err, param, "'%s' needs a string 'name' and an object "
                              "'input_schema' (and 'description' a string)", param);
        /* The keys in OpenAI's order: templates print the tools as JSON. */
        cJSON *tool = cJSON_CreateObject();
        cJSON *fn = cJSON_AddStringToObject(tool, "type", "function")
                        ? cJSON_AddObjectToObject(tool, "function") : NULL;
        if (!fn) {
            cJSON_Delete(tool);
            return out_of_memory(err);
        }
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (desc) cJSON_AddStringToObject(fn, "description", desc->valuestring);
        cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, true));
        cJSON_AddItemToArray(out, tool);
    }
    return true;
}

/* tool_choice {type: auto | any | tool (name) | none, disable_parallel_tool_use}. */
static bool add_tool_choice(cJSON *body, const cJSON *root, sp_api_error *err) {
    const cJSON *c = field(root, "tool_choice");
    if (!c) return true;
    const char *type = block_type(c);
    const cJSON *name = field(c, "name"), *single = field(c, "disable_parallel_tool_use");
    if (!type)
        return sp_api_bad(err, "tool_choice", "'tool_choice' must be an object with a "
                          "string 'type'");
    if (single && !cJSON_IsBool(single))
        return sp_api_bad(err, "tool_choice", "'tool_choice.disable_parallel_tool_use' must "
                          "be a boolean");
    if (cJSON_IsTrue(single)) cJSON_AddFalseToObject(body, "parallel_tool_calls");
    if (!strcmp(type, "auto") || !strcmp(type, "none"))
        return cJSON_AddStringToObject(body, "tool_choice", type) || out_of_memory(err);
    const cJSON *tools = field(root, "tools");
    if ((!strcmp(type, "any") || !strcmp(type, "tool")) && cJSON_GetArraySize(tools) == 0)
        return sp_api_bad(err, "tool_choice", "'tool_choice' of type %s needs 'tools'", type);
    if (!strcmp(type, "any"))
        return cJSON_AddStringToObject(body, "tool_choice", "required") || out_of_memory(err);
    if (strcmp(type, "tool"))
        return sp_api_bad(err, "tool_choice", "'tool_choice.type' must be auto, any, tool or "
                          "none; got '%.40s'", type);
    if (!cJSON_IsString(name))
        return sp_api_bad(err, "tool_choice", "'tool_choice' of type tool needs a string "
                          "'name'");
    cJSON *choice = cJSON_AddObjectToObject(body, "tool_choice");
    cJSON *fn = choice ? cJSON_AddObjectToObject(choice, "function") : NULL;
    if (!fn) return out_of_memory(err);
    cJSON_AddStringToObject(choice, "type", "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    return true;
}

/* stop_sequences: an array of non-empty strings, as OpenAI's stop. */
static bool add_stop(cJSON *body, const cJSON *root, sp_api_error *err) {
    const cJSON *v = field(root, "stop_sequences");
    if (!v) return true;
    if (!cJSON_IsArray(v))
        return sp_api_bad(err, "stop_sequences", "'stop_sequences' must be an array of strings");
    if (cJSON_GetArraySize(v) > SP_API_MAX_STOP)
        return sp_api_bad(err, "stop_sequences", "'stop_sequences' takes at most %d strings",
                          SP_API_MAX_STOP);
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s))
            return sp_api_bad(err, "stop_sequences", "'stop_sequences' must be an array of "
                              "strings");
    }
    return cJSON_AddItemToObject(body, "stop", cJSON_Duplicate(v, true)) || out_of_memory(err);
}

/* The fields that mean the same in both APIs, copied as they are;
 * max_tokens is required except when counting. */
static bool copy_fields(cJSON *body, const cJSON *root, bool count_only, sp_api_error *err) {
    static const char *const same[] = {"model", "stream", "temperature", "top_p", "top_k",
                                       "max_tokens"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        const cJSON *v = field(root, same[i]);
        if (v && !cJSON_AddItemToObject(body, same[i], cJSON_Duplicate(v, true)))
            return out_of_memory(err);
    }
    if (!count_only && !field(root, "max_tokens"))
        return sp_api_bad(err, "max_tokens", "'max_tokens' is required");
    return true;
}

/* thinking {type: enabled | disabled, budget_tokens} as the chat
 * templates' enable_thinking (Qwen3's and others'; a template without it
 * ignores it). The budget is not enforced. */
static bool add_thinking(cJSON *body, const cJSON *root, sp_api_error *err) {
    const cJSON *t = field(root, "thinking");
    if (!t) return true;
    const char *type = block_type(t);
    if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
        return sp_api_bad(err, "thinking", "'thinking' must be {\"type\": \"enabled\"} or "
                          "{\"type\": \"disabled\"}");
    cJSON *kwargs = cJSON_AddObjectToObject(body, "chat_template_kwargs");
    return (kwargs && cJSON_AddBoolToObject(kwargs, "enable_thinking", !strcmp(type, "enabled"))) ||
           out_of_memory(err);
}

bool sp_api_parse_anthropic(const char *body, size_t len, const sp_api_limits *limits,
                            bool count_only, sp_api_request *out, sp_api_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = SP_API_CHAT;
    out->dialect = SP_API_ANTHROPIC;
    cJSON *root = sp_api_parse_object(body, len, err);
    if (!root) return false;
    cJSON *chat = cJSON_CreateObject();
    sp_api_image_names names = {0};
    bool ok = (chat != NULL || out_of_memory(err)) &&
              copy_fields(chat, root, count_only, err) && add_messages(chat, root, &names, err) &&
              add_tools(chat, root, err) && add_tool_choice(chat, root, err) &&
              add_stop(chat, root, err) && add_thinking(chat, root, err);
    if (ok && !(ok = sp_api_parse_generation_root(SP_API_CHAT, chat, limits, out, err)))
        sp_api_name_image_error(err, cJSON_GetObjectItemCaseSensitive(chat, "messages"), &names);
    cJSON_Delete(chat);
    cJSON_Delete(root);
    out->dialect = SP_API_ANTHROPIC;
    /* Anthropic clients ask for far more than a local model's context
     * holds (a coding agent's 32000): the answer stops at the context's
     * end with stop_reason "max_tokens" rather than being refused. */
    out->max_tokens_given = false;
    return ok;
}
