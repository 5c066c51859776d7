/* The multi-token-prediction head (src/models/mtp.h) on a model's files,
 * for tests/parity/test_mtp.py to compare against its numpy oracle
 * (tests/parity/mtp_numpy_ref.py).
 *
 *   mtp_harness MODEL --tokens T0,T1,...,TN-1 --prompt-len P --out FILE
 *
 * The target runs over T0..TP-1, its hidden states (before the final
 * norm) tapped; the head then runs teacher-forced over rows j = 0..P-1
 * (token T(j+1), the target's hidden h_j), and recursively for rows
 * P..N-2 (token T(j+1), the head's own previous output). FILE gets f32
 * hidden[P][hidden] then logits[N-1][vocab]; stdout one JSON line with the
 * shapes.
 *
 *   mtp_harness MODEL --tokens ... --prompt-len P --propose K
 *
 * The MTP drafter (generation/drafter_mtp.c) instead: the target's taps
 * over T0..TP-1, then K drafts after the pending token TP (printed as
 * "drafts"); then the target takes TP, TP+1 and TP+2 (as if two drafts
 * were accepted) and the same drafter drafts again after TP+3
 * ("drafts_after", its head caught up incrementally, the recursion rows of
 * the first round dropped), beside a fresh drafter fed all P + 3 taps at
 * once ("drafts_fresh"), which must agree, and so must the logits of their
 * last head rows ("after_vs_fresh": the largest difference over the
 * fresh logits' standard deviation).
 * --companion DIR: the head of an MTP companion directory
 * (spindle_mtp_head_load) instead of the one in MODEL's checkpoint.
 * Exits 2 on a usage or load error, 1 on a failed forward. */
#include "generation/speculative.h"
#include "models/mtp.h"
#include "spindle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 256

static int parse_tokens(const char *s, int32_t *out) {
    int n = 0;
    for (char *end; *s && n < MAX_TOKENS; s = *end ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 1 << 30) return -1;
        out[n++] = (int32_t)v;
    }
    return n;
}

static int fail(const char *what, const spindle_error *err) {
    fprintf(stderr, "mtp_harness: %s: %s\n", what, err->message);
    return 1;
}

static int run(spindle_model *m, sp_mtp *head, const int32_t *tok, int n_tok,
               int prompt, FILE *out) {
    const int d = spindle_model_hidden_size(m), vocab = spindle_model_vocab_size(m);
    const int rows = n_tok - 1;
    float *hidden = malloc(sizeof(float) * (size_t)prompt * d);
    float *g = malloc(sizeof(float) * (size_t)rows * d);
    float *logits = malloc(sizeof(float) * (size_t)rows * vocab);
    float *last = malloc(sizeof(float) * (size_t)vocab);
    spindle_seq *ts = NULL, *hs = NULL;
    spindle_error err;
    int rc = 1;
    if (!hidden || !g || !logits || !last ||
        spindle_seq_new(m, &ts, &err) ||
        spindle_seq_new(sp_mtp_model(head), &hs, &err)) {
        fail("setup", &err);
        goto done;
    }
    spindle_batch_entry e = {.seq = ts, .tokens = tok, .n_tokens = prompt,
                             .logits_mode = SPINDLE_LOGITS_LAST,
                             .logits = last, .hidden = hidden};
    if (spindle_forward(m, &e, 1, &err)) { fail("target forward", &err); goto done; }
    if (sp_mtp_forward(head, hs, tok + 1, hidden, prompt, true, logits, g, &err)) {
        fail("MTP forward", &err);
        goto done;
    }
    for (int j = prompt; j < rows; j++)
        if (sp_mtp_forward(head, hs, tok + j + 1, g + (size_t)(j - 1) * d, 1, true,
                           logits + (size_t)j * vocab, g + (size_t)j * d, &err)) {
            fail("MTP recursion", &err);
            goto done;
        }
    fwrite(hidden, sizeof(float), (size_t)prompt * d, out);
    fwrite(logits, sizeof(float), (size_t)rows * vocab, out);
    printf("{\"hidden_rows\": %d, \"hidden_size\": %d, \"logit_rows\": %d, "
           "\"vocab\": %d, \"mtp_length\": %d}\n",
           prompt, d, rows, vocab, spindle_seq_length(hs));
    rc = 0;
done:
    spindle_seq_free(ts);
    spindle_seq_free(hs);
    free(hidden);
    free(g);
    free(logits);
    free(last);
    return rc;
}

static void print_drafts(const char *key, const int32_t *t, int n, bool last) {
    printf("\"%s\": [", key);
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", t[i]);
    printf("]%s", last ? "}\n" : ", ");
}

