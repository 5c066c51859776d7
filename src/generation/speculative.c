/* The shared speculative round of the step engine (the rule is stated in
 * speculative.h) and its adaptive control.
 *
 * Adaptive control, per request. Each draft position j keeps a decayed
 * count of how often it was verified and accepted (given that positions
 * < j were), giving the conditional acceptance a_j = (acc_j + 1) /
 * (tried_j + 2) (a prior of 1/2). Drafting k tokens then yields
 *     E(k) = 1 + sum_{j<k} prod_{i<=j} a_i
 * expected tokens. T(n), the time of a step of n rows, is measured: an
 * exponential average per row count over the engine's own steps made only
 * of decode and verify rows (interpolated between measured counts, and
 * beyond them priced optimistically at a tenth of a one-row step per row,
 * so that larger rounds get tried and measured). A draft row's price
 * inside the batch is thus measured, not assumed: on CPUs a few rows can
 * cost far more than one (a matrix-vector kernel against a small GEMM).
 * A step of R rows that would produce N tokens produces N - 1 + E(k) in
 * T(R + k) with k drafts of this request, and k is chosen to maximize
 * that ratio (the requests decide in turn, each seeing the rows and
 * tokens the previous ones added). A drafter that runs a model pays for
 * its drafts before the forward: T also holds the measured time of a
 * draft token (a draft model's batched step, which serves every request
 * of the round, so a request pays only for steps beyond those already
 * planned; the MTP head's step, per request), so that a draft model about
 * as slow as the target turns itself off. When k = 0 wins the
 * request is "off": its rounds are plain decode rows, and after `backoff`
 * such rounds one probe round drafts everything the drafter offers (up to
 * K: it measures the acceptance deep in the draft and the price of a long
 * round, which a one-token probe never would; a drafter running a model
 * only what it drafts in one decode step's time: probe_k) with the counts
 * halved toward the prior; backoff starts at 8 and doubles up to 256 while
 * the probes keep losing. fixed_k turns the rule off (always draft what
 * the drafter offers, up to K). */
#include "generation/speculative.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "models/model.h"
#include "models/mtp.h"

#define COUNT_DECAY 0.9
#define BACKOFF_MIN SP_SPEC_BACKOFF_MIN
#define BACKOFF_MAX SP_SPEC_BACKOFF_MAX

/* The measured time of a step of n decode and verify rows, n < COST_ROWS
 * (an exponential average per row count, so that a slow step is
 * forgotten). */
#define COST_ROWS 256
#define COST_WEIGHT 0.2
typedef struct cost_table {
    double seconds[COST_ROWS];
    bool seen[COST_ROWS];
} cost_table;

/* The measured time of one draft token of a drafter that runs a model
 * (an exponential average; 0 until measured, so that the first round is
 * tried and timed). */
typedef struct draft_cost {
    double seconds;
    bool seen;
} draft_cost;

struct sp_spec_engine {
    int rows_cap;                  /* logits rows e->logits holds */
    sp_draft_job *jobs;            /* [max_seqs] */
    sp_request **job_req;
    spindle_batch_entry *draft_entries;
    cost_table cost;
    draft_cost model_draft;        /* one batched step of the draft models */
    draft_cost mtp_draft;          /* one MTP head step */
    sp_mtp *mtp;                   /* the target's MTP head, once asked for */
};

/* What a round has planned so far, request by request: the step's
 * expected tokens and rows, and the drafting time before its forward. */
typedef struct round_plan {
    double tokens;
    int rows;
    double draft_seconds;
    int model_steps;               /* steps of the batched draft-model run */
} round_plan;

static double step_time(const cost_table *c, int rows);

/* How a request's k drafts add to the plan's drafting time: none for a
 * lookup (NULL cost), k MTP steps, or the draft-model steps beyond those
 * already planned. A drafter not yet measured is free: its first round
 * drafts, and measures it. */
typedef struct draft_price {
    const draft_cost *cost;
    bool batched;
} draft_price;

static double draft_token_seconds(draft_price price) {
    return price.cost && price.cost->seen ? price.cost->seconds : 0;
}

