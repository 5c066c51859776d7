/* spindle run: load a model, generate from a prompt, report statistics. */
#include "cli/args.h"
#include "cli/chat_template_args.h"
#include "cli/commands.h"
#include "cli/lora_args.h"
#include "cli/npy.h"
#include "cli/grammar_file.h"
#include "cli/prompt.h"
#include "cli/run_checkpoint.h"
#include "cli/run_prompts.h"
#include "cli/run_images.h"
#include "cli/run_diffusion.h"
#include "cli/spec_args.h"
#include "spindle.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *run_usage =
    "usage: spindle run -m MODEL (-p TEXT | --prompt-tokens IDS |\n"
    "                            --prompts FILE [--parallel N]) [options]\n"
    "  -m, --model PATH        model directory or Hugging Face repo id\n"
    "                          (hf://ORG/NAME[:QUANT] downloads it first; --offline:\n"
    "                          from the HF cache only)\n"
    "  -p, --prompt TEXT       text prompt (special tokens added per the tokenizer)\n"
    "  --chat                  wrap the prompt in the model's chat template\n"
    "  --system TEXT           system message for --chat\n"
    SP_ARG_CHAT_TEMPLATE_HELP
    "  --prompt-tokens IDS     prompt as comma-separated token ids\n"
    SP_RUN_PROMPTS_HELP
    "  -n, --max-tokens N      tokens to generate (default 256)\n"
    "  --temp T                temperature (default 0: greedy)\n"
    "  --top-k K, --top-p P, --min-p P, --seed S   sampling\n"
    "  --xtc-probability P, --xtc-threshold T      XTC sampling\n"
    "  --repetition-penalty F, --presence-penalty F, --frequency-penalty F\n"
    "  --penalty-context N     tokens the penalties look back over (default 20)\n"
    "  --logit-bias ID=BIAS    add BIAS to a token's logit (repeatable)\n"
    "  -t, --threads N         compute threads (default: all cores)\n"
    "  --ctx N                 context limit (default: the model's)\n"
    "  --max-rollback N        tokens a sequence can surely be rolled back (default 8)\n"
    SP_ARG_KV_TYPE_HELP
    SP_ARG_MMAP_HELP
    SP_ARG_LORA_HELP
    "  --prefill-chunk N       prompt tokens per forward pass (default 512)\n"
    "  --ignore-eos            do not stop at end-of-sequence tokens\n"
    SP_ARG_SPEC_HELP
    "  --grammar FILE          constrain the output to a GBNF grammar\n"
    "  --json-schema FILE      constrain the output to a JSON Schema\n"
    "  --jump-forward on|off|auto  feed the spans a grammar forces in one\n"
    "                          forward (auto, the default: at temperature 0)\n"
    "  --json                  print one JSON object with tokens and stats\n"
    "  --dump-logits FILE      write the last prompt position's logits (.npy)\n"
    SP_ARG_DIFFUSION_HELP
    SP_ARG_IMAGE_HELP
    SP_ARG_PROMPT_CACHE_HELP
    SP_RUN_DURABLE_HELP;

typedef struct run_options {
    const char *model;
    int32_t *prompt;
    int n_prompt;
    int threads;
    int ctx;
    int max_rollback;
    spindle_kv_type kv_type;
    size_t kv_bytes;
    spindle_load_options cache;   /* the prompt cache's two fields */
    bool use_mmap;
    bool json;
    const char *dump_logits;
    const char *grammar_file, *schema_file;
    const char *text;
    const char *system;
    bool chat;
    sp_chat_template_args tmpl;
    const char *prompts_file;
    int parallel;
    int32_t bias_ids[64];
    float bias_values[64];
    spindle_gen_params gen;
    sp_run_durable durable;
    sp_lora_args lora;
    sp_spec_args spec;
    sp_run_images images;
    sp_diffusion_args diffusion;
} run_options;

/* --prompts FILE replaces -p / --prompt-tokens and runs without the
 * options that belong to one generation. */
