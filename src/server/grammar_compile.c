/* A request's response_format / grammar compiled against the server's
 * tokenizer. The vocabulary trie is built on the first such request and
 * kept for the server's life. */
#include "server/state.h"

#include <string.h>

bool sp_server_compile_grammar(sp_server *s, sp_api_request *r, sp_api_error *e) {
    if (r->grammar_kind < 0) return true;
    spindle_error err = {0};
    spindle_status st = SPINDLE_OK;
    pthread_mutex_lock(&s->lock);
    if (!s->grammar_vocab) st = spindle_grammar_vocab_new(s->tok, &s->grammar_vocab, &err);
    pthread_mutex_unlock(&s->lock);
    if (!st)
        st = spindle_grammar_new(s->grammar_vocab, (spindle_grammar_kind)r->grammar_kind,
                                 r->grammar_text, strlen(r->grammar_text), &r->grammar, &err);
    if (st == SPINDLE_ERR_MEMORY)
        return sp_api_fail(e, 503, "server_error", r->grammar_param, NULL, "%s", err.message);
    if (st) return sp_api_bad(e, r->grammar_param, "%s", err.message);
    r->gen.grammar = r->grammar;
    return true;
}