static double extra_draft_seconds(const round_plan *p, draft_price price, int k) {
    int steps = price.batched ? (k > p->model_steps ? k - p->model_steps : 0) : k;
    return draft_token_seconds(price) * steps;
}

/* A probe drafts what the drafter offers: a long probe measures the
 * acceptance deep in the draft and the price of a long round, and on CPUs
 * a step's first extra rows cost the most (a 2-row step ~2 one-row steps,
 * an 11-row one ~3.5), so short probes would keep a good drafter off. A
 * drafter running a model drafts only as many tokens as its measured
 * steps make in one decode step's time (at least one), and none once it
 * measures slower per token than a decode step: k drafts and a verify
 * would then cost more than the k + 1 plain steps they could replace, at
 * any acceptance, and each probe would pay for feeding it the tokens it
 * missed (full probes cost a plain stream beside such a draft model ~35 %,
 * bench/history/until-2026-12-07.md). */
static int probe_k(const cost_table *c, draft_price price, int avail) {
    const double per = draft_token_seconds(price), one = step_time(c, 1);
    if (per <= 0) return avail;
    if (per >= one) return 0;
    int k = (int)(one / per);
    return k < avail ? k : avail;
}

static void observe_draft(draft_cost *d, double seconds, int steps) {
    if (steps <= 0) return;
    double per = seconds / steps;
    d->seconds = d->seen ? (1 - COST_WEIGHT) * d->seconds + COST_WEIGHT * per : per;
    d->seen = true;
}

const char *spindle_spec_mode_name(spindle_spec_mode mode) {
    static const char *const names[] = {"none", "ngram", "draft", "mtp"};
    return (unsigned)mode < 4 ? names[mode] : NULL;
}

/* How far back every layer of m can surely be truncated. */
static int rollback_limit(const spindle_model *m) {
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (m->state_desc[l].kind == SP_STATE_WINDOW_KV ||
            m->state_desc[l].kind == SP_STATE_RECURRENT)
            return m->max_rollback;
    return SPINDLE_MAX_DRAFT_TOKENS;
}

static sp_spec_engine *engine_state(spindle_engine *e);

/* A request's MTP drafter over its companion head, else the engine's
 * head of the target (bound at the first request that asks for one). */
static spindle_status new_mtp_draft(spindle_engine *e, sp_mtp *companion,
                                    int cap, const spindle_sampler *sampler,
                                    sp_mtp_draft **out, spindle_error *err) {
    if (companion) {
        if (!sp_mtp_binds(companion, e->model))
            return sp_fail(err, SPINDLE_ERR_ARGUMENT, "the MTP companion head "
                           "was loaded for another model");
        return sp_mtp_draft_new(companion, cap, sampler, out, err);
    }
    sp_spec_engine *se = engine_state(e);
    if (!se) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!se->mtp) {
        spindle_status st = sp_mtp_new(e->model, &se->mtp, err);
        if (st) return st;
    }
    return sp_mtp_draft_new(se->mtp, cap, sampler, out, err);
}