static bool prompts_options_ok(run_options *o) {
    const char *clash = o->text ? "-p" : o->prompt ? "--prompt-tokens"
                      : o->durable.checkpoint_path ? "--checkpoint"
                      : o->durable.resume_path ? "--resume"
                      : o->dump_logits ? "--dump-logits"
                      : o->images.n ? "--image" : NULL;
    if (clash) {
        fprintf(stderr, "spindle run: --prompts FILE excludes %s\n", clash);
        return false;
    }
    if (!o->parallel) o->parallel = 4;
    return true;
}

/* Not a status of the library: --prompts, or a diffusion model's run,
 * ran and printed everything. */
#define SP_RUN_DONE ((spindle_status)-1)

static bool options_ok(run_options *o);

static int parse(int argc, char **argv, run_options *o) {
    o->gen = spindle_gen_defaults();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        double x;
        int rc;
#define VALUE() if (!(v = sp_arg_value(argc, argv, &i))) return 2
        if (sp_arg_is_help(a)) {
            fputs(run_usage, stdout);
            return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE(); o->model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VALUE(); o->text = v;
        } else if (!strcmp(a, "--system")) {
            VALUE(); o->system = v;
        } else if (!strcmp(a, "--prompts")) {
            VALUE(); o->prompts_file = v;
        } else if (!strcmp(a, "--parallel")) {
            VALUE(); if (!sp_arg_int(a, v, 1, 256, &n)) return 2;
            o->parallel = (int)n;
        } else if (!strcmp(a, "--chat")) {
            o->chat = true;
        } else if ((rc = sp_arg_chat_template(argc, argv, &i, &o->tmpl)) != 0) {
            if (rc < 0) return 2;
        } else if (!strcmp(a, "--prompt-tokens")) {
            VALUE();
            free(o->prompt);
            if (!sp_arg_id_list(a, v, &o->prompt, &o->n_prompt)) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            VALUE(); if (!sp_arg_int(a, v, 0, 1 << 24, &n)) return 2;
            o->gen.max_tokens = (int)n;
        } else if ((rc = sp_arg_sampler(argc, argv, &i, &o->gen.sampler)) != 0) {
            if (rc < 0) return 2;
        } else if (!strcmp(a, "--repetition-penalty")) {
            VALUE(); if (!sp_arg_float(a, v, 0, 100, &x)) return 2;
            o->gen.repetition_penalty = (float)x;
        } else if (!strcmp(a, "--presence-penalty")) {
            VALUE(); if (!sp_arg_float(a, v, -100, 100, &x)) return 2;
            o->gen.presence_penalty = (float)x;
        } else if (!strcmp(a, "--frequency-penalty")) {
            VALUE(); if (!sp_arg_float(a, v, -100, 100, &x)) return 2;
            o->gen.frequency_penalty = (float)x;
        } else if (!strcmp(a, "--penalty-context")) {
            VALUE(); if (!sp_arg_int(a, v, 0, 1 << 24, &n)) return 2;
            o->gen.repetition_context_size = o->gen.presence_context_size =
                o->gen.frequency_context_size = (int)n;
        } else if (!strcmp(a, "--logit-bias")) {
            VALUE();
            const char *eq = strchr(v, '=');
            int k = o->gen.n_logit_bias;
            char id[32] = "";
            if (eq && eq - v < 32) memcpy(id, v, (size_t)(eq - v));
            if (!eq || k >= 64 || !sp_arg_int(a, id, 0, INT32_MAX, &n) ||
                !sp_arg_float(a, eq + 1, -1e9, 1e9, &x)) {
                fprintf(stderr, "spindle run: --logit-bias expects ID=BIAS (at most 64)\n");
                return 2;
            }
            o->bias_ids[k] = (int32_t)n;
            o->bias_values[k] = (float)x;
            o->gen.n_logit_bias = k + 1;
            o->gen.logit_bias_ids = o->bias_ids;
            o->gen.logit_bias_values = o->bias_values;
        } else if (!strcmp(a, "--seed")) {
            VALUE(); if (!sp_arg_u64(a, v, &o->gen.sampler.seed)) return 2;
            o->durable.seed_explicit = true;
        } else if ((rc = sp_arg_prompt_cache(argc, argv, &i, &o->cache)) != 0) {
            if (rc < 0) return 2;
        } else if ((rc = sp_run_durable_option(&o->durable, argc, argv, &i)) != 0) {
            if (rc == 2) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE(); if (!sp_arg_int(a, v, 1, 1024, &n)) return 2;
            o->threads = (int)n;
        } else if (!strcmp(a, "--ctx")) {
            VALUE(); if (!sp_arg_int(a, v, 1, 1 << 24, &n)) return 2;
            o->ctx = (int)n;
        } else if (!strcmp(a, "--max-rollback")) {
            VALUE(); if (!sp_arg_int(a, v, 1, SPINDLE_MAX_ROLLBACK_LIMIT, &n)) return 2;
            o->max_rollback = (int)n;
        } else if (!strcmp(a, "--kv-budget")) {
            VALUE(); if (!sp_arg_bytes(a, v, &o->kv_bytes)) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            VALUE(); if (!sp_arg_kv_type(a, v, &o->kv_type)) return 2;
        } else if (!strcmp(a, "--prefill-chunk")) {
            VALUE(); if (!sp_arg_int(a, v, 1, 1 << 20, &n)) return 2;
            o->gen.prefill_chunk = (int)n;
        } else if (!strcmp(a, "--mmap")) {
            o->use_mmap = true;
        } else if (!strcmp(a, "--image")) {
            VALUE(); if (!sp_image_arg(&o->images, v)) return 2;
        } else if (!strcmp(a, "--lora")) {
            VALUE(); if (!sp_lora_arg(&o->lora, a, v)) return 2;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->gen.ignore_eos = true;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--dump-logits")) {
            VALUE(); o->dump_logits = v;
        } else if ((rc = sp_arg_diffusion(argc, argv, &i, &o->diffusion)) != 0) {
            if (rc < 0) return 2;
        } else if ((n = sp_arg_spec(argc, argv, &i, &o->spec)) != 0) {
            if (n < 0) return 2;
        } else if (!strcmp(a, "--grammar")) {
            VALUE(); o->grammar_file = v;
        } else if (!strcmp(a, "--json-schema")) {
            VALUE(); o->schema_file = v;
        } else if (!strcmp(a, "--jump-forward")) {
            VALUE();
            if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto")) {
                fprintf(stderr, "spindle run: --jump-forward expects on, off or auto, got '%s'\n", v);
                return 2;
            }
            o->gen.jump_forward = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? -1 : 0;
        } else {
            return sp_arg_unknown("run", a);
        }
