/* spindle chat: an interactive conversation with streaming output.
 *
 * The whole conversation is re-rendered with the chat template every turn
 * (templates may rewrite earlier turns, e.g. dropping old reasoning), and
 * only the tokens after the longest prefix already in the sequence are
 * prefilled: the sequence is rolled back to that prefix first, or to the
 * start when one of its layers cannot roll back that far. */
#include "cli/args.h"
#include "cli/chat_template_args.h"
#include "cli/lora_args.h"
#include "cli/commands.h"
#include "cli/prompt.h"
#include "cli/spec_args.h"
#include "spindle.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct chat_state {
    spindle_model *model;
    spindle_tokenizer *tok;
    spindle_seq *seq;
    cJSON *messages;
    int32_t *cached;       /* the tokens whose K/V are in seq */
    int n_cached, cap_cached;
    spindle_gen_params gen;
    int32_t stop[4];
    const char *template_kwargs;   /* --chat-template-kwargs, or NULL */
} chat_state;

static void add_message(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
}

/* Remember what the cache now holds: a prefix of prompt ++ generated. */
static bool remember(chat_state *c, const int32_t *prompt, int n_prompt,
                     const int32_t *gen, int n_gen) {
    int len = spindle_seq_length(c->seq);
    if (len > c->cap_cached) {
        int32_t *p = realloc(c->cached, (size_t)len * 2 * sizeof *p);
        if (!p) return false;
        c->cached = p;
        c->cap_cached = len * 2;
    }
    for (int i = 0; i < len; i++)
        c->cached[i] = i < n_prompt ? prompt[i] : gen[i - n_prompt];
    c->n_cached = len;
    (void)n_gen;
    return true;
}

static spindle_status turn(chat_state *c, const char *user, spindle_error *err) {
    add_message(c->messages, "user", user);
    char *msgs = cJSON_PrintUnformatted(c->messages);
    int32_t *ids = NULL, *gen = NULL;
    int n = 0, n_gen = 0;
    sp_text_stream stream;
    memset(&stream, 0, sizeof stream);
    spindle_status st = msgs ? sp_chat_prompt_ids(c->tok, msgs, c->template_kwargs, &ids, &n, err)
                             : SPINDLE_ERR_MEMORY;
    free(msgs);
    if (!st) {
        int keep = 0;
        while (keep < n && keep < c->n_cached && ids[keep] == c->cached[keep]) keep++;
        if (keep == n) keep--;   /* the last token must be fed for logits */
        st = spindle_seq_truncate(c->seq, keep, err);
        if (st == SPINDLE_ERR_UNSUPPORTED) {
            /* A sliding-window or recurrent layer cannot go back that far:
             * prefill the whole conversation again. */
            keep = 0;
            st = spindle_seq_truncate(c->seq, 0, err);
        }
        if (!st) st = sp_text_stream_init(&stream, c->tok, stdout, err);
        if (!st)
            st = spindle_generate(c->model, c->seq, ids + keep, n - keep,
                                  &c->gen, sp_text_stream_token, &stream, &gen,
                                  &n_gen, NULL, NULL, err);
        if (!st) sp_text_stream_finish(&stream);
        printf("\n");
        fflush(stdout);
        if (!st && !remember(c, ids, n, gen, n_gen)) st = SPINDLE_ERR_MEMORY;
        if (!st) add_message(c->messages, "assistant", stream.text ? stream.text : "");
    }
    if (st) {
        /* Forget the failed turn so the conversation stays consistent. */
        cJSON_DeleteItemFromArray(c->messages, cJSON_GetArraySize(c->messages) - 1);
        c->n_cached = 0;
        spindle_seq_truncate(c->seq, 0, NULL);
    }
    sp_text_stream_free(&stream);
    spindle_free(ids);
    spindle_free(gen);
    return st;
}

static const char *chat_usage =
    "usage: spindle chat -m MODEL [--system TEXT] [-n MAX_TOKENS] "
    "[--temp T --top-k K --top-p P --min-p P --seed S] [-t THREADS]\n"
    "       [--xtc-probability P --xtc-threshold T]\n"
    "       [--kv-type f32|bf16|f16] [--mmap] [--lora PATH[:SCALE]]...\n"
    SP_ARG_SPEC_HELP
    SP_ARG_CHAT_TEMPLATE_HELP
    "Type a message and press Enter; /reset clears the history, "
    "/exit (or end of input) quits.\n";

typedef struct chat_args {
    const char *model_path, *system;
    int threads;
    spindle_kv_type kv_type;
    bool use_mmap;
    sp_lora_args lora;
    sp_spec_args spec;
    sp_chat_template_args tmpl;
} chat_args;

