/* The tool fields of a chat body (api_json.h): tool_choice,
 * parallel_tool_calls and reasoning_format, checked against `tools`.
 *
 * A forced choice ("required", a named function) becomes a grammar over
 * the template's call format (tool_grammar.c) where the format allows. */
#include <string.h>

#include "server/api_json.h"

static const cJSON *present(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static const char *function_name(const cJSON *tool) {
    const cJSON *f = present(tool, "function");
    const cJSON *name = f ? present(f, "name") : NULL;
    return cJSON_IsString(name) && name->valuestring[0] ? name->valuestring : NULL;
}

static bool check_tools(const cJSON *tools, sp_api_error *err) {
    int i = 0;
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, i++) {
        const cJSON *type = present(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) ||
            strcmp(type->valuestring, "function") != 0)
            return sp_api_bad(err, "tools", "tools[%d] must be {\"type\": \"function\", "
                                            "\"function\": {...}}", i);
        if (!function_name(t))
            return sp_api_bad(err, "tools", "tools[%d].function.name must be a non-empty "
                                            "string", i);
    }
    return true;
}

static bool has_tool(const cJSON *tools, const char *name) {
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next)
        if (strcmp(function_name(t), name) == 0) return true;
    return false;
}

static bool read_choice(const cJSON *v, const cJSON *tools, sp_api_tool_choice *c,
                        sp_api_error *err) {
    bool any_tools = tools && cJSON_GetArraySize(tools) > 0;
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (!strcmp(s, "auto")) c->kind = SP_TOOL_CHOICE_AUTO;
        else if (!strcmp(s, "none")) c->kind = SP_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required")) c->kind = SP_TOOL_CHOICE_REQUIRED;
        else
            return sp_api_bad(err, "tool_choice", "'tool_choice' must be \"none\", \"auto\", "
                                                  "\"required\" or a named function");
        if (c->kind == SP_TOOL_CHOICE_REQUIRED && !any_tools)
            return sp_api_bad(err, "tool_choice", "'tool_choice' \"required\" needs 'tools'");
        return true;
    }
    const cJSON *type = cJSON_IsObject(v) ? present(v, "type") : NULL;
    const char *name = function_name(v);
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 || !name)
        return sp_api_bad(err, "tool_choice", "'tool_choice' must be \"none\", \"auto\", "
                                              "\"required\" or {\"type\": \"function\", "
                                              "\"function\": {\"name\": ...}}");
    if (strlen(name) >= sizeof c->name || !has_tool(tools, name))
        return sp_api_bad(err, "tool_choice", "'tool_choice' names '%.100s', which is not "
                                              "one of 'tools'", name);
    c->kind = SP_TOOL_CHOICE_NAMED;
    strcpy(c->name, name);
    return true;
}

bool sp_api_read_tool_choice(const cJSON *root, const cJSON *tools, sp_api_request *r,
                             sp_api_error *err) {
    sp_api_tool_choice *c = &r->tool_choice;
    memset(c, 0, sizeof *c);
    if (!check_tools(tools, err)) return false;
    const cJSON *v = present(root, "tool_choice");
    if (v && !read_choice(v, tools, c, err)) return false;
    const cJSON *parallel = present(root, "parallel_tool_calls");
    if (parallel && !cJSON_IsBool(parallel))
        return sp_api_bad(err, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    c->single_call = parallel && cJSON_IsFalse(parallel);
    const cJSON *rf = present(root, "reasoning_format");
    if (rf && !cJSON_IsString(rf))
        return sp_api_bad(err, "reasoning_format", "'reasoning_format' must be a string");
    c->no_reasoning = rf && strcmp(rf->valuestring, "none") == 0;
    return true;
}