#undef VALUE
    }
    return options_ok(o) ? 0 : 2;
}

/* The checks across options, once all are read. */
static bool options_ok(run_options *o) {
    if (!o->model) {
        fprintf(stderr, "spindle run: -m MODEL is required\n");
        return false;
    }
    if (o->grammar_file && o->schema_file) {
        fprintf(stderr, "spindle run: --grammar and --json-schema exclude each other\n");
        return false;
    }
    if (o->prompts_file)
        return prompts_options_ok(o);
    if (o->parallel) {
        fprintf(stderr, "spindle run: --parallel needs --prompts FILE\n");
        return false;
    }
    if (!sp_run_durable_prompt_ok(&o->durable, o->prompt || o->text)) return false;
    if (!o->durable.resume_path && !o->prompt == !o->text) {
        fprintf(stderr, "spindle run: give exactly one of -p TEXT and "
                        "--prompt-tokens IDS\n");
        return false;
    }
    if (o->images.n && (!o->text || o->durable.resume_path)) {
        fprintf(stderr, "spindle run: --image needs -p TEXT\n");
        return false;
    }
    if ((o->chat || o->system) && !o->text && !o->prompts_file) {
        fprintf(stderr, "spindle run: --chat and --system need -p TEXT\n");
        return false;
    }
    return true;
}

static bool print_token(int32_t token, void *user) {
    (void)user;
    printf("%d ", token);
    fflush(stdout);
    return true;
}