/* The target over tok[from..to) into s, its hidden rows into d's taps. */
static bool target_rows(spindle_model *m, spindle_seq *s, sp_mtp_draft *d,
                        const int32_t *tok, int from, int to, float *last) {
    spindle_error err;
    spindle_batch_entry e = {.seq = s, .tokens = tok + from, .n_tokens = to - from,
                             .logits_mode = SPINDLE_LOGITS_LAST, .logits = last,
                             .hidden = sp_mtp_draft_taps(d, from, to - from)};
    return e.hidden && !spindle_forward(m, &e, 1, &err);
}

static int propose(spindle_model *m, sp_mtp *head, const int32_t *tok,
                   int n_tok, int P, int k) {
    if (P + 4 > n_tok) return 2;
    spindle_error err;
    sp_mtp_draft *d = NULL, *fresh = NULL;
    spindle_seq *s = NULL, *s2 = NULL;
    float *last = malloc(sizeof(float) * (size_t)spindle_model_vocab_size(m));
    int32_t a[SPINDLE_MAX_DRAFT_TOKENS], b[SPINDLE_MAX_DRAFT_TOKENS],
        c[SPINDLE_MAX_DRAFT_TOKENS];
    int rc = 1, na = 0, nb = 0, nc = 0;
    if (!last || sp_mtp_draft_new(head, n_tok, NULL, &d, &err) ||
        sp_mtp_draft_new(head, n_tok, NULL, &fresh, &err) ||
        spindle_seq_new(m, &s, &err) || spindle_seq_new(m, &s2, &err))
        goto done;
    if (!target_rows(m, s, d, tok, 0, P, last)) goto done;
    na = sp_mtp_draft_propose(d, tok, P + 1, P, k, a);
    if (!target_rows(m, s, d, tok, P, P + 3, last)) goto done;
    nb = sp_mtp_draft_propose(d, tok, P + 4, P + 3, k, b);
    if (!target_rows(m, s2, fresh, tok, 0, P + 3, last)) goto done;
    nc = sp_mtp_draft_propose(fresh, tok, P + 4, P + 3, k, c);
    const float *la = sp_mtp_draft_last_logits(d), *lf = sp_mtp_draft_last_logits(fresh);
    const int V = spindle_model_vocab_size(m);
    double diff = 0, mean = 0, var = 0;
    for (int i = 0; i < V; i++) mean += lf[i] / V;
    for (int i = 0; i < V; i++) {
        var += (lf[i] - mean) * (lf[i] - mean) / V;
        if (fabs(la[i] - lf[i]) > diff) diff = fabs(la[i] - lf[i]);
    }
    printf("{\"after_vs_fresh\": %g, ", diff / sqrt(var));
    print_drafts("drafts", a, na, false);
    print_drafts("drafts_after", b, nb, false);
    print_drafts("drafts_fresh", c, nc, true);
    rc = 0;
done:
    if (rc) fprintf(stderr, "mtp_harness: the drafter failed\n");
    sp_mtp_draft_free(d);
    sp_mtp_draft_free(fresh);
    spindle_seq_free(s);
    spindle_seq_free(s2);
    free(last);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *out_path = NULL, *companion = NULL;
    int prompt = 0, k = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = argv[++i];
        else if (!strcmp(argv[i], "--prompt-len") && i + 1 < argc) prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--propose") && i + 1 < argc) k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--companion") && i + 1 < argc) companion = argv[++i];
        else if (!model) model = argv[i];
        else { fprintf(stderr, "mtp_harness: unknown argument %s\n", argv[i]); return 2; }
    }
    int32_t tok[MAX_TOKENS];
    const int n_tok = tokens ? parse_tokens(tokens, tok) : -1;
    if (!model || (!out_path && !k) || n_tok < 2 || prompt < 1 ||
        prompt >= n_tok || k < 0 || k > SPINDLE_MAX_DRAFT_TOKENS) {
        fprintf(stderr, "usage: mtp_harness MODEL --tokens T0,T1,... "
                        "--prompt-len P (1 <= P < count) (--out FILE | "
                        "--propose K)\n");
        return 2;
    }
    spindle_error err;
    spindle_model *m = NULL;
    sp_mtp *head = NULL;
    const spindle_load_options lo = {.n_threads = 1, .max_context = 512};
    if (spindle_model_load(model, &lo, &m, &err) ||
        (companion ? spindle_mtp_head_load(m, companion, &head, &err)
                   : sp_mtp_new(m, &head, &err))) {
        fprintf(stderr, "mtp_harness: %s\n", err.message);
        spindle_model_free(m);
        return 2;
    }
    int rc = 2;
    if (k) {
        rc = propose(m, head, tok, n_tok, prompt, k);
    } else {
        FILE *out = fopen(out_path, "wb");
        rc = out ? run(m, head, tok, n_tok, prompt, out) : 2;
        if (out && fclose(out)) rc = 2;
    }
    sp_mtp_free(head);
    spindle_model_free(m);
    return rc;
}