spindle_status sp_spec_new(spindle_engine *e, const spindle_spec_params *p,
                           bool jump_forward, int cap,
                           const spindle_sampler *sampler, sp_spec **out,
                           spindle_error *err) {
    *out = NULL;
    if (p->mode == SPINDLE_SPEC_NONE && !jump_forward) return SPINDLE_OK;
    if (p->mode != SPINDLE_SPEC_NONE && p->mode != SPINDLE_SPEC_NGRAM &&
        p->mode != SPINDLE_SPEC_DRAFT && p->mode != SPINDLE_SPEC_MTP)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "unknown speculation mode %d",
                       (int)p->mode);
    /* Jump-forward alone (no drafter): forced spans up to the most a
     * round verifies. */
    const int companion_k = p->mode == SPINDLE_SPEC_MTP
                                ? sp_mtp_block_size(p->mtp_head) : 0;
    int k = p->num_draft_tokens ? p->num_draft_tokens
            : p->mode == SPINDLE_SPEC_NONE ? SPINDLE_MAX_DRAFT_TOKENS
            : companion_k                  ? companion_k
                                           : SPINDLE_DEFAULT_DRAFT_TOKENS;
    if (k < 1 || k > SPINDLE_MAX_DRAFT_TOKENS)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "num_draft_tokens must be in [1, %d], got %d",
                       SPINDLE_MAX_DRAFT_TOKENS, k);
    if (p->min_draft_tokens < 0 || p->min_draft_tokens > k)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "min_draft_tokens must be in [0, %d], got %d", k,
                       p->min_draft_tokens);
    if (p->mode == SPINDLE_SPEC_DRAFT && !p->draft_model)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "speculation mode \"draft\" needs a draft model");
    sp_spec *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    s->p = *p;
    s->p.num_draft_tokens = k;
    int limit = rollback_limit(e->model);
    s->max_draft = k < limit ? k : limit;
    s->n_round = -1;
    s->backoff = BACKOFF_MIN;
    /* A drafter without the request's sampler drafts its argmax. */
    if (e->testing.greedy_drafts) sampler = NULL;
    spindle_status st =
        p->mode == SPINDLE_SPEC_NONE ? SPINDLE_OK
        : p->mode == SPINDLE_SPEC_NGRAM
            ? sp_ngram_new(p->ngram_min ? p->ngram_min : 1,
                           p->ngram_max ? p->ngram_max : 3, &s->ngram, err)
        : p->mode == SPINDLE_SPEC_MTP
            ? new_mtp_draft(e, p->mtp_head, cap, sampler, &s->mtp, err)
            : sp_draft_seq_new(p->draft_model, e->vocab, sampler, &s->dseq,
                               err);
    if (st) {
        sp_spec_free(s);
        return st;
    }
    *out = s;
    return SPINDLE_OK;
}

void sp_spec_free(sp_spec *s) {
    if (!s) return;
    sp_ngram_free(s->ngram);
    sp_draft_seq_free(s->dseq);
    sp_mtp_draft_free(s->mtp);
    free(s);
}

void sp_spec_engine_free(sp_spec_engine *se) {
    if (!se) return;
    free(se->jobs);
    free(se->job_req);
    free(se->draft_entries);
    sp_mtp_free(se->mtp);
    free(se);
}

static sp_spec_engine *engine_state(spindle_engine *e) {
    if (e->spec) return e->spec;
    sp_spec_engine *se = calloc(1, sizeof *se);
    size_t n = (size_t)e->max_seqs;
    if (se) {
        se->rows_cap = e->max_seqs;
        se->jobs = calloc(n, sizeof *se->jobs);
        se->job_req = calloc(n, sizeof *se->job_req);
        se->draft_entries = calloc(n, sizeof *se->draft_entries);
    }
    if (!se || !se->jobs || !se->job_req || !se->draft_entries) {
        sp_spec_engine_free(se);
        return NULL;
    }
    return e->spec = se;
}

/* ---- the cost model and the choice of k ---- */

/* Only steps of decode and verify rows count: a prompt chunk's rows cost
 * what a large matrix product costs per row, which says little about a
 * few verify rows beside the decode rows. */
void sp_spec_observe_step(spindle_engine *e, int n_entries, double seconds) {
    if (!e->spec || e->testing.fixed_costs) return;
    int rows = 0;
    for (int i = 0; i < n_entries; i++) {
        const sp_request *r = e->entry_req[i];
        if (r->prefilled < r->n_prompt) return;
        rows += e->entries[i].n_tokens;
    }
    cost_table *c = &e->spec->cost;
    if (rows >= COST_ROWS) return;
    c->seconds[rows] = c->seen[rows] ? (1 - COST_WEIGHT) * c->seconds[rows] +
                                           COST_WEIGHT * seconds
                                     : seconds;
    c->seen[rows] = true;
}

/* The expected time of a step of `rows` rows: measured, else interpolated
 * between the nearest measured counts, else (beyond them) priced at a
 * tenth of the smallest measured step per extra row, an optimistic prior
 * that makes the rule try larger rounds and measure them. */
