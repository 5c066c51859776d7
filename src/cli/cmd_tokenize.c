/* `spindle tokenize` and `spindle detokenize`: text <-> ids with a model's
 * tokenizer, one-shot or as JSON lines for batch use by the tests.
 *
 *   spindle tokenize -m DIR [--text T | stdin] [--no-special] [--json|--jsonl]
 *   spindle detokenize -m DIR [--ids 1,2,3 | stdin] [--skip-special]
 *                      [--json|--jsonl] [--stream]
 *
 * --jsonl: one JSON value per input line (a string for tokenize, an array
 * of ids for detokenize), one JSON object per output line, in order.
 * --stream: run the streaming detokenizer and print the pieces (a JSON
 * string per line; with --jsonl, one JSON array of pieces per input). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "base/utf8.h"
#include "cli/commands.h"
#include "spindle.h"

typedef struct opts {
    const char *model, *text, *ids;
    bool no_special, skip_special, json, jsonl, stream;
} opts;

static int fail(const char *cmd, const char *msg) {
    fprintf(stderr, "spindle %s: %s\n", cmd, msg);
    return 1;
}

static int fail_err(const char *cmd, const spindle_error *e) {
    return fail(cmd, e->message[0] ? e->message : spindle_status_name(e->status));
}

static const char *tokenize_usage =
    "usage: spindle tokenize -m DIR [--text T | stdin] [--no-special] [--json | --jsonl]\n"
    "  -m, --model DIR  tokenizer or model directory, .gguf file or repo id\n"
    "  --text T         the text (default: all of stdin)\n"
    "  --no-special     do not add the post-processor's special tokens\n"
    "  --json           print {\"ids\": [...]}\n"
    "  --jsonl          one JSON string per input line, one object per output line\n";

static const char *detokenize_usage =
    "usage: spindle detokenize -m DIR [--ids 1,2,3 | stdin] [--skip-special] [--json | --jsonl]\n"
    "                          [--stream]\n"
    "  -m, --model DIR  tokenizer or model directory, .gguf file or repo id\n"
    "  --ids IDS        comma-separated ids or a JSON array (default: stdin)\n"
    "  --skip-special   leave special tokens out of the text\n"
    "  --json           print {\"text\": ...}\n"
    "  --jsonl          one JSON array of ids per input line, one object per output line\n"
    "  --stream         run the streaming detokenizer and print its pieces\n";

/* 0: parsed; -1: help printed; else the exit status (a line said why). */
static int parse_opts(int argc, char **argv, opts *o, bool tokenize) {
    memset(o, 0, sizeof *o);
    const char *cmd = tokenize ? "tokenize" : "detokenize";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (sp_arg_is_help(a)) {
            fputs(tokenize ? tokenize_usage : detokenize_usage, stdout);
            return -1;
        }
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) o->model = argv[++i];
        else if (tokenize && !strcmp(a, "--text") && has_val) o->text = argv[++i];
        else if (!tokenize && !strcmp(a, "--ids") && has_val) o->ids = argv[++i];
        else if (tokenize && !strcmp(a, "--no-special")) o->no_special = true;
        else if (!tokenize && !strcmp(a, "--skip-special")) o->skip_special = true;
        else if (!tokenize && !strcmp(a, "--stream")) o->stream = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--jsonl")) o->jsonl = true;
        else return sp_arg_unknown(cmd, a);
    }
    if (!o->model) return fail(cmd, "missing -m DIR");
    return 0;
}

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) { free(buf); return NULL; }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, stdin);
        n += r;
        if (r == 0) break;
    }
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

/* JSON string escaping that keeps UTF-8 as is. */
static void put_json_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { putchar('\\'); putchar(c); }
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7F) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static int hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

/* Decode a JSON string literal spanning the whole line (our own parser, so
 * that \u0000 survives and lone surrogates become U+FFFD). Decodes in place
 * into `out` (at most n bytes). Returns false when malformed. */
