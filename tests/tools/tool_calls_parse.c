/* Harness of tests/server/test_tool_call_parsers.py: the server's reply
 * parser (src/server/tool_calls.h) and stream assembler (tool_stream.h)
 * over a reply text that a reference renderer produced.
 *
 *   tool_calls_parse --detect PROBE_FILE
 *       prints the format the probe rendering names
 *   tool_calls_parse --format NAME [--tokenizer DIR] [--no-tools]
 *                    [--no-reasoning] [--starts-in-reasoning] [--single] TEXT_FILE
 *       prints {"whole": REPLY, "stream": REPLY, "events_ok": bool} where
 *       REPLY is {"content", "reasoning_content", "tool_calls": [{"id",
 *       "name", "arguments"}]}: "whole" parses the text at once, "stream"
 *       joins the deltas of feeding it piece by piece (the real tokenizer's
 *       detokenized pieces with --tokenizer, else one byte at a time), and
 *       events_ok says each call's id and name came first, once. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"
#include "reply_join.h"
#include "spindle.h"

static cJSON *reply_json(const char *content, const char *reasoning, int n,
                         const char *const *ids, const char *const *names,
                         const char *const *args) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", content ? content : "");
    cJSON_AddStringToObject(o, "reasoning_content", reasoning ? reasoning : "");
    cJSON *calls = cJSON_AddArrayToObject(o, "tool_calls");
    for (int k = 0; k < n; k++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", ids[k]);
        cJSON_AddStringToObject(c, "name", names[k]);
        cJSON_AddStringToObject(c, "arguments", args[k] ? args[k] : "");
        cJSON_AddItemToArray(calls, c);
    }
    return o;
}

static cJSON *whole(const sp_reply_options *opt, const char *text, size_t len) {
    sp_reply_cursor st;
    sp_reply_cursor_init(&st, opt, 7);
    sp_reply_delta d;
    if (!sp_reply_cursor_next(&st, text, len, true, &d)) return NULL;
    const char *ids[REPLY_JOIN_MAX_CALLS], *names[REPLY_JOIN_MAX_CALLS], *args[REPLY_JOIN_MAX_CALLS];
    int n = d.parts.n_calls < REPLY_JOIN_MAX_CALLS ? d.parts.n_calls : REPLY_JOIN_MAX_CALLS;
    for (int k = 0; k < n; k++) {
        ids[k] = st.ids[k];
        names[k] = d.parts.calls[k].name;
        args[k] = d.parts.calls[k].arguments.p;
    }
    cJSON *o = reply_json(d.parts.content.p, d.parts.reasoning.p, n, ids, names, args);
    sp_reply_delta_free(&d);
    sp_reply_cursor_free(&st);
    return o;
}

/* The pieces: a detokenizer's over the real tokenizer's ids, or bytes. */
static int pieces(const char *tok_dir, const char *text, size_t len, size_t **ends) {
    *ends = malloc((len + 1) * sizeof **ends);
    int n = 0;
    spindle_tokenizer *tok = NULL;
    spindle_detokenizer *detok = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0, at = 0;
    if (!tok_dir || spindle_tokenizer_load(tok_dir, &tok, NULL) ||
        spindle_tokenizer_encode(tok, text, len, false, &ids, &n_ids, NULL) ||
        spindle_detokenizer_new(tok, false, &detok, NULL)) {
        for (size_t i = 1; i <= len; i++) (*ends)[n++] = i;
    } else {
        const char *piece;
        for (size_t k = 0; k <= n_ids; k++) {
            bool ok = k < n_ids ? !spindle_detokenizer_push(detok, ids[k], &piece, NULL)
                                : !spindle_detokenizer_flush(detok, &piece, NULL);
            at += ok ? spindle_detokenizer_piece_len(detok) : 0;
            if (at > len) at = len;
            (*ends)[n++] = at;
        }
    }
    spindle_free(ids);
    spindle_detokenizer_free(detok);
    spindle_tokenizer_free(tok);
    return n;
}

static cJSON *streamed(const sp_reply_options *opt, const char *tok_dir, const char *text,
                       size_t len, bool *ok) {
    size_t *ends;
    int n = pieces(tok_dir, text, len, &ends);
    sp_reply_cursor st;
    sp_reply_cursor_init(&st, opt, 7);
    reply_joined j = {0};
    bool parsed = true;
    for (int k = 0; k <= n; k++) {
        sp_reply_delta d;
        bool last = k == n;
        if (!sp_reply_cursor_next(&st, text, last ? len : ends[k], last, &d)) parsed = false;
        reply_join(&j, &d);
        sp_reply_delta_free(&d);
    }
    const char *args[REPLY_JOIN_MAX_CALLS];
    for (int k = 0; k < j.n_calls; k++) args[k] = j.args[k].p;
    cJSON *o = reply_json(j.content.p, j.reasoning.p, j.n_calls, (const char *const *)j.ids,
                          (const char *const *)j.names, args);
    *ok = parsed && !j.out_of_order;
    free(ends);
    reply_join_free(&j);
    sp_reply_cursor_free(&st);
    return o;
}

int main(int argc, char **argv) {
    sp_reply_options opt = {.tools = true, .reasoning = true};
    const char *tok_dir = NULL, *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--detect") && i + 1 < argc) {
            char *text = NULL;
            size_t len;
            if (sp_read_text_file(argv[++i], &text, &len, NULL)) return 2;
            printf("%s\n", sp_tool_format_name(sp_tool_format_detect(text)));
            free(text);
            return 0;
        }
        if (!strcmp(argv[i], "--format") && i + 1 < argc) {
            if (!sp_tool_format_from_name(argv[++i], &opt.format)) return 2;
        } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            tok_dir = argv[++i];
        } else if (!strcmp(argv[i], "--no-tools")) {
            opt.tools = false;
        } else if (!strcmp(argv[i], "--no-reasoning")) {
            opt.reasoning = false;
        } else if (!strcmp(argv[i], "--starts-in-reasoning")) {
            opt.starts_in_reasoning = true;
        } else if (!strcmp(argv[i], "--single")) {
            opt.single_call = true;
        } else {
            file = argv[i];
        }
    }
    char *text = NULL;
    size_t len = 0;
    if (!file || sp_read_text_file(file, &text, &len, NULL)) {
        fprintf(stderr, "usage: tool_calls_parse --format NAME [options] TEXT_FILE\n");
        return 2;
    }
    bool ok = false;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddItemToObject(out, "whole", whole(&opt, text, len));
    cJSON_AddItemToObject(out, "stream", streamed(&opt, tok_dir, text, len, &ok));
    cJSON_AddBoolToObject(out, "events_ok", ok);
    char *json = cJSON_PrintUnformatted(out);
    printf("%s\n", json);
    free(json);
    cJSON_Delete(out);
    free(text);
    return 0;
}