static double step_time(const cost_table *c, int rows) {
    int lo = rows < COST_ROWS ? rows : COST_ROWS - 1, hi = lo, first = 1;
    while (lo > 0 && !c->seen[lo]) lo--;
    while (hi < COST_ROWS && !c->seen[hi]) hi++;
    while (first < COST_ROWS && !c->seen[first]) first++;
    if (first == COST_ROWS) return 1 + 0.1 * (rows - 1);
    double per_row = 0.1 * c->seconds[first];
    if (lo == rows) return c->seconds[rows];
    if (lo > 0 && hi < COST_ROWS)
        return c->seconds[lo] +
               (c->seconds[hi] - c->seconds[lo]) * (rows - lo) / (hi - lo);
    if (lo > 0) return c->seconds[lo] + per_row * (rows - lo);
    return c->seconds[hi] - per_row * (hi - rows);
}

/* The k <= avail maximizing (tokens - 1 + E(k)) / T(rows + k), T with
 * the round's drafting time. */
static int choose_k(const sp_spec *s, const cost_table *c, int avail,
                    const round_plan *p, draft_price price, double *gain) {
    int best = 0;
    double best_rate = p->tokens / (step_time(c, p->rows) + p->draft_seconds);
    double expected = 1, reach = 1;
    *gain = 0;
    for (int k = 1; k <= avail; k++) {
        reach *= (s->acc[k - 1] + 1) / (s->tried[k - 1] + 2);
        expected += reach;
        double rate = (p->tokens - 1 + expected) /
                      (step_time(c, p->rows + k) + p->draft_seconds +
                       extra_draft_seconds(p, price, k));
        if (k >= s->p.min_draft_tokens && rate > best_rate) {
            best_rate = rate;
            best = k;
            *gain = expected - 1;
        }
    }
    return best;
}

/* The adaptive rule's k for one round (header comment). */
static int adapt_k(sp_spec *s, const cost_table *c, int avail, round_plan *p,
                   draft_price price) {
    if (avail <= 0 || avail < s->p.min_draft_tokens) return 0;
    if (s->p.fixed_k) return avail;
    double gain;
    int k = choose_k(s, c, avail, p, price, &gain);
    if (k > 0) {
        s->off_rounds = 0;
        s->backoff = BACKOFF_MIN;
    } else if (++s->off_rounds >= s->backoff) {
        s->off_rounds = 0;
        s->backoff = s->backoff * 2 < BACKOFF_MAX ? s->backoff * 2 : BACKOFF_MAX;
        for (int j = 0; j < SPINDLE_MAX_DRAFT_TOKENS; j++) {
            s->tried[j] *= 0.5;
            s->acc[j] *= 0.5;
        }
        k = probe_k(c, price, avail);
        if (k > 0 && k < s->p.min_draft_tokens) k = s->p.min_draft_tokens;
        gain = 0;
    }
    p->tokens += gain;
    p->rows += k;
    p->draft_seconds += extra_draft_seconds(p, price, k);
    if (price.batched && k > p->model_steps) p->model_steps = k;
    return k;
}

/* ---- the round ---- */

/* Drafts r may verify this step: within K, its token budget and room, the
 * context (so that no stop rule sees a sequence longer than plain decoding
 * would have it) and the rows left. */
static int draft_room(const spindle_engine *e, const sp_request *r, int spare) {
    int n_hist = r->n_prompt + r->n_generated;
    int room = r->spec->max_draft;
    int left = r->max_tokens - r->n_generated - 1;
    if (left < room) room = left;
    if (r->cap - n_hist - 1 < room) room = r->cap - n_hist - 1;
    if (e->context > 0) {
        int ctx = e->context - spindle_seq_length(r->seq) - 2;
        if (ctx < room) room = ctx;
    }
    if (spare < room) room = spare;
    return room > 0 ? room : 0;
}

/* Grow e->logits to `rows` rows (false: it stays as it is). */
static bool reserve_rows(spindle_engine *e, sp_spec_engine *se, int rows) {
    if (rows <= se->rows_cap) return true;
    float *grown = realloc(e->logits, (size_t)rows * e->vocab * sizeof *grown);
    if (!grown) return false;
    e->logits = grown;
    se->rows_cap = rows;
    return true;
}

/* The draft-model jobs, one batched run per distinct draft model; each
 * request's round gets what its job drafted. */
