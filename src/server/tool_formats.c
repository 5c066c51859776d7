/* The reply formats that are not JSON after a marker: gpt-oss's harmony
 * messages and Gemma 4's call syntax (tool_parse.h). */
#include "server/tool_parse.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ harmony */

static const char *const harmony_ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>",
                                           NULL};

static size_t first_end(const char *s, size_t i, size_t n) {
    size_t best = n;
    for (const char *const *m = harmony_ends; *m; m++) {
        size_t at = sp_tp_find(s, i, best, *m);
        if (at < best) best = at;
    }
    return best;
}

/* The word after `key` in the header s[i..e) (name characters up to a
 * space or a token), or an empty span. */
static size_t header_word(const char *s, size_t i, size_t e, const char *key, size_t *at) {
    size_t k = sp_tp_find(s, i, e, key);
    if (k == e) return 0;
    *at = k + strlen(key);
    size_t w = *at;
    while (w < e && s[w] != ' ' && s[w] != '<' && s[w] != '\n') w++;
    return w - *at;
}

/* One message body s[b..e) by its header s[h..m). */
static void harmony_message(sp_reply_ctx *c, size_t h, size_t m, size_t b, size_t e,
                            bool open) {
    const char *s = c->s;
    size_t name_at = 0, channel_at = 0;
    size_t name_len = header_word(s, h, m, "to=functions.", &name_at);
    size_t channel_len = header_word(s, h, m, "<|channel|>", &channel_at);
    if (name_len) {
        if (!c->opt->tools) return;
        sp_tool_call *call = sp_tp_new_call(c, s + name_at, name_len);
        b = sp_tp_skip_ws(s, b, e);
        if (call && e > b) sp_strbuf_add(&call->arguments, s + b, e - b);
        if (call && !open && c->opt->single_call) c->calls_closed = true;
        c->after_markup = true;
        return;
    }
    bool analysis = channel_len == 8 && memcmp(s + channel_at, "analysis", 8) == 0;
    if (analysis && c->opt->reasoning) {
        sp_strbuf_add(&c->out->reasoning, s + b, e - b);
        c->after_markup = true;
    } else {
        sp_tp_content(c, b, e, false);
    }
}

/* Messages as <|channel|>C<|message|>BODY<|end|><|start|>assistant..., the
 * first one's <|start|>assistant written by the prompt. */
void sp_tp_parse_harmony(sp_reply_ctx *c) {
    const char *s = c->s;
    size_t n = c->n, i = 0;
    while (i < n) {
        size_t m = sp_tp_find(s, i, n, "<|message|>");
        if (m == n) {
            /* A header still arriving, or (final) text outside any message. */
            if (c->final && sp_tp_find(s, i, n, "<|") == n) sp_tp_content(c, i, n, false);
            return;
        }
        size_t b = m + strlen("<|message|>"), e = first_end(s, b, n);
        bool open = e == n;
        size_t body_end = e;
        if (open && !c->final) body_end -= sp_tp_marker_tail(s, b, n, harmony_ends);
        harmony_message(c, i, m, b, body_end, open);
        if (open) return;
        i = e;
        for (const char *const *end = harmony_ends; *end; end++)
            if (sp_tp_starts(s, i, n, *end) && strcmp(*end, "<|start|>") != 0) {
                i += strlen(*end);
                break;
            }
    }
}

/* ------------------------------------------------------------ Gemma 4 */

#define GEMMA_QUOTE "<|\"|>"
#define GEMMA_MAX_DEPTH 64

static cJSON *gemma_value(const char *s, size_t *i, size_t e, int depth);

/* A key: <|"|>quoted<|"|> or bare up to ':'. */
static char *gemma_key(const char *s, size_t *i, size_t e) {
    size_t at = *i, end;
    if (sp_tp_starts(s, at, e, GEMMA_QUOTE)) {
        at += strlen(GEMMA_QUOTE);
        end = sp_tp_find(s, at, e, GEMMA_QUOTE);
        if (end == e) return NULL;
        *i = end + strlen(GEMMA_QUOTE);
    } else {
        end = at;
        while (end < e && s[end] != ':') end++;
        *i = end;
    }
    return strndup(s + at, end - at);
}

/* Past the ',' after an item; false when neither it nor `close` follows. */
static bool next_item(const char *s, size_t *at, size_t e, char close) {
    *at = sp_tp_skip_ws(s, *at, e);
    if (*at < e && s[*at] == ',') {
        *at = sp_tp_skip_ws(s, *at + 1, e);
        return true;
    }
    return *at < e && s[*at] == close;
}

static bool is_delimiter(char ch) { return ch == ',' || ch == '}' || ch == ']'; }

