/* tool_choice "required" or a named function, enforced by a grammar: the
 * reply can only be the call(s) in the markup of the template's format,
 * each call's arguments following its function's `parameters` schema.
 *
 * The call objects are one JSON Schema ({"name": {"const": N},
 * "arguments": parameters}, an anyOf over the tools for "required"),
 * converted by the grammar engine's schema converter through the public
 * API; the format's markup is GBNF around the converted root. A tool's
 * local $refs are rebased onto the wrapper, so $defs and recursion work
 * as they do in response_format.
 *
 * The formats whose markers are plain text are enforced: Hermes/Qwen
 * (<tool_call>...</tool_call>, one or more) and Llama 3 JSON (one bare
 * object). The end of the turn is allowed after every complete call and
 * the whitespace that may follow it. Mistral's [TOOL_CALLS], harmony's and Gemma's markers are
 * special tokens, which a mask never lets through (the vocabulary trie
 * has no bytes for them): those replies are parsed as with "auto".
 * The schema goes through the server's grammar cache, the tools' $refs
 * rebased. Fuzzed by tests/fuzz/fuzz_tool_grammar.c. */
#include "server/state.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"

/* "#..." refs of a tool's parameters point at that schema's root; in the
 * wrapper it sits at `base`. */
static bool rebase_refs(cJSON *node, const char *base) {
    for (cJSON *c = node ? node->child : NULL; c; c = c->next) {
        if (c->string && !strcmp(c->string, "$ref") && cJSON_IsString(c) &&
            c->valuestring[0] == '#') {
            size_t n = strlen(base) + strlen(c->valuestring);
            char *ref = malloc(n + 1);
            if (!ref) return false;
            snprintf(ref, n + 1, "%s%s", base, c->valuestring + 1);
            if (!cJSON_SetValuestring(c, ref)) {
                free(ref);
                return false;
            }
            free(ref);
        } else if (!rebase_refs(c, base)) {
            return false;
        }
    }
    return true;
}

/* {"type": "object", "properties": {"name": {"const": N}, ARGS: params},
 * "required": [...], "additionalProperties": false} */
static cJSON *call_schema(const cJSON *function, const char *args_key, const char *base) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(function, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(function, "parameters");
    cJSON *s = cJSON_CreateObject(), *props = cJSON_CreateObject();
    cJSON *name_schema = cJSON_CreateObject();
    cJSON *args = params && !cJSON_IsNull(params) ? cJSON_Duplicate(params, true)
                                                   : cJSON_Parse("{\"type\":\"object\"}");
    cJSON *required = cJSON_CreateArray();
    bool ok = s && props && name_schema && args && required &&
              cJSON_AddItemToObject(name_schema, "const", cJSON_CreateString(name->valuestring)) &&
              rebase_refs(args, base);
    if (ok) {
        cJSON_AddItemToObject(props, "name", name_schema);
        cJSON_AddItemToObject(props, args_key, args);
        cJSON_AddItemToArray(required, cJSON_CreateString("name"));
        cJSON_AddItemToArray(required, cJSON_CreateString(args_key));
        cJSON_AddStringToObject(s, "type", "object");
        cJSON_AddItemToObject(s, "properties", props);
        cJSON_AddItemToObject(s, "required", required);
        cJSON_AddFalseToObject(s, "additionalProperties");
        return s;
    }
    cJSON_Delete(s);
    cJSON_Delete(props);
    cJSON_Delete(name_schema);
    cJSON_Delete(args);
    cJSON_Delete(required);
    return NULL;
}

static bool chosen(const sp_api_tool_choice *c, const cJSON *function) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(function, "name");
    return c->kind == SP_TOOL_CHOICE_REQUIRED || !strcmp(name->valuestring, c->name);
}

/* The schema of the call objects the choice allows (one, or an anyOf). */
static char *calls_schema(const cJSON *tools, const sp_api_tool_choice *c,
                          const char *args_key) {
    int n = 0;
    for (const cJSON *t = tools->child; t; t = t->next)
        n += chosen(c, cJSON_GetObjectItemCaseSensitive(t, "function"));
    cJSON *any = n > 1 ? cJSON_CreateArray() : NULL, *one = NULL;
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!chosen(c, f)) continue;
        char base[64];
        if (n == 1) snprintf(base, sizeof base, "#/properties/%s", args_key);
        else snprintf(base, sizeof base, "#/anyOf/%d/properties/%s", i, args_key);
        one = call_schema(f, args_key, base);
        if (!one) break;
        if (any) cJSON_AddItemToArray(any, one);
        i++;
    }
    char *text = NULL;
    if (any) {
        cJSON *root = cJSON_CreateObject();
        if (root && one) {
            cJSON_AddItemToObject(root, "anyOf", any);
            text = cJSON_PrintUnformatted(root);
            any = NULL;
        }
        cJSON_Delete(root);
        cJSON_Delete(any);
    } else if (one) {
        text = cJSON_PrintUnformatted(one);
        cJSON_Delete(one);
    }
    return text;
}

static bool defines(const char *gbnf, const char *name) {
    size_t n = strlen(name);
    for (const char *p = gbnf; p; p = strchr(p, '\n')) {
        if (*p == '\n') p++;
        if (!strncmp(p, name, n) && !strncmp(p + n, " ::=", 4)) return true;
    }
    return false;
}

/* A rule name `base` or base-K that the converted grammar does not use. */
static void free_name(const char *gbnf, const char *base, char *out, size_t cap) {
    snprintf(out, cap, "%s", base);
    for (int k = 1; defines(gbnf, out); k++) snprintf(out, cap, "%s-%d", base, k);
}

