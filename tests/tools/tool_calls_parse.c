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
#include "server/tool_stream.h"
#include "spindle.h"

typedef struct joined {
    sp_strbuf content, reasoning;
    sp_strbuf args[16];
    char names[16][128], ids[16][SP_TOOL_ID_SIZE];
    int n_calls;
    bool ok;
} joined;

static void join(joined *j, const sp_reply_delta *d) {
    sp_strbuf_add(&j->content, d->content, d->content_len);
    sp_strbuf_add(&j->reasoning, d->reasoning, d->reasoning_len);
    for (int k = 0; k < d->n_tools; k++) {
        const sp_tool_delta *t = &d->tools[k];
        if (t->index >= 16) {
            j->ok = false;
            continue;
        }
        if (t->name) {
            if (t->index != j->n_calls || !t->id) j->ok = false;
            snprintf(j->names[t->index], sizeof j->names[0], "%s", t->name);
            snprintf(j->ids[t->index], sizeof j->ids[0], "%s", t->id);
            j->n_calls = t->index + 1;
        } else if (t->index >= j->n_calls || t->id) {
            j->ok = false;  /* arguments before the call's name */
        }
        sp_strbuf_add(&j->args[t->index], t->arguments, t->arguments_len);
    }
}

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
    const char *ids[16], *names[16], *args[16];
    int n = d.parts.n_calls < 16 ? d.parts.n_calls : 16;
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
    joined j = {.ok = true};
    for (int k = 0; k <= n; k++) {
        sp_reply_delta d;
        bool last = k == n;
        if (!sp_reply_cursor_next(&st, text, last ? len : ends[k], last, &d)) j.ok = false;
        join(&j, &d);
        sp_reply_delta_free(&d);
    }
    const char *ids[16], *names[16], *args[16];
    for (int k = 0; k < j.n_calls; k++) {
        ids[k] = j.ids[k];
        names[k] = j.names[k];
        args[k] = j.args[k].p;
    }
    cJSON *o = reply_json(j.content.p, j.reasoning.p, j.n_calls, ids, names, args);
    *ok = j.ok;
    free(ends);
    sp_strbuf_free(&j.content);
    sp_strbuf_free(&j.reasoning);
    for (int k = 0; k < 16; k++) sp_strbuf_free(&j.args[k]);
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
