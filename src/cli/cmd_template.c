/* `spindle template`: render a model's chat template for a conversation and
 * print the prompt exactly, with nothing appended.
 *
 *   spindle template -m DIR --messages FILE.json [--tools FILE.json]
 *                    [--add-generation-prompt] [--var KEY=JSON_VALUE]...
 *                    [--template-name NAME]
 *
 * --var sets an extra template variable (e.g. --var enable_thinking=false,
 * --var 'reasoning_effort="high"'); the value is JSON. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapped_file.h"
#include "cli/args.h"
#include "cli/chat_template_args.h"
#include "cli/commands.h"
#include "spindle.h"

static const char *template_usage =
    "usage: spindle template -m DIR --messages FILE.json [--tools FILE.json] "
    "[--add-generation-prompt]\n"
    "                        [--var KEY=JSON_VALUE]... [--template-name NAME]\n"
    "  -m, --model DIR          tokenizer or model directory (its chat template)\n"
    "  --messages FILE.json     the conversation, a JSON array of messages\n"
    "  --tools FILE.json        tool definitions, a JSON array\n"
    "  --add-generation-prompt  end with the assistant turn's opening\n"
    "  --var KEY=JSON_VALUE     an extra template variable (e.g. enable_thinking=false)\n"
    "  --template-name NAME     one of several named templates\n"
    "  --chat-template FILE|NAME  a template in place of the model's: a built-in\n"
    "                           by llama.cpp's name (chatml, llama3, gemma, ...),\n"
    "                           else a Jinja file\n";

static int fail(const char *msg) {
    fprintf(stderr, "spindle template: %s\n", msg);
    return 1;
}

static int fail_err(const spindle_error *e) {
    return fail(e->message[0] ? e->message : spindle_status_name(e->status));
}

/* Append "KEY": VALUE to the JSON object text being built in `vars`. The
 * value's own text is kept (not re-printed) so that 1.0 stays a float. */
static bool add_var(char **vars, const char *arg, char *msg, size_t msg_size) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || eq - arg > 200) {
        snprintf(msg, msg_size, "--var expects KEY=JSON_VALUE, got '%.200s'", arg);
        return false;
    }
    cJSON *value = cJSON_Parse(eq + 1);
    if (!value) {
        snprintf(msg, msg_size, "--var %.*s: the value is not valid JSON (quote strings: "
                 "'\"text\"')", (int)(eq - arg), arg);
        return false;
    }
    cJSON_Delete(value);
    char key[256];
    memcpy(key, arg, (size_t)(eq - arg));
    key[eq - arg] = '\0';
    cJSON *k = cJSON_CreateString(key);
    char *ktext = k ? cJSON_PrintUnformatted(k) : NULL;
    cJSON_Delete(k);
    size_t old = strlen(*vars), need = old + (ktext ? strlen(ktext) : 0) + strlen(eq + 1) + 4;
    char *grown = ktext ? realloc(*vars, need) : NULL;
    if (!grown) {
        free(ktext);
        snprintf(msg, msg_size, "out of memory");
        return false;
    }
    /* `vars` holds "{" and the members so far; the "}" comes last. */
    snprintf(grown + old, need - old, "%s%s:%s", old > 1 ? "," : "", ktext, eq + 1);
    free(ktext);
    *vars = grown;
    return true;
}

int sp_cmd_template(int argc, char **argv) {
    const char *model = NULL, *messages_path = NULL, *tools_path = NULL, *name = NULL,
               *chat_template = NULL;
    bool add_gen = false;
    char msg[400];
    char *vars = malloc(2);
    if (!vars) return fail("out of memory");
    strcpy(vars, "{");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (sp_arg_is_help(a)) {
            free(vars);
            fputs(template_usage, stdout);
            return 0;
        }
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) model = argv[++i];
        else if (!strcmp(a, "--messages") && has_val) messages_path = argv[++i];
        else if (!strcmp(a, "--tools") && has_val) tools_path = argv[++i];
        else if (!strcmp(a, "--template-name") && has_val) name = argv[++i];
        else if (!strcmp(a, "--chat-template") && has_val) chat_template = argv[++i];
        else if (!strcmp(a, "--add-generation-prompt")) add_gen = true;
        else if (!strcmp(a, "--var") && has_val) {
            if (!add_var(&vars, argv[++i], msg, sizeof msg)) {
                free(vars);
                return fail(msg);
            }
        } else {
            free(vars);
            return sp_arg_unknown("template", a);
        }
    }
    if (!model || !messages_path) {
        free(vars);
        return fail("-m DIR and --messages FILE.json are required (see 'spindle template --help')");
    }
    spindle_error err = {0};
    char *messages = NULL, *tools = NULL, *extra = NULL, *out = NULL;
    size_t len = 0;
    spindle_tokenizer *tok = NULL;
    int rc = 1;
    if (sp_read_text_file(messages_path, &messages, &len, &err) != SPINDLE_OK ||
        (tools_path && sp_read_text_file(tools_path, &tools, &len, &err) != SPINDLE_OK)) {
        rc = fail_err(&err);
        goto done;
    }
    size_t vlen = strlen(vars);
    extra = realloc(vars, vlen + 2);
    if (!extra) {
        rc = fail("out of memory");
        goto done;
    }
    vars = NULL;
    memcpy(extra + vlen, "}", 2);
    if (spindle_tokenizer_load(model, &tok, &err) != SPINDLE_OK ||
        (chat_template && spindle_tokenizer_set_chat_template(tok, chat_template, &err)) ||
        spindle_chat_render(tok, messages, tools, add_gen, extra, name, &out, &err) != SPINDLE_OK) {
        if (tok && !name && !spindle_tokenizer_has_chat_template(tok))
            sp_chat_template_missing(&err);
        rc = fail_err(&err);
        goto done;
    }
    len = strlen(out);
    rc = fwrite(out, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : fail("cannot write the output");
done:
    spindle_free(out);
    spindle_tokenizer_free(tok);
    free(messages);
    free(tools);
    free(extra);
    free(vars);
    return rc;
}