static void run_draft_models(const spindle_engine *e, sp_spec_engine *se,
                             int n_jobs) {
    for (int first = 0; first < n_jobs;) {
        spindle_model *m = sp_draft_seq_model(se->jobs[first].seq);
        int end = first + 1;
        for (int j = end; j < n_jobs; j++) {
            if (sp_draft_seq_model(se->jobs[j].seq) != m) continue;
            sp_draft_job job = se->jobs[j];
            sp_request *r = se->job_req[j];
            se->jobs[j] = se->jobs[end];
            se->job_req[j] = se->job_req[end];
            se->jobs[end] = job;
            se->job_req[end++] = r;
        }
        int steps = 0;
        for (int j = first; j < end; j++)
            if (se->jobs[j].want > steps) steps = se->jobs[j].want;
        double seconds = sp_draft_model_run(se->jobs + first, end - first,
                                            se->draft_entries);
        if (e->testing.draft_delay > 0) {
            double d = e->testing.draft_delay * steps;
            struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
            nanosleep(&ts, NULL);
            seconds += d;
        }
        if (!e->testing.fixed_costs)
            observe_draft(&se->model_draft, seconds, steps);
        for (int j = first; j < end; j++)
            se->job_req[j]->spec->n_round = se->jobs[j].got;
        first = end;
    }
}

/* Drafted tokens the grammar rejects never reach verification: the draft
 * ends before the first of them. */
static int grammar_cut(sp_request *r, sp_spec *s, int d) {
    if (!r->grammar.matcher || d <= 0) return d;
    int kept = sp_grammar_gate_valid_prefix(&r->grammar, s->draft, d, r->end_ids, r->n_end);
    s->stats.grammar_cut += d - kept;
    return kept;
}

void sp_spec_draft_round(spindle_engine *e, int spare) {
    int n_decode = 0, n_spec = 0;
    for (int i = 0; i < e->n_running; i++) {
        sp_request *r = e->running[i];
        if (r->prefilled < r->n_prompt) continue;
        n_decode++;
        if (r->spec) n_spec++;
    }
    sp_spec_engine *se = n_spec ? engine_state(e) : NULL;
    if (!se) return;
    round_plan plan = {.tokens = n_decode, .rows = n_decode};
    const draft_price lookup = {0}, mtp = {&se->mtp_draft, false},
                      model = {&se->model_draft, true};
    spare -= n_decode;
    if (spare > e->max_batch_tokens / 2) spare = e->max_batch_tokens / 2;
    int n_jobs = 0, rows = e->max_seqs;
    for (int i = 0; i < e->n_running; i++) {
        sp_request *r = e->running[i];
        sp_spec *s = r->spec;
        if (!s || r->prefilled < r->n_prompt) continue;
        int n_hist = r->n_prompt + r->n_generated;
        int room = draft_room(e, r, spare), d = 0;
        /* The constraint drafter first: a span the grammar forces is
         * accepted for sure, so it is always worth its rows. */
        s->forced_round = false;
        if (r->grammar.matcher && room > 0)
            d = sp_grammar_gate_forced(&r->grammar, room, s->draft);
        if (d > 0) {
            s->forced_round = true;
            s->stats.forced += d;
            plan.tokens += d;
            plan.rows += d;
        } else if (s->ngram && room > 0) {
            d = sp_ngram_propose(s->ngram, r->tokens, n_hist, room, s->draft);
            d = grammar_cut(r, s, d);
            d = adapt_k(s, &se->cost, d, &plan, lookup);
        } else if (s->mtp && room > 0) {
            /* Priced like a draft model's: k first, then that many. */
            d = adapt_k(s, &se->cost, room, &plan, mtp);
            double t0 = sp_engine_now();
            int want = d;
            d = sp_mtp_draft_propose(s->mtp, r->tokens, n_hist,
                                     spindle_seq_length(r->seq), d, s->draft);
            if (!e->testing.fixed_costs)
                observe_draft(&se->mtp_draft, sp_engine_now() - t0, want);
            d = grammar_cut(r, s, d);
        } else if (s->dseq) {
            d = adapt_k(s, &se->cost, room, &plan, model);
            if (d > 0) {
                se->jobs[n_jobs] = (sp_draft_job){
                    .seq = s->dseq, .history = r->tokens, .n = n_hist,
                    .want = d, .out = s->draft};
                se->job_req[n_jobs++] = r;
            }
        }
        s->n_round = d;
        spare -= d;
        rows += d;
    }
    run_draft_models(e, se, n_jobs);
    for (int j = 0; j < n_jobs; j++) {
        sp_request *r = se->job_req[j];
        int kept = grammar_cut(r, r->spec, r->spec->n_round);
        rows -= r->spec->n_round - kept;
        r->spec->n_round = kept;
    }
    if (!reserve_rows(e, se, rows))
        for (int i = 0; i < e->n_running; i++)
            if (e->running[i]->spec) e->running[i]->spec->n_round = 0;
    for (int i = 0; i < e->n_running; i++) {
        sp_request *r = e->running[i];
        if (!r->spec || r->spec->n_round <= 0) continue;
        memcpy(r->tokens + r->n_prompt + r->n_generated, r->spec->draft,
               (size_t)r->spec->n_round * sizeof *r->spec->draft);
    }
}

