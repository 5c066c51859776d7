/* Reply text -> content, reasoning and tool calls (tool_calls.h): format
 * detection, the shared scanners, the <think> block and the formats whose
 * calls are JSON after a marker (Hermes, Llama 3, Mistral). Harmony and
 * Gemma are in tool_formats.c.
 * Fuzzed by tests/fuzz/fuzz_reply_parse.c (a partial parse must be a prefix
 * of the final one). */
#include "server/tool_parse.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char *const format_names[SP_TOOLS_N_FORMATS] = {
    "hermes", "llama3", "mistral", "harmony", "gemma"};

const char *sp_tool_format_name(sp_tool_format f) {
    return f >= 0 && f < SP_TOOLS_N_FORMATS ? format_names[f] : "hermes";
}

bool sp_tool_format_from_name(const char *name, sp_tool_format *out) {
    for (int f = 0; f < SP_TOOLS_N_FORMATS; f++)
        if (name && strcmp(name, format_names[f]) == 0) {
            *out = (sp_tool_format)f;
            return true;
        }
    return false;
}

/* The id has Mistral's nine alphanumerics, which its templates insist on. */
const char sp_tool_probe_messages[] =
    "[{\"role\":\"user\",\"content\":\"hi\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"abcDEF123\","
    "\"type\":\"function\",\"function\":{\"name\":\"" SP_TOOL_PROBE_NAME "\","
    "\"arguments\":{\"x\":1}}}]}]";
const char sp_tool_probe_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"" SP_TOOL_PROBE_NAME "\","
    "\"description\":\"probe\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}}}]";

sp_tool_format sp_tool_format_detect(const char *r) {
    if (!r) return SP_TOOLS_HERMES;
    if (strstr(r, "to=functions." SP_TOOL_PROBE_NAME)) return SP_TOOLS_HARMONY;
    if (strstr(r, "<|tool_call>call:" SP_TOOL_PROBE_NAME)) return SP_TOOLS_GEMMA;
    if (strstr(r, "[TOOL_CALLS]")) return SP_TOOLS_MISTRAL;
    if (strstr(r, "<tool_call>")) return SP_TOOLS_HERMES;
    if (strstr(r, "<|python_tag|>") || strstr(r, "{\"name\": \"" SP_TOOL_PROBE_NAME))
        return SP_TOOLS_LLAMA3;
    return SP_TOOLS_HERMES;
}

bool sp_tool_format_needs_special(sp_tool_format f) { return f != SP_TOOLS_HERMES; }

/* ------------------------------------------------------------ scanners */

static bool is_ws(char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; }

size_t sp_tp_skip_ws(const char *s, size_t i, size_t n) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

bool sp_tp_starts(const char *s, size_t i, size_t n, const char *lit) {
    size_t l = strlen(lit);
    return n - i >= l && memcmp(s + i, lit, l) == 0;
}

size_t sp_tp_find(const char *s, size_t i, size_t n, const char *lit) {
    size_t l = strlen(lit);
    for (; i + l <= n; i++)
        if (s[i] == lit[0] && memcmp(s + i, lit, l) == 0) return i;
    return n;
}