/* The converted grammar with its root renamed `call`, and the markup's
 * rules around it. */
static bool markup_grammar(const char *json_gbnf, sp_tool_format format, bool single,
                           bool in_think, sp_strbuf *out) {
    char call[64], tc[64], think[64], gap[64];
    free_name(json_gbnf, "spindle-call", call, sizeof call);
    free_name(json_gbnf, "spindle-tool-call", tc, sizeof tc);
    free_name(json_gbnf, "spindle-think", think, sizeof think);
    free_name(json_gbnf, "spindle-gap", gap, sizeof gap);
    for (const char *p = json_gbnf; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p + 1) : strlen(p);
        if (!strncmp(p, "root ::=", 8)) {
            sp_strbuf_printf(out, "%s ::=", call);
            sp_strbuf_add(out, p + 8, n - 8);
        } else if (!strncmp(p, "space ::=", 9)) {
            /* The templates write calls with tojson (", " and ": ", no
             * newlines) and models write them so: at most one space, which
             * also keeps a weak model from wandering in whitespace. */
            sp_strbuf_printf(out, "space ::= | \" \"\n");
        } else {
            sp_strbuf_add(out, p, n);
        }
        p += n;
    }
    if (out->len && out->p[out->len - 1] != '\n') sp_strbuf_addc(out, '\n');
    /* A prompt that opened <think> leaves the thought to finish first (a
     * thought without "</" in it: enough to close it and call). */
    if (in_think)
        sp_strbuf_printf(out, "%s ::= ( [^<] | \"<\" [^/] )* \"</think>\" [ \\n]*\n", think);
    const char *lead = in_think ? think : "";
    /* The whitespace the templates write around a call and between calls
     * ("}\n</tool_call>\n<tool_call>"), and models after the last one: the
     * end of the turn stays open through it, and it is bounded so that a
     * weak model cannot wander in it. */
    sp_strbuf_printf(out, "%s ::= [ \\n]{0,3}\n", gap);
    if (format == SP_TOOLS_LLAMA3) {
        sp_strbuf_printf(out, "root ::= %s %s %s\n", lead, call, gap);
    } else {
        sp_strbuf_printf(out, "%s ::= \"<tool_call>\\n\" %s %s \"</tool_call>\"\n", tc, call,
                         gap);
        if (single) sp_strbuf_printf(out, "root ::= %s %s %s\n", lead, tc, gap);
        else sp_strbuf_printf(out, "root ::= %s %s ( %s %s )* %s\n", lead, tc, gap, tc, gap);
    }
    return !out->oom;
}

bool sp_server_tool_grammar_applies(const sp_server *s, const sp_api_request *r) {
    const sp_api_tool_choice_kind k = r->tool_choice.kind;
    return r->kind == SP_API_CHAT && (k == SP_TOOL_CHOICE_REQUIRED || k == SP_TOOL_CHOICE_NAMED) &&
           r->tools_json && (s->tool_format == SP_TOOLS_HERMES ||
                             s->tool_format == SP_TOOLS_LLAMA3);
}

static bool compile(sp_server *s, const char *kind_text, spindle_grammar_kind kind,
                    spindle_grammar **g, sp_api_error *e) {
    spindle_error err = {0};
    spindle_status st = sp_server_grammar(s, kind, kind_text, g, &err);
    if (st == SPINDLE_ERR_MEMORY)
        return sp_api_fail(e, 503, "server_error", "tools", NULL, "%s", err.message);
    if (st)
        return sp_api_bad(e, "tools", "the forced tool call's grammar: %s (the pointer is into "
                                      "the call object, whose arguments are a function's "
                                      "parameters; /anyOf/I: the I-th tool)", err.message);
    return true;
}

bool sp_server_compile_tool_grammar(sp_server *s, sp_api_request *r, bool in_think,
                                    sp_api_error *e) {
    if (!sp_server_tool_grammar_applies(s, r)) return true;
    cJSON *tools = cJSON_Parse(r->tools_json);
    const char *args_key = s->tool_format == SP_TOOLS_LLAMA3 ? "parameters" : "arguments";
    char *schema = cJSON_IsArray(tools) ? calls_schema(tools, &r->tool_choice, args_key) : NULL;
    cJSON_Delete(tools);
    if (!schema) return sp_api_fail(e, 503, "server_error", "tools", NULL, "out of memory");
    spindle_grammar *json = NULL, *full = NULL;
    bool ok = compile(s, schema, SPINDLE_GRAMMAR_JSON_SCHEMA, &json, e);
    free(schema);
    sp_strbuf gbnf = {0};
    /* Llama 3's JSON format has one call per reply. */
    bool single = r->tool_choice.single_call || s->tool_format == SP_TOOLS_LLAMA3;
    if (ok && !markup_grammar(spindle_grammar_gbnf(json), s->tool_format, single, in_think,
                              &gbnf))
        ok = sp_api_fail(e, 503, "server_error", "tools", NULL, "out of memory");
    spindle_grammar_free(json);
    if (ok) ok = compile(s, gbnf.p, SPINDLE_GRAMMAR_GBNF, &full, e);
    sp_strbuf_free(&gbnf);
    if (!ok) return false;
    /* The forced call replaces a response_format / grammar: that one
     * shapes a text answer, and this reply has none. */
    spindle_grammar_free(r->grammar);
    r->grammar = full;
    r->gen.grammar = full;
    return true;
}
