/* The prompt file of `spindle run --prompts FILE` (src/cli/prompt_file.h):
 * plain-text and JSONL lines to prompt ids and per-line generation
 * parameters, with Qwen3's real tokenizer (loaded once; no model).
 *
 * Input: an options byte (bit 0: --chat, wrapping text lines in the chat
 * template; bit 1: no tokenizer, as for a model without one; bit 2: a
 * --system message), then the file. Invariants: a failure is one line;
 * a success has at least one prompt, every one non-empty, on increasing
 * line numbers, ids >= 0, parameters inside the documented ranges. */
#include "fuzz_tokenizer.h"

#include "cli/prompt_file.h"

static spindle_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char dir[512];
    tok = fuzz_load_real_tokenizer("qwen3", dir, sizeof dir);
    return 0;
}

static void check_job(const sp_prompt_job *j, int prev_line) {
    FUZZ_CHECK(j->line > prev_line, "line %d after %d", j->line, prev_line);
    FUZZ_CHECK(j->prompt && j->n_prompt >= 1, "empty prompt on line %d", j->line);
    for (int i = 0; i < j->n_prompt; i++) FUZZ_CHECK(j->prompt[i] >= 0, "id %d", j->prompt[i]);
    const spindle_sampler_params *s = &j->gen.sampler;
    FUZZ_CHECK(j->gen.max_tokens >= 0 && j->gen.max_tokens <= (1 << 24), "max_tokens %d",
               j->gen.max_tokens);
    FUZZ_CHECK(s->temperature >= 0 && s->temperature <= 1e4f, "temperature %g",
               (double)s->temperature);
    FUZZ_CHECK(s->top_k >= 0 && s->top_k <= (1 << 24), "top_k %d", s->top_k);
    FUZZ_CHECK(s->top_p >= 0 && s->top_p <= 1 && s->min_p >= 0 && s->min_p <= 1, "top_p/min_p");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static char *path;
    if (!path) path = fuzz_path("prompts.jsonl");
    fuzz_write(path, data + 1, size - 1);
    const sp_run_prompts_args a = {.path = path, .parallel = 1, .chat = data[0] & 1,
                                   .system = data[0] & 4 ? "Be brief." : NULL};
    const spindle_tokenizer *t = data[0] & 2 ? NULL : tok;
    spindle_gen_params base = spindle_gen_defaults();
    sp_prompt_set set = {0};
    spindle_error err = {0};
    spindle_status st = sp_prompt_set_read(&a, t, &base, &set, &err);
    if (st) {
        fuzz_check_error(st, &err);
    } else {
        FUZZ_CHECK(set.n >= 1, "no prompts accepted");
        for (int i = 0; i < set.n; i++) check_job(&set.jobs[i], i ? set.jobs[i - 1].line : 0);
    }
    sp_prompt_set_free(&set);
    return 0;
}
