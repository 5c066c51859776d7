/* The public grammar calls of include/spindle.h over the internal parser,
 * schema converter, vocabulary trie and matcher. */
#include "grammar/grammar.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct spindle_grammar_vocab {
    sp_vocab_trie trie;
};

struct spindle_grammar {
    const spindle_grammar_vocab *vocab;
    sp_gram gram;
    char *gbnf;
    /* The automaton new matchers share (one reference); replaced when
     * crowded, the old one living on with the matchers that hold it. */
    pthread_mutex_t lock;
    sp_gauto *shared;
    int refs;               /* (lock) */
};

struct spindle_grammar_matcher {
    const spindle_grammar *grammar;
    sp_gmatch *m;
};

spindle_status spindle_grammar_vocab_new(const spindle_tokenizer *tok,
                                         spindle_grammar_vocab **out,
                                         spindle_error *err) {
    if (!tok || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "grammar vocab: NULL argument");
    *out = NULL;
    spindle_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar vocab: out of memory");
    spindle_status st = sp_vocab_trie_build(tok, &v->trie, err);
    if (st) {
        free(v);
        return st;
    }
    *out = v;
    return SPINDLE_OK;
}

void spindle_grammar_vocab_free(spindle_grammar_vocab *v) {
    if (!v) return;
    sp_vocab_trie_free(&v->trie);
    free(v);
}

static char *copy_text(const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = 0;
    }
    return c;
}

/* A grammar whose text no token of the vocabulary can begin (it must
 * start with bytes that no token has) fails at compile time, as the
 * client's error, rather than in the first step of a generation. The
 * start state's mask computed here is cached in the shared automaton, so
 * the first request's first mask costs nothing more. */
static spindle_status check_start(spindle_grammar *g, spindle_error *err) {
    sp_gmatch *m = NULL;
    spindle_status st = sp_gmatch_new_on(g->shared, &m, err);
    if (st || sp_gmatch_accepting(m)) {
        sp_gmatch_free(m);
        return st;
    }
    int words = (g->vocab->trie.n_vocab + 31) / 32;
    uint32_t *bits = calloc((size_t)words + 1, sizeof *bits);
    st = bits ? sp_gmatch_mask(m, bits, err)
              : sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    bool any = false;
    for (int w = 0; !st && w < words && !any; w++) any = bits[w] != 0;
    if (!st && !any)
        st = sp_fail(err, SPINDLE_ERR_FORMAT,
                     "no token of the vocabulary can begin the grammar's text (it must "
                     "start with bytes that no token has)");
    free(bits);
    sp_gmatch_free(m);
    return st;
}

spindle_status spindle_grammar_new(const spindle_grammar_vocab *vocab,
                                   spindle_grammar_kind kind, const char *text,
                                   size_t len, spindle_grammar **out,
                                   spindle_error *err) {
    if (!vocab || !out || (kind != SPINDLE_GRAMMAR_JSON_OBJECT && !text))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "grammar: NULL argument");
    *out = NULL;
    char *gbnf = NULL;
    spindle_status st = SPINDLE_OK;
    switch (kind) {
    case SPINDLE_GRAMMAR_GBNF: gbnf = copy_text(text, len); break;
    case SPINDLE_GRAMMAR_JSON_OBJECT: st = sp_json_schema_to_gbnf("{}", 2, &gbnf, err); break;
    case SPINDLE_GRAMMAR_JSON_SCHEMA: st = sp_json_schema_to_gbnf(text, len, &gbnf, err); break;
    default: return sp_fail(err, SPINDLE_ERR_ARGUMENT, "grammar: unknown kind %d", (int)kind);
    }
    if (st) return st;
    if (!gbnf) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    spindle_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        free(gbnf);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: out of memory");
    }
    g->vocab = vocab;
    g->gbnf = gbnf;
    g->refs = 1;
    if (pthread_mutex_init(&g->lock, NULL)) {
        free(gbnf);
        free(g);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar: cannot make a lock");
    }
    st = sp_gbnf_parse(gbnf, strlen(gbnf), &g->gram, err);
    /* A grammar that matches nothing fails here, not in the first request. */
    if (!st) st = sp_gauto_new(&g->gram, &vocab->trie, &g->shared, err);
    if (!st) st = check_start(g, err);
    if (st) {
        spindle_grammar_free(g);
        return st;
    }
    *out = g;
    return SPINDLE_OK;
}