/* The on-disk prompt cache's counts, when there is one. */
static void prompt_cache_json(cJSON *stats, const spindle_model *model) {
    spindle_kv_pool_info kv;
    spindle_error err = {0};
    if (spindle_model_kv_pool_info(model, &kv, &err) || !kv.disk_budget_bytes)
        return;
    cJSON *c = cJSON_AddObjectToObject(stats, "prompt_cache");
    cJSON_AddNumberToObject(c, "budget_bytes", (double)kv.disk_budget_bytes);
    cJSON_AddNumberToObject(c, "bytes", (double)kv.disk_bytes);
    cJSON_AddNumberToObject(c, "files", kv.disk_files);
    cJSON_AddNumberToObject(c, "loaded", (double)kv.disk_loaded);
    cJSON_AddNumberToObject(c, "written", (double)kv.disk_written);
    cJSON_AddNumberToObject(c, "refused", (double)kv.disk_refused);
    cJSON_AddNumberToObject(c, "evicted", (double)kv.disk_evicted);
    cJSON_AddNumberToObject(c, "dropped", (double)kv.disk_dropped);
}

static void print_json(const run_options *o, const spindle_model *model,
                       const int32_t *toks, int n, const char *text,
                       const spindle_gen_stats *s) {
    cJSON *root = cJSON_CreateObject();
    cJSON *p = cJSON_AddArrayToObject(root, "prompt_tokens");
    for (int i = 0; i < o->n_prompt; i++)
        cJSON_AddItemToArray(p, cJSON_CreateNumber(o->prompt[i]));
    cJSON *t = cJSON_AddArrayToObject(root, "tokens");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(toks[i]));
    if (text) cJSON_AddStringToObject(root, "text", text);
    cJSON *st = cJSON_AddObjectToObject(root, "stats");
    cJSON_AddNumberToObject(st, "prompt_tokens", s->prompt_tokens);
    cJSON_AddNumberToObject(st, "cached_tokens", s->cached_tokens);
    cJSON_AddNumberToObject(st, "generated_tokens", s->generated_tokens);
    cJSON_AddNumberToObject(st, "prefill_seconds", s->prefill_seconds);
    cJSON_AddNumberToObject(st, "ttft_seconds", s->ttft_seconds);
    cJSON_AddNumberToObject(st, "decode_seconds", s->decode_seconds);
    cJSON_AddNumberToObject(st, "prefill_tps", s->prefill_tps);
    cJSON_AddNumberToObject(st, "decode_tps", s->decode_tps);
    cJSON_AddNumberToObject(st, "peak_rss_bytes", (double)s->peak_rss_bytes);
    cJSON_AddStringToObject(st, "stop_reason",
                            spindle_stop_reason_name(s->stop_reason));
    if (o->gen.spec.mode || s->spec.target_forwards)
        sp_spec_stats_json(st, o->gen.spec.mode, &s->spec);
    prompt_cache_json(st, model);
    char *json = cJSON_PrintUnformatted(root);
    if (json) puts(json);
    free(json);
    cJSON_Delete(root);
}

/* Text prompts need the model's tokenizer; --chat also its template. */
static spindle_status text_prompt(run_options *o, const spindle_tokenizer *tok,
                                  spindle_error *err) {
    if (!o->chat) {
        size_t n = 0;
        spindle_status st = spindle_tokenizer_encode(tok, o->text, strlen(o->text),
                                                     true, &o->prompt, &n, err);
        o->n_prompt = (int)n;
        return st;
    }
    char *msgs = sp_single_turn_messages(o->system, o->text);
    if (!msgs) return SPINDLE_ERR_MEMORY;
    spindle_status st = sp_chat_prompt_ids(tok, msgs, o->tmpl.kwargs, &o->prompt,
                                           &o->n_prompt, err);
    free(msgs);
    return st;
}

/* The text's end, then the run's statistics line on stderr. */
static void print_stats(const spindle_gen_stats *stats) {
    printf("\n");
    fflush(stdout);   /* the text ends before the statistics line */
    fprintf(stderr,
            "prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s "
            "| peak RSS %.1f MiB | stop: %s\n",
            stats->prompt_tokens, stats->prefill_tps, stats->generated_tokens,
            stats->decode_tps, stats->peak_rss_bytes / 1048576.0,
            spindle_stop_reason_name(stats->stop_reason));
}

/* A diffusion model denoises a canvas of -n tokens instead; the options
 * of token-by-token decoding are refused by name. Other models refuse the
 * diffusion options. Returns SP_RUN_DONE when it ran. */