static bool parse_json_line_string(const char *s, size_t n, char *out, size_t *out_len) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
    while (n && (*s == ' ' || *s == '\t')) { s++; n--; }
    if (n < 2 || s[0] != '"' || s[n - 1] != '"') return false;
    size_t o = 0;
    for (size_t i = 1; i + 1 < n;) {
        char c = s[i];
        if (c != '\\') { out[o++] = c; i++; continue; }
        if (i + 2 >= n) return false;
        char e = s[i + 1];
        i += 2;
        switch (e) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            if (i + 4 > n - 1) return false;
            int v = hex4(s + i);
            if (v < 0) return false;
            i += 4;
            uint32_t cp = (uint32_t)v;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= n - 1 && s[i] == '\\' && s[i + 1] == 'u') {
                int lo = hex4(s + i + 2);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
            o += sp_utf8_encode(cp, out + o);
            break;
        }
        default: return false;
        }
    }
    *out_len = o;
    return true;
}

/* What both commands hold while they run: the tokenizer and, when the
 * input was not given as an option, standard input. */
typedef struct session {
    spindle_tokenizer *tok;
    char *input;
    size_t len;
} session;

/* Loads the tokenizer, reads stdin when `from_stdin`, and block-buffers
 * stdout for the batch modes; 0 or the exit code (nothing left open). */
static int session_open(const char *cmd, const opts *o, bool from_stdin,
                        session *s) {
    static char outbuf[1 << 16];
    spindle_error err = {0};
    memset(s, 0, sizeof *s);
    if (spindle_tokenizer_load(o->model, &s->tok, &err)) return fail_err(cmd, &err);
    if (from_stdin && !(s->input = read_stdin(&s->len))) {
        spindle_tokenizer_free(s->tok);
        return fail(cmd, "cannot read standard input");
    }
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    return 0;
}

static int session_close(session *s, int rc) {
    fflush(stdout);
    free(s->input);
    spindle_tokenizer_free(s->tok);
    return rc;
}

/* The next non-blank line of the --jsonl input after *pos (which it
 * advances), numbered from 1 in *lineno; false at the end. */
static bool next_line(session *s, char **pos, size_t *lineno, char **line,
                      size_t *ll) {
    if (!s->input) return false; /* the value came as an option */
    char *end = s->input + s->len;
    while (*pos < end) {
        char *nl = memchr(*pos, '\n', (size_t)(end - *pos));
        *line = *pos;
        *ll = nl ? (size_t)(nl - *pos) : (size_t)(end - *pos);
        *pos += *ll + 1;
        ++*lineno;
        if (!(*ll == 0 || (*ll == 1 && (*line)[0] == '\r'))) return true;
    }
    return false;
}

static void print_ids(const int32_t *ids, size_t n, bool json) {
    if (json) fputs("{\"ids\":[", stdout);
    for (size_t i = 0; i < n; i++) {
        if (i) putchar(json ? ',' : ' ');
        printf("%d", (int)ids[i]);
    }
    fputs(json ? "]}\n" : "\n", stdout);
}

int sp_cmd_tokenize(int argc, char **argv) {
    const char *cmd = argc > 0 ? argv[0] : "tokenize";
    opts o;
    session s;
    int rc;
    if ((rc = parse_opts(argc, argv, &o, true))) return rc < 0 ? 0 : rc;
    if ((rc = session_open(cmd, &o, !o.text, &s))) return rc;
    spindle_error err = {0};
    if (!o.jsonl) {
        const char *t = o.text ? o.text : s.input;
        size_t n = o.text ? strlen(o.text) : s.len;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (spindle_tokenizer_encode(s.tok, t, n, !o.no_special, &ids, &n_ids, &err)) rc = fail_err(cmd, &err);
        else print_ids(ids, n_ids, o.json);
        spindle_free(ids);
    } else {
        char *pos = s.input, *line;
        size_t lineno = 0, ll, tl;
        while (!rc && next_line(&s, &pos, &lineno, &line, &ll)) {
            if (!parse_json_line_string(line, ll, line, &tl)) {
                char msg[64];
                snprintf(msg, sizeof msg, "line %zu is not a JSON string", lineno);
                rc = fail(cmd, msg);
                break;
            }
            int32_t *ids = NULL;
            size_t n_ids = 0;
            if (spindle_tokenizer_encode(s.tok, line, tl, !o.no_special, &ids, &n_ids, &err)) rc = fail_err(cmd, &err);
            else print_ids(ids, n_ids, true);
            spindle_free(ids);
        }
    }
    return session_close(&s, rc);
}

