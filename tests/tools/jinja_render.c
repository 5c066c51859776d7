/* Test harness for the Jinja engine: renders a template file with a JSON
 * context and prints the result exactly (no newline added).
 *
 *   jinja_render TEMPLATE CONTEXT.json [--chat] [--now EPOCH]
 *                [--max-depth N] [--max-iterations N] [--max-output N]
 *                [--max-value-bytes N]
 *
 * Plain mode: the context object's keys are the template variables.
 * --chat: the context is {"messages", "tools", "documents",
 * "add_generation_prompt", "special": {"bos_token": ...}, "extra": {...}}
 * and goes through sp_chat_build_context as spindle_chat_render does.
 * Errors go to stderr with exit status 1 (2 for usage). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (cap - n < 2) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            } else {
                buf = b;
            }
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

static const char *special(const cJSON *sp, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sp, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TEMPLATE CONTEXT.json [--chat] [--now EPOCH] "
                        "[--max-depth N] [--max-iterations N] [--max-output N] "
                        "[--max-value-bytes N]\n", argv[0]);
        return 2;
    }
    sp_jinja_limits lim = sp_jinja_default_limits();
    bool chat = false;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--chat")) chat = true;
        else if (v && !strcmp(a, "--now")) lim.now = atoll(argv[++i]);
        else if (v && !strcmp(a, "--max-depth")) lim.max_depth = atoi(argv[++i]);
        else if (v && !strcmp(a, "--max-iterations")) lim.max_iterations = atoll(argv[++i]);
        else if (v && !strcmp(a, "--max-output")) lim.max_output = (size_t)atoll(argv[++i]);
        else if (v && !strcmp(a, "--max-value-bytes"))
            lim.max_value_bytes = (size_t)atoll(argv[++i]);
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    size_t tlen, clen;
    char *src = slurp(argv[1], &tlen), *ctx_text = slurp(argv[2], &clen);
    if (!src || !ctx_text) {
        fprintf(stderr, "cannot read %s\n", !src ? argv[1] : argv[2]);
        return 1;
    }
    cJSON *ctx = sp_json_parse(ctx_text);
    free(ctx_text);
    if (!cJSON_IsObject(ctx)) {
        fprintf(stderr, "%s: not a JSON object\n", argv[2]);
        return 1;
    }
    spindle_error err = {0};
    if (chat) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(ctx, "special");
        sp_chat_special_tokens st = {special(sp, "bos_token"), special(sp, "eos_token"),
                                     special(sp, "unk_token"), special(sp, "sep_token"),
                                     special(sp, "pad_token"), special(sp, "cls_token"),
                                     special(sp, "mask_token")};
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(ctx, "tools");
        const cJSON *docs = cJSON_GetObjectItemCaseSensitive(ctx, "documents");
        cJSON *built = sp_chat_build_context(
            cJSON_GetObjectItemCaseSensitive(ctx, "messages"),
            cJSON_IsNull(tools) ? NULL : tools, cJSON_IsNull(docs) ? NULL : docs,
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "add_generation_prompt")),
            cJSON_GetObjectItemCaseSensitive(ctx, "extra"), &st, &err);
        cJSON_Delete(ctx);
        if (!built) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        ctx = built;
    }
    sp_jinja_template *tpl = NULL;
    char *out = NULL;
    size_t out_len = 0;
    spindle_status s = sp_jinja_parse(src, tlen, &tpl, &err);
    if (s == SPINDLE_OK) s = sp_jinja_render(tpl, ctx, &lim, &out, &out_len, &err);
    sp_jinja_free(tpl);
    cJSON_Delete(ctx);
    free(src);
    if (s != SPINDLE_OK) {
        fprintf(stderr, "%s: %s\n", spindle_status_name(s), err.message);
        return 1;
    }
    fwrite(out, 1, out_len, stdout);
    free(out);
    return 0;
}