/* 0: parsed; 1: help printed; 2: bad arguments (one line said why). */
static int parse(int argc, char **argv, chat_args *o, spindle_gen_params *gen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
#define VALUE() if (!(v = sp_arg_value(argc, argv, &i))) return 2
        if (sp_arg_is_help(a)) { fputs(chat_usage, stdout); return 1; }
        else if (!strcmp(a, "--mmap")) o->use_mmap = true;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VALUE(); o->model_path = v; }
        else if (!strcmp(a, "--system")) { VALUE(); o->system = v; }
        else if (!strcmp(a, "--lora")) {
            VALUE(); if (!sp_lora_arg(&o->lora, a, v)) return 2;
        }
        else if (!strcmp(a, "-n")) {
            VALUE(); if (!sp_arg_int(a, v, 1, 1 << 24, &n)) return 2;
            gen->max_tokens = (int)n;
        } else if (!strcmp(a, "-t")) {
            VALUE(); if (!sp_arg_int(a, v, 1, 1024, &n)) return 2;
            o->threads = (int)n;
        } else if ((n = sp_arg_sampler(argc, argv, &i, &gen->sampler)) != 0) {
            if (n < 0) return 2;
        } else if (!strcmp(a, "--seed")) {
            VALUE(); if (!sp_arg_u64(a, v, &gen->sampler.seed)) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            VALUE(); if (!sp_arg_kv_type(a, v, &o->kv_type)) return 2;
        } else if ((n = sp_arg_spec(argc, argv, &i, &o->spec)) != 0) {
            if (n < 0) return 2;
        } else if ((n = sp_arg_chat_template(argc, argv, &i, &o->tmpl)) != 0) {
            if (n < 0) return 2;
        } else return sp_arg_unknown("chat", a);
#undef VALUE
    }
    return 0;
}

int sp_cmd_chat(int argc, char **argv) {
    chat_state c;
    memset(&c, 0, sizeof c);
    c.gen = spindle_gen_defaults();
    chat_args o = {.kv_type = SPINDLE_KV_F32};
    int rc = parse(argc, argv, &o, &c.gen);
    if (rc) {
        sp_lora_args_free(&o.lora);
        return rc == 1 ? 0 : rc;
    }
    const char *model_path = o.model_path, *system = o.system;
    if (!model_path) {
        fprintf(stderr, "spindle chat: -m MODEL is required\n");
        return 2;
    }
    spindle_error err = {0};
    spindle_load_options lo = {.n_threads = o.threads, .kv_type = o.kv_type,
                               .use_mmap = o.use_mmap, .kv_sequences = 1};
    spindle_model *draft = NULL;
    spindle_status st = spindle_model_load(model_path, &lo, &c.model, &err);
    if (!st) st = sp_lora_args_load(&o.lora, c.model, &c.gen, &err);
    if (!st) st = sp_spec_args_load(&o.spec, c.model, &lo, &draft, &err);
    c.gen.spec = o.spec.spec;
    if (!st) st = spindle_tokenizer_load(spindle_model_dir(c.model), &c.tok, &err);
    if (!st) st = sp_chat_template_use(&o.tmpl, c.tok, true, &err);
    c.template_kwargs = o.tmpl.kwargs;
    if (!st) st = spindle_seq_new(c.model, &c.seq, &err);
    if (!st) {
        c.gen.n_stop_ids = sp_tokenizer_stop_ids(c.tok, c.stop, 4);
        c.gen.stop_ids = c.stop;
        c.messages = cJSON_CreateArray();
        if (system) add_message(c.messages, "system", system);
    }
    if (st) fprintf(stderr, "spindle: %s\n", err.message);
    char *line = NULL;
    size_t cap = 0;
    while (!st) {
        fputs("> ", stderr);
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            cJSON_Delete(c.messages);
            c.messages = cJSON_CreateArray();
            if (system) add_message(c.messages, "system", system);
            continue;
        }
        if (!len) continue;
        if (turn(&c, line, &err))
            fprintf(stderr, "spindle: %s\n", err.message);
    }
    free(line);
    free(c.cached);
    cJSON_Delete(c.messages);
    spindle_seq_free(c.seq);
    spindle_tokenizer_free(c.tok);
    sp_lora_args_free(&o.lora);
    spindle_model_free(draft);
    spindle_mtp_head_free(o.spec.spec.mtp_head);
    spindle_model_free(c.model);
    return st ? 1 : 0;
}