size_t sp_tp_marker_tail(const char *s, size_t i, size_t n, const char *const *markers) {
    size_t best = 0;
    for (; *markers; markers++) {
        size_t l = strlen(*markers);
        for (size_t k = l - 1; k > best; k--)
            if (k <= n - i && memcmp(s + n - k, *markers, k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

static size_t string_end(const char *s, size_t i, size_t n, bool *complete) {
    for (i++; i < n; i++) {
        if (s[i] == '\\') i++;
        else if (s[i] == '"') {
            *complete = true;
            return i + 1;
        }
    }
    *complete = false;
    return n;
}

size_t sp_tp_json_end(const char *s, size_t i, size_t n, bool final, bool *complete) {
    *complete = false;
    if (i >= n) return n;
    if (s[i] == '"') return string_end(s, i, n, complete);
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        for (; i < n; i++) {
            if (s[i] == '"') {
                bool done;
                i = string_end(s, i, n, &done) - 1;
                if (!done) return n;
            } else if (s[i] == '{' || s[i] == '[') {
                depth++;
            } else if ((s[i] == '}' || s[i] == ']') && --depth == 0) {
                *complete = true;
                return i + 1;
            }
        }
        return n;
    }
    size_t e = i;
    while (e < n && ((s[e] && strchr("+-.eE", s[e])) || (s[e] >= '0' && s[e] <= '9') ||
                     (s[e] >= 'a' && s[e] <= 'z')))
        e++;
    *complete = e > i && (e < n || final);
    return e;
}

/* ------------------------------------------------------------ output */

void sp_tp_content(sp_reply_ctx *c, size_t i, size_t e, bool before_call) {
    if (c->in_calls) return;
    sp_strbuf *b = &c->out->content;
    if (b->len == 0 && c->after_markup) i = sp_tp_skip_ws(c->s, i, e);
    bool open_end = !c->final && e == c->n;
    if (before_call || open_end)
        while (e > i && is_ws(c->s[e - 1])) e--;
    if (e > i) sp_strbuf_add(b, c->s + i, e - i);
}

sp_tool_call *sp_tp_new_call(sp_reply_ctx *c, const char *name, size_t name_len) {
    sp_reply_parts *p = c->out;
    if (c->calls_closed) return NULL;
    if (p->n_calls == p->cap_calls) {
        int cap = p->cap_calls ? p->cap_calls * 2 : 4;
        sp_tool_call *calls = realloc(p->calls, (size_t)cap * sizeof *calls);
        if (!calls) {
            p->oom = true;
            return NULL;
        }
        p->calls = calls;
        p->cap_calls = cap;
    }
    sp_tool_call *call = &p->calls[p->n_calls];
    memset(call, 0, sizeof *call);
    call->name = malloc(name_len + 1);
    if (!call->name) {
        p->oom = true;
        return NULL;
    }
    memcpy(call->name, name, name_len);
    call->name[name_len] = '\0';
    p->n_calls++;
    return call;
}

/* The JSON string s[i..e) decoded (malloc'd), or NULL. */
static char *json_string(const char *s, size_t i, size_t e) {
    cJSON *v = cJSON_ParseWithLength(s + i, e - i);
    char *out = cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
    cJSON_Delete(v);
    return out;
}

/* A syntax error at i: the call ends there (kept when it has its name). */
static sp_obj_status object_bad(sp_obj_call *o, size_t i) {
    o->end = i;
    return SP_OBJ_BAD;
}

sp_obj_status sp_tp_call_object(const char *s, size_t i, size_t n, bool final,
                                sp_obj_call *o) {
    memset(o, 0, sizeof *o);
    if (i >= n) return SP_OBJ_PARTIAL;
    if (s[i] != '{') return SP_OBJ_BAD;
    for (i = sp_tp_skip_ws(s, i + 1, n);; i = sp_tp_skip_ws(s, i + 1, n)) {
        if (i >= n) return SP_OBJ_PARTIAL;
        if (s[i] == '}' && !o->name && !o->has_args) break;  /* {} */
        if (s[i] != '"') return object_bad(o, i);
        bool done;
        size_t key_at = i + 1, key_end = string_end(s, i, n, &done);
        if (!done) return SP_OBJ_PARTIAL;
        size_t key_len = key_end - 1 - key_at;
        i = sp_tp_skip_ws(s, key_end, n);
        if (i >= n) return SP_OBJ_PARTIAL;
        if (s[i] != ':') return object_bad(o, i);
        i = sp_tp_skip_ws(s, i + 1, n);
        if (i >= n) return SP_OBJ_PARTIAL;
        size_t v_end = sp_tp_json_end(s, i, n, final, &done);
        if (key_len == 4 && memcmp(s + key_at, "name", 4) == 0) {
            if (s[i] != '"') return object_bad(o, i);
            if (done && !o->name && !(o->name = json_string(s, i, v_end)))
                return object_bad(o, i);
        } else if ((key_len == 9 && memcmp(s + key_at, "arguments", 9) == 0) ||
                   (key_len == 10 && memcmp(s + key_at, "parameters", 10) == 0)) {
            /* The first one wins, as for the name: a later duplicate would
             * replace arguments already streamed. */
            if (o->has_args) goto next;
            o->has_args = true;
            o->args_at = i;
            o->args_end = v_end;
        }
    next:
        if (!done) return SP_OBJ_PARTIAL;
        i = sp_tp_skip_ws(s, v_end, n);
        if (i >= n) return SP_OBJ_PARTIAL;
        if (s[i] == '}') break;
        if (s[i] != ',') return object_bad(o, i);
    }
    o->end = i + 1;
    return SP_OBJ_DONE;
}

void sp_tp_add_object_call(sp_reply_ctx *c, const sp_obj_call *o, sp_obj_status st) {
    if (!o->name) return;
    sp_tool_call *call = sp_tp_new_call(c, o->name, strlen(o->name));
    if (!call) return;
    if (o->has_args) sp_strbuf_add(&call->arguments, c->s + o->args_at, o->args_end - o->args_at);
    else if (st != SP_OBJ_PARTIAL || c->final) sp_strbuf_add(&call->arguments, "{}", 2);
    if (st != SP_OBJ_PARTIAL && c->opt->single_call) c->calls_closed = true;
}

void sp_tp_skip_close(sp_reply_ctx *c, size_t *i, const char *close, bool *stop) {
    *i = sp_tp_skip_ws(c->s, *i, c->n);
    size_t left = c->n - *i, l = strlen(close);
    if (left >= l && memcmp(c->s + *i, close, l) == 0) *i += l;
    else if (!c->final && left < l && memcmp(c->s + *i, close, left) == 0) *stop = true;
}

/* ------------------------------------------------------------ formats */

/* One object call from i; on success *i moves past it (and past `close`,
 * when given and present). False when the text there is no call. */
static bool object_call(sp_reply_ctx *c, size_t *i, const char *close, bool *stop) {
    sp_obj_call o;
    size_t at = sp_tp_skip_ws(c->s, *i, c->n);
    sp_obj_status st = sp_tp_call_object(c->s, at, c->n, c->final, &o);
    /* Once its name is read, a call stays one: a stream has sent it. */
    bool ok = o.name || st == SP_OBJ_PARTIAL;
    if (ok) sp_tp_add_object_call(c, &o, st);
    free(o.name);
    if (!ok) return false;
    if (st == SP_OBJ_PARTIAL) {
        *stop = true;
        return true;
    }
    *i = o.end;
    if (close && st == SP_OBJ_DONE) sp_tp_skip_close(c, i, close, stop);
    return true;
}

/* Mistral after [TOOL_CALLS]: a JSON array of call objects, or
 * NAME[CALL_ID]id[ARGS]{json} (the id optional). */
static bool mistral_call(sp_reply_ctx *c, size_t *i, bool *stop) {
    const char *s = c->s;
    size_t n = c->n, at = sp_tp_skip_ws(s, *i, n);
    if (at < n && s[at] == '[') {
        for (at = sp_tp_skip_ws(s, at + 1, n); at < n && s[at] != ']';) {
            if (!object_call(c, &at, NULL, stop)) return false;
            if (*stop) return true;
            if (at < n && s[at] == ',') at = sp_tp_skip_ws(s, at + 1, n);
        }
        if (at >= n && !c->final) *stop = true;
        *i = at < n ? at + 1 : n;
        return true;
    }
    size_t args = sp_tp_find(s, at, n, "[ARGS]");
    if (args == n) {
        *stop = !c->final;
        return !c->final;
    }
    size_t name_end = sp_tp_find(s, at, args, "[CALL_ID]");
    sp_tool_call *call = sp_tp_new_call(c, s + at, name_end - at);
    size_t v = sp_tp_skip_ws(s, args + 6, n);
    bool done;
    size_t e = sp_tp_json_end(s, v, n, c->final, &done);
    if (call) sp_strbuf_add(&call->arguments, s + v, e - v);
    if (!done && !c->final) *stop = true;
    if (done && c->opt->single_call) c->calls_closed = true;
    *i = e;
    return true;
}

/* The call after `marker`; false when it is not one (the marker is then
 * kept as content). */
static bool call_after(sp_reply_ctx *c, const char *marker, size_t *i, bool *stop) {
    switch (c->opt->format) {
    case SP_TOOLS_MISTRAL: return mistral_call(c, i, stop);
    case SP_TOOLS_GEMMA: sp_tp_parse_gemma_call(c, i, stop); return true;
    case SP_TOOLS_LLAMA3:
        if (strcmp(marker, "<|python_tag|>") == 0) return object_call(c, i, "<|eom_id|>", stop);
        return object_call(c, i, NULL, stop);
    default: return object_call(c, i, "</tool_call>", stop);
    }
}

static const char *const hermes_markers[] = {"<tool_call>", NULL};
static const char *const llama3_markers[] = {"<|python_tag|>", NULL};
static const char *const mistral_markers[] = {"[TOOL_CALLS]", NULL};
/* The first marker opens a call; the others are held back too, as text
 * that the parse may cut (Gemma's turn ends at <|tool_response>). */
static const char *const gemma_markers[] = {"<|tool_call>", "<|tool_response>", NULL};

static const char *const *markers_of(sp_tool_format f) {
    switch (f) {
    case SP_TOOLS_LLAMA3: return llama3_markers;
    case SP_TOOLS_MISTRAL: return mistral_markers;
    case SP_TOOLS_GEMMA: return gemma_markers;
    default: return hermes_markers;
    }
}

/* Content with calls after markers, from i to the end. */
static void parse_marked(sp_reply_ctx *c, size_t i) {
    const char *const *markers = markers_of(c->opt->format);
    const char *marker = markers[0];
    /* Llama 3 writes a call as the whole reply, a bare JSON object (or
     * several, separated by ';'). */
    if (c->opt->format == SP_TOOLS_LLAMA3) {
        size_t at = sp_tp_skip_ws(c->s, i, c->n);
        bool stop = false;
        int calls = c->out->n_calls;
        if (at < c->n && c->s[at] == '{') c->in_calls = c->opt->calls_only;
        while (at < c->n && c->s[at] == '{' && object_call(c, &at, NULL, &stop) && !stop) {
            at = sp_tp_skip_ws(c->s, at, c->n);
            if (at < c->n && c->s[at] == ';') at = sp_tp_skip_ws(c->s, at + 1, c->n);
        }
        if (stop) return;
        if (c->out->n_calls > calls) {
            i = at;
            c->after_markup = true;
        }
    }
    while (i < c->n) {
        size_t m = sp_tp_find(c->s, i, c->n, marker);
        if (m == c->n) {
            /* A forced reply that the token limit cut inside a marker
             * holds it back for good: it is markup, not content. */
            size_t hold = c->final && !c->opt->calls_only
                              ? 0 : sp_tp_marker_tail(c->s, i, c->n, markers);
            sp_tp_content(c, i, c->n - hold, hold > 0);
            return;
        }
        sp_tp_content(c, i, m, true);
        c->in_calls = c->opt->calls_only;
        size_t after = m + strlen(marker);
        bool stop = false;
        if (!call_after(c, marker, &after, &stop)) {
            sp_tp_content(c, m, after = m + strlen(marker), false);
        }
        if (stop) return;
        c->after_markup = true;
        i = sp_tp_skip_ws(c->s, after, c->n);
    }
}

/* The reasoning block at the start: <think>...</think> (Gemma:
 * <|channel>thought ... <channel|>); returns where the rest begins. */
static size_t parse_think(sp_reply_ctx *c) {
    bool gemma = c->opt->format == SP_TOOLS_GEMMA;
    const char *open = gemma ? "<|channel>thought" : "<think>";
    const char *close = gemma ? "<channel|>" : "</think>";
    const char *s = c->s;
    size_t n = c->n, at = sp_tp_skip_ws(s, 0, n);
    if (!c->opt->starts_in_reasoning) {
        if (!sp_tp_starts(s, at, n, open)) {
            size_t left = n - at;
            /* The start of the opening tag: wait for the rest. */
            if (!c->final && left > 0 && left < strlen(open) && memcmp(s + at, open, left) == 0)
                return n;
            return 0;
        }
        at += strlen(open);
    }
    at = sp_tp_skip_ws(s, at, n);
    size_t e = sp_tp_find(s, at, n, close), rest = e == n ? n : e + strlen(close);
    if (e == n && !c->final) {
        /* (and the turn end where the parse cuts the text) */
        const char *closes[] = {close, gemma && c->opt->tools ? "<|tool_response>" : NULL, NULL};
        e -= sp_tp_marker_tail(s, at, n, closes);
    }
    while (e > at && is_ws(s[e - 1])) e--;
    if (e > at) sp_strbuf_add(&c->out->reasoning, s + at, e - at);
    c->after_markup = true;
    return rest;
}

bool sp_reply_parse(const sp_reply_options *opt, const char *text, size_t len, bool final,
                    sp_reply_parts *out) {
    sp_reply_ctx c = {.opt = opt, .s = text ? text : "", .n = text ? len : 0,
                      .final = final, .out = out};
    if (opt->format == SP_TOOLS_HARMONY) {
        sp_tp_parse_harmony(&c);
    } else {
        /* Gemma 4 ends a turn of calls by opening the tool's response. */
        if (opt->format == SP_TOOLS_GEMMA && opt->tools)
            c.n = sp_tp_find(c.s, 0, c.n, "<|tool_response>");
        size_t i = opt->reasoning ? parse_think(&c) : 0;
        if (opt->tools) parse_marked(&c, i);
        else if (i < c.n) sp_tp_content(&c, i, c.n, false);
    }
    out->oom |= out->content.oom || out->reasoning.oom;
    for (int k = 0; k < out->n_calls; k++) out->oom |= out->calls[k].arguments.oom;
    return !out->oom;
}

void sp_reply_parts_free(sp_reply_parts *p) {
    sp_strbuf_free(&p->content);
    sp_strbuf_free(&p->reasoning);
    for (int k = 0; k < p->n_calls; k++) {
        free(p->calls[k].name);
        sp_strbuf_free(&p->calls[k].arguments);
    }
    free(p->calls);
    memset(p, 0, sizeof *p);
}