float *sp_spec_hidden_rows(sp_request *r, int n_tokens) {
    if (!r->spec || !r->spec->mtp) return NULL;
    return sp_mtp_draft_taps(r->spec->mtp, spindle_seq_length(r->seq), n_tokens);
}

int sp_spec_round_drafts(const sp_request *r) {
    return r->spec ? r->spec->n_round : -1;
}

/* Count the round in the statistics and the acceptance estimates: rows
 * 0 .. verified - 1 compared their draft, `accepted` of them matched. */
static void count_round(sp_spec *s, int drafted, int verified, int accepted,
                        int emitted) {
    spindle_spec_stats *t = &s->stats;
    t->target_forwards++;
    t->decode_tokens += emitted;
    /* A forced span says nothing about the drafter. */
    if (s->forced_round) return;
    t->drafted += drafted;
    t->accepted += accepted;
    for (int j = 0; j < drafted; j++) t->drafted_at[j]++;
    for (int j = 0; j < accepted; j++) t->accepted_at[j]++;
    for (int j = 0; j < verified; j++) {
        s->tried[j] = s->tried[j] * COUNT_DECAY + 1;
        s->acc[j] = s->acc[j] * COUNT_DECAY + (j < accepted);
    }
}

/* The broken rule of sp_engine_testing.always_accept: only the draft can
 * win. */
static void force_token(float *row, int vocab, int32_t token) {
    for (int i = 0; i < vocab; i++)
        if (i != token) row[i] = -INFINITY;
}

void sp_spec_take_round(spindle_engine *e, sp_request *r,
                        const spindle_batch_entry *en) {
    sp_spec *s = r->spec;
    int d = s->n_round > 0 ? s->n_round : 0;
    s->n_round = -1;
    int n_before = r->n_prompt + r->n_generated;
    int base = spindle_seq_length(r->seq) - (d + 1);
    int emitted = 0, accepted = 0;
    for (int i = 0; i <= d; i++) {
        float *row = en->logits + (size_t)i * e->vocab;
        if (i < d && e->testing.always_accept) force_token(row, e->vocab, s->draft[i]);
        spindle_status st = SPINDLE_OK;
        bool stop = sp_request_take_token(e, r, row, &r->reason, &st, &r->error);
        if (st) {
            sp_request_set_state(r, SP_REQ_ENDING);
            r->reason = SPINDLE_STOP_ERROR;
            break;
        }
        emitted++;
        bool match = i < d && r->tokens[n_before + i] == s->draft[i];
        accepted += match;
        if (stop) sp_request_set_state(r, SP_REQ_ENDING);
        if (stop || !match) break;
    }
    count_round(s, d, emitted < d ? emitted : d, accepted, emitted);
    if (s->dseq) sp_draft_seq_rewind(s->dseq, n_before, d, accepted);
    spindle_error err;
    if (spindle_seq_length(r->seq) > base + emitted &&
        spindle_seq_truncate(r->seq, base + emitted, &err) && !sp_request_ending(r)) {
        r->error = err;
        sp_request_set_state(r, SP_REQ_ENDING);
        r->reason = SPINDLE_STOP_ERROR;
    }
}

void sp_spec_stats(const sp_request *r, spindle_spec_stats *out) {
    if (r->spec) *out = r->spec->stats;
    else memset(out, 0, sizeof *out);
}
