/* spindle run on a diffusion model (run_diffusion.h). */
#include "cli/run_diffusion.h"
#include "cli/args.h"
#include "cli/npy.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sp_arg_diffusion(int argc, char **argv, int *i, sp_diffusion_args *o) {
    const char *a = argv[*i], *v;
    long n;
    if (strcmp(a, "--diffusion-steps") && strcmp(a, "--block-length") &&
        strcmp(a, "--diffusion-eps") && strcmp(a, "--remasking"))
        return 0;
    if (!(v = sp_arg_value(argc, argv, i))) return -1;
    o->given = true;
    if (!strcmp(a, "--remasking")) {
        spindle_remasking r;
        if (!spindle_remasking_parse(v, &r)) {
            fprintf(stderr, "spindle run: --remasking expects confidence, margin, "
                            "entropy, origin or random, got '%s'\n", v);
            return -1;
        }
        o->remasking = v;
        return 1;
    }
    if (!strcmp(a, "--diffusion-eps"))
        return sp_arg_float(a, v, 0.0, 0.999999, &o->eps) ? 1 : -1;
    if (!sp_arg_int(a, v, 1, 1 << 24, &n)) return -1;
    if (!strcmp(a, "--diffusion-steps")) o->steps = (int)n;
    else o->block_length = (int)n;
    return 1;
}

static spindle_diffusion_params params_of(const sp_diffusion_run *r) {
    spindle_diffusion_params p = spindle_diffusion_defaults();
    p.canvas = r->gen->max_tokens;
    p.steps = r->args->steps ? r->args->steps : p.canvas;
    p.block_length = r->args->block_length;
    p.eps = (float)r->args->eps;
    if (r->args->remasking) spindle_remasking_parse(r->args->remasking, &p.remasking);
    p.temperature = r->gen->sampler.temperature;
    p.top_k = r->gen->sampler.top_k;
    p.top_p = r->gen->sampler.top_p;
    p.seed = (uint32_t)r->gen->sampler.seed;
    return p;
}

static void stats_json(cJSON *root, const sp_diffusion_run *r,
                       const spindle_diffusion_params *p,
                       const spindle_diffusion_stats *s) {
    cJSON *st = cJSON_AddObjectToObject(root, "stats");
    cJSON_AddNumberToObject(st, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(st, "generated_tokens", p->canvas);
    cJSON_AddNumberToObject(st, "seconds", s->seconds);
    cJSON_AddNumberToObject(st, "tokens_per_second",
                            s->seconds > 0 ? p->canvas / s->seconds : 0);
    cJSON *d = cJSON_AddObjectToObject(st, "diffusion");
    cJSON_AddStringToObject(d, "remasking", spindle_remasking_name(p->remasking));
    cJSON_AddNumberToObject(d, "blocks", s->blocks);
    cJSON_AddNumberToObject(d, "steps_per_block", s->steps_per_block);
    cJSON_AddNumberToObject(d, "forwards", s->forwards);
    cJSON_AddNumberToObject(d, "tokens_per_forward",
                            s->forwards ? (double)p->canvas / s->forwards : 0);
    cJSON *c = cJSON_AddArrayToObject(d, "committed_per_step");
    for (int i = 0; i < s->n_steps; i++)
        cJSON_AddItemToArray(c, cJSON_CreateNumber(s->committed[i]));
}

static void print_result(const sp_diffusion_run *r, const spindle_diffusion_params *p,
                         const int32_t *toks, const char *text,
                         const spindle_diffusion_stats *s) {
    if (!r->json) {
        if (text) fputs(text, stdout);
        else
            for (int i = 0; i < p->canvas; i++) printf("%d ", toks[i]);
        printf("\n");
        fflush(stdout);
        fprintf(stderr, "prompt %d tokens | canvas %d tokens in %d blocks, %d "
                        "forwards, %.1f tok/s | remasking %s\n",
                r->n_prompt, p->canvas, s->blocks, s->forwards,
                s->seconds > 0 ? p->canvas / s->seconds : 0.0,
                spindle_remasking_name(p->remasking));
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(root, "prompt_tokens");
    for (int i = 0; i < r->n_prompt; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(r->prompt[i]));
    a = cJSON_AddArrayToObject(root, "tokens");
    for (int i = 0; i < p->canvas; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(toks[i]));
    if (text) cJSON_AddStringToObject(root, "text", text);
    stats_json(root, r, p, s);
    char *json = cJSON_PrintUnformatted(root);
    if (json) puts(json);
    free(json);
    cJSON_Delete(root);
}

spindle_status sp_run_diffusion(spindle_model *model, const sp_diffusion_run *r,
                                spindle_error *err) {
    const spindle_diffusion_params p = params_of(r);
    const int vocab = spindle_model_vocab_size(model);
    spindle_seq *seq = NULL;
    int32_t *toks = NULL;
    char *text = NULL;
    float *logits = NULL;
    spindle_diffusion_stats s = {0};
    spindle_status st = spindle_seq_new(model, &seq, err);
    if (!st && r->dump_logits && p.canvas > 0) {
        logits = malloc((size_t)p.canvas * (size_t)vocab * sizeof *logits);
        if (!logits) st = SPINDLE_ERR_MEMORY;
    }
    if (!st)
        st = spindle_diffusion_generate(model, seq, r->prompt, r->n_prompt, &p,
                                        &toks, logits, &s, err);
    if (!st && r->tok)
        st = spindle_tokenizer_decode(r->tok, toks, (size_t)p.canvas, true, &text,
                                      NULL, err);
    if (!st && logits && !sp_write_npy(r->dump_logits, logits, p.canvas, vocab)) {
        st = SPINDLE_ERR_IO;
        snprintf(err->message, sizeof err->message, "%s: cannot write", r->dump_logits);
    }
    if (!st) print_result(r, &p, toks, text, &s);
    spindle_free(text);
    spindle_free(toks);
    spindle_free(s.committed);
    free(logits);
    spindle_seq_free(seq);
    return st;
}