static spindle_status diffusion_mode(run_options *o, spindle_model *model,
                                     const spindle_tokenizer *tok,
                                     spindle_error *err) {
    if (!spindle_model_diffusion_info(model, NULL)) {
        if (!o->diffusion.given) return SPINDLE_OK;
        snprintf(err->message, sizeof err->message, "--diffusion-steps, "
                 "--block-length, --diffusion-eps and --remasking need a "
                 "diffusion model");
        return SPINDLE_ERR_ARGUMENT;
    }
    const char *clash = o->prompts_file ? "--prompts"
                      : o->grammar_file || o->schema_file ? "a grammar"
                      : o->images.n ? "--image"
                      : o->gen.spec.mode ? "--spec"
                      : o->gen.adapter ? "--lora"
                      : o->durable.checkpoint_path || o->durable.resume_path
                          ? "--checkpoint / --resume" : NULL;
    if (clash) {
        snprintf(err->message, sizeof err->message,
                 "%s does not apply to a diffusion model", clash);
        return SPINDLE_ERR_ARGUMENT;
    }
    sp_diffusion_run r = {.prompt = o->prompt, .n_prompt = o->n_prompt,
                          .gen = &o->gen, .args = &o->diffusion, .tok = tok,
                          .json = o->json, .dump_logits = o->dump_logits};
    spindle_status st = sp_run_diffusion(model, &r, err);
    return st ? st : SP_RUN_DONE;
}

/* What one run produced, for report_run. */
typedef struct run_output {
    const int32_t *toks;
    int n;
    const float *logits;          /* --dump-logits' row, else NULL */
    const spindle_gen_stats *stats;
    const char *text;             /* the answer's text; NULL without a tokenizer */
} run_output;

/* The end of a run: --dump-logits' file, then the error, the JSON or the
 * statistics line. SP_RUN_DONE (--prompts printed its own) becomes OK. */
static spindle_status report_run(run_options *o, const spindle_model *model,
                                 const run_output *out, spindle_status st,
                                 spindle_error *err) {
    if (!st && o->dump_logits &&
        !sp_write_npy(o->dump_logits, out->logits, 0, spindle_model_vocab_size(model))) {
        st = SPINDLE_ERR_IO;
        snprintf(err->message, sizeof err->message, "%s: cannot write", o->dump_logits);
    }
    if (st == SP_RUN_DONE) return SPINDLE_OK;
    if (st) {
        fprintf(stderr, "spindle: %s\n",
                err->message[0] ? err->message : spindle_status_name(st));
    } else if (o->json) {
        int skip = sp_run_durable_skip(&o->durable);
        print_json(o, model, out->toks + skip, out->n - skip, out->text, out->stats);
    } else {
        print_stats(out->stats);
    }
    return st;
}

