/* A request's response_format / grammar compiled against the server's
 * tokenizer. The vocabulary trie is built on the first such request and
 * kept for the server's life, and so are the last few compiled grammars
 * (a client sends the same schema again and again: the second request
 * skips the compile and finds the first one's states and masks).
 * The cache holds SP_SERVER_GRAMMARS (8) grammars keyed by kind and text, the
 * least recently used replaced. */
#include "server/state.h"

#include <stdlib.h>
#include <string.h>

static spindle_grammar *cached(sp_server *s, spindle_grammar_kind kind, const char *text) {
    for (int i = 0; i < SP_SERVER_GRAMMARS; i++) {
        sp_cached_grammar *c = &s->grammars[i];
        if (c->text && c->kind == (int)kind && !strcmp(c->text, text)) {
            c->used = ++s->grammar_clock;
            return spindle_grammar_retain(c->grammar);
        }
    }
    return NULL;
}

/* Keep g (a reference of the cache's own) in the least recently used
 * entry; a copy of text that cannot be made leaves g uncached. */
static void keep(sp_server *s, spindle_grammar_kind kind, const char *text, spindle_grammar *g) {
    sp_cached_grammar *lru = &s->grammars[0];
    for (int i = 1; i < SP_SERVER_GRAMMARS; i++)
        if (s->grammars[i].used < lru->used) lru = &s->grammars[i];
    char *copy = strdup(text);
    if (!copy) return;
    free(lru->text);
    spindle_grammar_free(lru->grammar);
    *lru = (sp_cached_grammar){.kind = (int)kind, .text = copy,
                               .grammar = spindle_grammar_retain(g),
                               .used = ++s->grammar_clock};
}

spindle_status sp_server_grammar(sp_server *s, spindle_grammar_kind kind, const char *text,
                                 spindle_grammar **out, spindle_error *err) {
    *out = NULL;
    spindle_status st = SPINDLE_OK;
    pthread_mutex_lock(&s->lock);
    if (!s->grammar_vocab) st = spindle_grammar_vocab_new(s->tok, &s->grammar_vocab, err);
    if (!st) *out = cached(s, kind, text);
    pthread_mutex_unlock(&s->lock);
    if (st || *out) return st;
    /* Compiled outside the lock: it may take milliseconds. Two requests
     * with a new text may both compile it; the later one is kept. */
    st = spindle_grammar_new(s->grammar_vocab, kind, text, strlen(text), out, err);
    if (st) return st;
    pthread_mutex_lock(&s->lock);
    keep(s, kind, text, *out);
    pthread_mutex_unlock(&s->lock);
    return SPINDLE_OK;
}

void sp_server_grammars_free(sp_server *s) {
    for (int i = 0; i < SP_SERVER_GRAMMARS; i++) {
        free(s->grammars[i].text);
        spindle_grammar_free(s->grammars[i].grammar);
        s->grammars[i] = (sp_cached_grammar){0};
    }
}

bool sp_server_compile_grammar(sp_server *s, sp_api_request *r, sp_api_error *e) {
    if (r->grammar_kind < 0) return true;
    spindle_error err = {0};
    spindle_status st = sp_server_grammar(s, (spindle_grammar_kind)r->grammar_kind,
                                          r->grammar_text, &r->grammar, &err);
    if (st == SPINDLE_ERR_MEMORY)
        return sp_api_fail(e, 503, "server_error", r->grammar_param, NULL, "%s", err.message);
    if (st) return sp_api_bad(e, r->grammar_param, "%s", err.message);
    r->gen.grammar = r->grammar;
    return true;
}
