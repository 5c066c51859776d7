/* The structured-output fields of a generation body: OpenAI's
 * response_format ({"type": "text" | "json_object" | "json_schema",
 * "json_schema": {"name", "schema", "strict"}}) and llama-server's
 * "grammar" (GBNF text). Only their text is read here; job.c compiles it
 * against the tokenizer, and a grammar that fails to compile is a 400
 * naming where and why, never an unconstrained generation. */
#include "server/api_grammar.h"

#include <stdlib.h>
#include <string.h>

static bool take_text(sp_api_request *r, char *text, int kind, const char *param,
                      sp_api_error *err) {
    if (!text) return sp_api_fail(err, 500, "server_error", param, NULL, "out of memory");
    r->grammar_text = text;
    r->grammar_kind = kind;
    r->grammar_param = param;
    return true;
}

static bool read_response_format(const cJSON *rf, sp_api_request *r,
                                 sp_api_error *err) {
    if (!cJSON_IsObject(rf))
        return sp_api_bad(err, "response_format", "'response_format' must be an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsString(type))
        return sp_api_bad(err, "response_format", "'response_format.type' must be a string");
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) return true;
    /* llama-server also takes {"type": "json_object", "schema": {...}}. */
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(rf, "schema");
    if (!strcmp(t, "json_object") && !schema)
        return take_text(r, calloc(1, 1), SPINDLE_GRAMMAR_JSON_OBJECT, "response_format", err);
    if (!strcmp(t, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        if (!cJSON_IsObject(js))
            return sp_api_bad(err, "response_format",
                              "'response_format.json_schema' must be an object");
        schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!schema)
            return sp_api_bad(err, "response_format",
                              "'response_format.json_schema.schema' is missing");
    } else if (strcmp(t, "json_object")) {
        return sp_api_bad(err, "response_format",
                          "'response_format.type' must be \"text\", \"json_object\" or "
                          "\"json_schema\", got \"%.40s\"", t);
    }
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return sp_api_bad(err, "response_format", "the schema must be a JSON object");
    return take_text(r, cJSON_PrintUnformatted(schema), SPINDLE_GRAMMAR_JSON_SCHEMA,
                     "response_format", err);
}

bool sp_api_read_grammar(const cJSON *root, sp_api_request *r, sp_api_error *err) {
    r->grammar_kind = -1;
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    if (rf && cJSON_IsNull(rf)) rf = NULL;
    if (g && cJSON_IsNull(g)) g = NULL;
    if (rf && g)
        return sp_api_bad(err, "grammar", "'grammar' and 'response_format' exclude each other");
    if (g) {
        if (!cJSON_IsString(g))
            return sp_api_bad(err, "grammar", "'grammar' must be a string (GBNF)");
        size_t n = strlen(g->valuestring);
        char *text = malloc(n + 1);
        if (text) memcpy(text, g->valuestring, n + 1);
        return take_text(r, text, SPINDLE_GRAMMAR_GBNF, "grammar", err);
    }
    return rf ? read_response_format(rf, r, err) : true;
}