int sp_cmd_run(int argc, char **argv) {
    run_options o;
    memset(&o, 0, sizeof o);
    int rc = parse(argc, argv, &o);
    if (rc) {
        free(o.prompt);
        sp_lora_args_free(&o.lora);
        return rc == 1 ? 0 : rc;
    }

    spindle_error err = {0};
    spindle_model *model = NULL, *draft = NULL;
    spindle_tokenizer *tok = NULL;
    spindle_seq *seq = NULL;
    sp_text_stream stream;
    memset(&stream, 0, sizeof stream);
    int32_t *toks = NULL, stop[4];
    int n = 0;
    float *logits = NULL;
    spindle_gen_stats stats;
    spindle_load_options lo = {.n_threads = o.threads, .max_context = o.ctx,
                               .kv_type = o.kv_type, .use_mmap = o.use_mmap,
                               .kv_bytes = o.kv_bytes,
                               /* one generation, or --prompts' parallel ones */
                               .kv_sequences = o.prompts_file ? o.parallel : 1,
                               .max_rollback = o.max_rollback,
                               .prompt_cache_dir = o.cache.prompt_cache_dir,
                               .prompt_cache_disk_bytes =
                                   o.cache.prompt_cache_disk_bytes};

    size_t text_from = 0;   /* a resume prints only the text after it */
    spindle_status st = spindle_model_load(o.model, &lo, &model, &err);
    if (!st) st = sp_lora_args_load(&o.lora, model, &o.gen, &err);
    o.durable.text_output = o.text != NULL;
    if (!st)
        st = sp_run_durable_setup(&o.durable, model, &o.gen, &o.prompt,
                                  &o.n_prompt, &err);
    if (!st) st = sp_spec_args_load(&o.spec, model, &lo, &draft, &err);
    o.gen.spec = o.spec.spec;
    /* Streaming text needs a tokenizer; token-id prompts work without one. */
    bool constrained = o.grammar_file || o.schema_file;
    spindle_grammar_vocab *vocab = NULL;
    spindle_grammar *grammar = NULL;
    if (!st && o.prompts_file && !constrained &&
        spindle_tokenizer_load(spindle_model_dir(model), &tok, NULL))
        tok = NULL;   /* then only prompt_tokens lines can run */
    if (!st && !tok && (o.durable.text_output || constrained))
        st = spindle_tokenizer_load(spindle_model_dir(model), &tok, &err);
    if (!st && constrained)
        st = sp_cli_grammar_load(tok, o.grammar_file, o.schema_file, &vocab,
                                 &grammar, &err);
    o.gen.grammar = grammar;
    if (!st && tok) st = sp_chat_template_use(&o.tmpl, tok, o.chat, &err);
    if (!st && o.text && o.images.n)
        st = sp_run_images_prompt(&o.images, model, tok, o.system, o.text,
                                  o.chat, o.tmpl.kwargs, &o.prompt,
                                  &o.n_prompt, &err);
    else if (!st && o.text)
        st = text_prompt(&o, tok, &err);
    if (!st) st = diffusion_mode(&o, model, tok, &err);
    if (!st && tok) {
        o.gen.n_stop_ids = sp_tokenizer_stop_ids(tok, stop, 4);
        o.gen.stop_ids = stop;
    }
    if (!st && o.prompts_file) {
        sp_run_prompts_args pa = {.path = o.prompts_file,
                                  .parallel = o.parallel, .json = o.json,
                                  .chat = o.chat, .system = o.system,
                                  .chat_kwargs = o.tmpl.kwargs};
        st = sp_run_prompts(model, tok, &o.gen, &pa, &err);
        o.json = false;   /* printed; nothing below runs */
        if (!st) st = SP_RUN_DONE;
    }
    if (!st && tok) {
        st = sp_text_stream_init(&stream, tok, o.json ? NULL : stdout, &err);
        if (!st) sp_run_durable_replay(&o.durable, &stream, &text_from);
    }
    if (!st) st = spindle_seq_new(model, &seq, &err);
    if (!st && o.dump_logits) {
        logits = malloc((size_t)spindle_model_vocab_size(model) * sizeof(float));
        if (!logits) st = SPINDLE_ERR_MEMORY;
    }
    spindle_token_callback cb = tok ? sp_text_stream_token
                                    : (o.json ? NULL : print_token);
    if (!st && o.images.n)
        st = spindle_generate_spans(model, seq, o.images.spans,
                                    o.images.n_spans, &o.gen, cb, &stream,
                                    &toks, &n, logits, &stats, &err);
    else if (!st)
        st = spindle_generate(model, seq, o.prompt, o.n_prompt, &o.gen, cb,
                              tok ? (void *)&stream : NULL, &toks, &n, logits,
                              &stats, &err);
    if (!st && tok) sp_text_stream_finish(&stream);
    const run_output out = {.toks = toks, .n = n, .logits = logits, .stats = &stats,
                            .text = tok ? (stream.text ? stream.text + text_from : "") : NULL};
    st = report_run(&o, model, &out, st, &err);
    free(logits);
    spindle_free(toks);
    sp_text_stream_free(&stream);
    spindle_seq_free(seq);
    sp_run_durable_free(&o.durable);
    spindle_grammar_free(grammar);
    spindle_grammar_vocab_free(vocab);
    spindle_tokenizer_free(tok);
    sp_lora_args_free(&o.lora);
    sp_run_images_free(&o.images);
    spindle_model_free(draft);
    spindle_mtp_head_free(o.spec.spec.mtp_head);
    spindle_model_free(model);
    spindle_free(o.prompt);
    return st ? 1 : 0;
}