/* Ids as "1,2 3" (commas or spaces). */
static bool parse_id_list(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return false;
    while (*s) {
        while (*s == ',' || *s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
        if (!*s) break;
        char *e;
        errno = 0;
        long v = strtol(s, &e, 10);
        if (e == s || errno || v < 0 || v > INT32_MAX) return false;
        if (*n == cap) {
            int32_t *b = realloc(*ids, (cap *= 2) * sizeof *b);
            if (!b) return false;
            *ids = b;
        }
        (*ids)[(*n)++] = (int32_t)v;
        s = e;
    }
    return true;
}

static bool parse_id_json(const char *s, size_t len, int32_t **ids, size_t *n) {
    cJSON *j = cJSON_ParseWithLength(s, len);
    bool ok = cJSON_IsArray(j);
    size_t cnt = ok ? (size_t)cJSON_GetArraySize(j) : 0;
    *n = 0;
    *ids = malloc((cnt ? cnt : 1) * sizeof **ids);
    ok = ok && *ids;
    const cJSON *it;
    if (ok) cJSON_ArrayForEach(it, j) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX ||
            it->valuedouble != (double)(int32_t)it->valuedouble) { ok = false; break; }
        (*ids)[(*n)++] = (int32_t)it->valuedouble;
    }
    cJSON_Delete(j);
    return ok;
}

/* Decode one id list and print it in the selected form. */
static int detok_one(const char *cmd, const spindle_tokenizer *tok, const opts *o,
                     const int32_t *ids, size_t n) {
    spindle_error err = {0};
    if (o->stream) {
        spindle_detokenizer *d = NULL;
        if (spindle_detokenizer_new(tok, o->skip_special, &d, &err)) return fail_err(cmd, &err);
        if (o->jsonl) putchar('[');
        const char *piece;
        bool firstp = true;
        for (size_t i = 0; i <= n; i++) {
            spindle_status st = i < n ? spindle_detokenizer_push(d, ids[i], &piece, &err)
                                      : spindle_detokenizer_flush(d, &piece, &err);
            if (st) {
                spindle_detokenizer_free(d);
                return fail_err(cmd, &err);
            }
            if (o->jsonl) {
                if (!firstp) putchar(',');
                firstp = false;
                put_json_string(piece, spindle_detokenizer_piece_len(d));
            } else if (spindle_detokenizer_piece_len(d)) {
                put_json_string(piece, spindle_detokenizer_piece_len(d));
                putchar('\n');
            }
        }
        if (o->jsonl) fputs("]\n", stdout);
        spindle_detokenizer_free(d);
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    if (spindle_tokenizer_decode(tok, ids, n, o->skip_special, &text, &len, &err))
        return fail_err(cmd, &err);
    if (o->json || o->jsonl) {
        fputs("{\"text\":", stdout);
        put_json_string(text, len);
        fputs("}\n", stdout);
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
    }
    spindle_free(text);
    return 0;
}

int sp_cmd_detokenize(int argc, char **argv) {
    const char *cmd = argc > 0 ? argv[0] : "detokenize";
    opts o;
    session s;
    int rc;
    if ((rc = parse_opts(argc, argv, &o, false))) return rc < 0 ? 0 : rc;
    if ((rc = session_open(cmd, &o, !o.ids, &s))) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    if (!o.jsonl) {
        const char *src = o.ids ? o.ids : s.input;
        while (*src == ' ' || *src == '\n') src++;
        bool ok = *src == '[' ? parse_id_json(src, strlen(src), &ids, &n)
                              : parse_id_list(src, &ids, &n);
        rc = ok ? detok_one(cmd, s.tok, &o, ids, n) : fail(cmd, "ids must be non-negative integers");
        free(ids);
    } else {
        char *pos = s.input, *line;
        size_t lineno = 0, ll;
        while (!rc && next_line(&s, &pos, &lineno, &line, &ll)) {
            if (!parse_id_json(line, ll, &ids, &n)) {
                char msg[80];
                snprintf(msg, sizeof msg, "line %zu is not a JSON array of ids", lineno);
                rc = fail(cmd, msg);
            } else rc = detok_one(cmd, s.tok, &o, ids, n);
            free(ids);
            ids = NULL;
        }
    }
    return session_close(&s, rc);
}
