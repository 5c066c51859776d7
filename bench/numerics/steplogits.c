/* steplogits MODEL PROMPT_IDS FORCED_IDS OUT.f32 : prefill PROMPT_IDS, then
 * feed FORCED_IDS one at a time; writes (1 + n_forced) x vocab f32 logits. */
#include <spindle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int parse(const char *s, int32_t *out) {
    int n = 0; char *e; while (*s) { out[n++] = strtol(s, &e, 10); s = *e ? e + 1 : e; } return n;
}
int main(int argc, char **argv) {
    int32_t prompt[4096], forced[4096];
    int np = parse(argv[2], prompt), nf = argc > 3 && strlen(argv[3]) ? parse(argv[3], forced) : 0;
    spindle_error err = {0};
    spindle_model *m; spindle_seq *seq;
    spindle_load_options lo = {.n_threads = 2};
    if (spindle_model_load(argv[1], &lo, &m, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    spindle_seq_new(m, &seq, &err);
    int V = spindle_model_vocab_size(m);
    float *lg = malloc((size_t)V * 4);
    FILE *f = fopen(argv[4], "wb");
    spindle_batch_entry e = {.seq = seq, .tokens = prompt, .n_tokens = np, .logits_mode = SPINDLE_LOGITS_LAST, .logits = lg};
    if (spindle_forward(m, &e, 1, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    fwrite(lg, 4, V, f);
    for (int i = 0; i < nf; i++) {
        e.tokens = forced + i; e.n_tokens = 1;
        if (spindle_forward(m, &e, 1, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
        fwrite(lg, 4, V, f);
    }
    fclose(f);
    return 0;
}