spindle_grammar *spindle_grammar_retain(spindle_grammar *g) {
    if (!g) return NULL;
    pthread_mutex_lock(&g->lock);
    g->refs++;
    pthread_mutex_unlock(&g->lock);
    return g;
}

void spindle_grammar_free(spindle_grammar *g) {
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    bool last = --g->refs == 0;
    pthread_mutex_unlock(&g->lock);
    if (!last) return;
    sp_gauto_release(g->shared);
    pthread_mutex_destroy(&g->lock);
    sp_gram_free(&g->gram);
    free(g->gbnf);
    free(g);
}

int spindle_grammar_vocab_size(const spindle_grammar *g) {
    return g ? g->vocab->trie.n_vocab : 0;
}

const char *spindle_grammar_gbnf(const spindle_grammar *g) {
    return g ? g->gbnf : NULL;
}

spindle_status spindle_grammar_matcher_new(const spindle_grammar *g,
                                           spindle_grammar_matcher **out,
                                           spindle_error *err) {
    if (!g || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "grammar matcher: NULL argument");
    *out = NULL;
    spindle_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(err, SPINDLE_ERR_MEMORY, "grammar matcher: out of memory");
    m->grammar = g;
    spindle_status st = SPINDLE_OK;
    spindle_grammar *mut = (spindle_grammar *)g;  /* the lock and the cache only */
    pthread_mutex_lock(&mut->lock);
    if (sp_gauto_crowded(mut->shared)) {
        sp_gauto *fresh = NULL;
        st = sp_gauto_new(&g->gram, &g->vocab->trie, &fresh, err);
        if (!st) {
            sp_gauto_release(mut->shared);
            mut->shared = fresh;
        }
    }
    if (!st) st = sp_gmatch_new_on(mut->shared, &m->m, err);
    pthread_mutex_unlock(&mut->lock);
    if (st) {
        free(m);
        return st;
    }
    *out = m;
    return SPINDLE_OK;
}

void spindle_grammar_matcher_free(spindle_grammar_matcher *m) {
    if (!m) return;
    sp_gmatch_free(m->m);
    free(m);
}

spindle_status spindle_grammar_matcher_mask(spindle_grammar_matcher *m,
                                            uint32_t *bits, spindle_error *err) {
    if (!m || !bits) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "grammar mask: NULL argument");
    return sp_gmatch_mask(m->m, bits, err);
}

spindle_status spindle_grammar_matcher_accept(spindle_grammar_matcher *m,
                                              int32_t token, spindle_error *err) {
    if (!m) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "grammar accept: NULL matcher");
    const sp_vocab_trie *t = &m->grammar->vocab->trie;
    if (token < 0 || token >= t->n_vocab || t->tok_len[token] == 0)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "grammar: token %d has no bytes the grammar can match",
                       (int)token);
    spindle_error local = {0};
    if (!sp_gmatch_accept_bytes(m->m, (const uint8_t *)t->bytes + t->tok_off[token],
                                t->tok_len[token], &local)) {
        if (local.status) {
            if (err) *err = local;
            return local.status;
        }
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "grammar rejects token %d",
                       (int)token);
    }
    return SPINDLE_OK;
}

int32_t spindle_grammar_matcher_state(const spindle_grammar_matcher *m) {
    return m ? sp_gmatch_state(m->m) : -1;
}

void spindle_grammar_matcher_restore(spindle_grammar_matcher *m, int32_t state) {
    if (m) sp_gmatch_set_state(m->m, state);
}

bool spindle_grammar_matcher_accepting(const spindle_grammar_matcher *m) {
    return m && sp_gmatch_accepting(m->m);
}

bool spindle_grammar_matcher_finished(spindle_grammar_matcher *m) {
    return m && sp_gmatch_finished(m->m);
}