static cJSON *gemma_object(const char *s, size_t *i, size_t e, int depth) {
    cJSON *o = cJSON_CreateObject();
    size_t at = sp_tp_skip_ws(s, *i + 1, e);
    while (o && at < e && s[at] != '}') {
        char *key = gemma_key(s, &at, e);
        at = sp_tp_skip_ws(s, at, e);
        cJSON *v = key && at < e && s[at] == ':' ? (at++, gemma_value(s, &at, e, depth + 1))
                                                : NULL;
        if (!v) {
            free(key);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(o, key, v);
        free(key);
        if (!next_item(s, &at, e, '}')) {
            cJSON_Delete(o);
            return NULL;
        }
    }
    if (at >= e) {
        cJSON_Delete(o);
        return NULL;
    }
    *i = at + 1;
    return o;
}

static cJSON *gemma_array(const char *s, size_t *i, size_t e, int depth) {
    cJSON *a = cJSON_CreateArray();
    size_t at = sp_tp_skip_ws(s, *i + 1, e);
    while (a && at < e && s[at] != ']') {
        cJSON *v = gemma_value(s, &at, e, depth + 1);
        if (!v) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, v);
        if (!next_item(s, &at, e, ']')) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    if (at >= e) {
        cJSON_Delete(a);
        return NULL;
    }
    *i = at + 1;
    return a;
}

/* A bare scalar: the template writes Python's str() of it. */
static cJSON *gemma_scalar(const char *s, size_t *i, size_t e) {
    size_t at = *i, end = at;
    while (end < e && !is_delimiter(s[end])) end++;
    *i = end;
    while (end > at && (s[end - 1] == ' ' || s[end - 1] == '\n' || s[end - 1] == '\t')) end--;
    char *word = strndup(s + at, end - at);
    if (!word) return NULL;
    cJSON *v;
    char *rest = NULL;
    double num = word[0] ? strtod(word, &rest) : 0;
    if (!strcmp(word, "true") || !strcmp(word, "True")) v = cJSON_CreateTrue();
    else if (!strcmp(word, "false") || !strcmp(word, "False")) v = cJSON_CreateFalse();
    else if (!strcmp(word, "null") || !strcmp(word, "None")) v = cJSON_CreateNull();
    else if (rest && *rest == '\0') v = cJSON_CreateNumber(num);
    else v = cJSON_CreateString(word);
    free(word);
    return v;
}

static cJSON *gemma_value(const char *s, size_t *i, size_t e, int depth) {
    size_t at = sp_tp_skip_ws(s, *i, e);
    if (at >= e || depth > GEMMA_MAX_DEPTH) return NULL;
    if (sp_tp_starts(s, at, e, GEMMA_QUOTE)) {
        at += strlen(GEMMA_QUOTE);
        size_t end = sp_tp_find(s, at, e, GEMMA_QUOTE);
        if (end == e) return NULL;
        char *text = strndup(s + at, end - at);
        cJSON *v = text ? cJSON_CreateString(text) : NULL;
        free(text);
        *i = end + strlen(GEMMA_QUOTE);
        return v;
    }
    *i = at;
    if (s[at] == '{') return gemma_object(s, i, e, depth);
    if (s[at] == '[') return gemma_array(s, i, e, depth);
    return gemma_scalar(s, i, e);
}

/* Whether the {...} from i closes (quoted strings skipped); *end past it. */
static bool gemma_end(const char *s, size_t i, size_t n, size_t *end) {
    int depth = 0;
    *end = n;
    for (; i < n; i++) {
        if (sp_tp_starts(s, i, n, GEMMA_QUOTE)) {
            size_t q = sp_tp_find(s, i + strlen(GEMMA_QUOTE), n, GEMMA_QUOTE);
            if (q == n) return false;
            i = q + strlen(GEMMA_QUOTE) - 1;
        } else if (s[i] == '{' || s[i] == '[') {
            depth++;
        } else if ((s[i] == '}' || s[i] == ']') && --depth == 0) {
            *end = i + 1;
            return true;
        }
    }
    return false;
}

/* After <|tool_call>: call:NAME{key:value,...}<tool_call|>. The arguments
 * come whole, once the braces close (they are converted to JSON). */
void sp_tp_parse_gemma_call(sp_reply_ctx *c, size_t *i, bool *stop) {
    const char *s = c->s;
    size_t n = c->n, at = sp_tp_skip_ws(s, *i, n);
    if (sp_tp_starts(s, at, n, "call:")) at += 5;
    size_t brace = at;
    while (brace < n && s[brace] != '{' && s[brace] != '<') brace++;
    if (brace == n || s[brace] != '{') {
        *stop = !c->final;
        *i = brace;
        return;
    }
    sp_tool_call *call = sp_tp_new_call(c, s + at, brace - at);
    size_t end;
    bool closed = gemma_end(s, brace, n, &end);
    if (!closed && !c->final) {
        *stop = true;
        return;
    }
    size_t v = brace;
    cJSON *args = closed ? gemma_value(s, &v, end, 0) : NULL;
    char *json = args ? cJSON_PrintUnformatted(args) : NULL;
    cJSON_Delete(args);
    if (call && json) sp_strbuf_add(&call->arguments, json, strlen(json));
    else if (call) sp_strbuf_add(&call->arguments, s + brace, end - brace);
    free(json);
    if (c->opt->single_call) c->calls_closed = true;
    *i = end;
    sp_tp_skip_close(c, i, "<tool_call|>", stop);
}
