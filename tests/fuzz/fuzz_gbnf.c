/* GBNF text: sp_gbnf_parse, then a matcher fed the input's own bytes.
 * Invariants: a failure has a status and a one-line message naming the
 * place ("grammar line L col C: ..." or "grammar: ..."); a parsed grammar
 * has a root, every reference names a rule, and the matcher neither
 * crashes nor hangs on any bytes, nor reaches a state where the text is
 * incomplete and no byte continues it. */
#include "fuzz_common.h"

#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sp_gram g;
    spindle_error err = {0};
    spindle_status st = sp_gbnf_parse((const char *)data, size, &g, &err);
    if (st) {
        FUZZ_CHECK(err.status == st && err.message[0] && !strchr(err.message, '\n'),
                   "error '%s'", err.message);
        FUZZ_CHECK(!strncmp(err.message, "grammar", 7), "error '%s'", err.message);
        return 0;
    }
    FUZZ_CHECK(g.root >= 0 && g.root < g.n_rules, "root %d of %d", g.root, g.n_rules);
    for (int i = 0; i < g.n_elems; i++)
        FUZZ_CHECK(g.elems[i] < g.n_sets && (g.elems[i] >= SP_G_END || SP_G_REF_RULE(g.elems[i]) < g.n_rules),
                   "element %d is %d", i, g.elems[i]);
    sp_gmatch *m = NULL;
    st = sp_gmatch_new(&g, NULL, &m, &err);
    FUZZ_CHECK(st != SPINDLE_ERR_FORMAT, "a parsed grammar has no start: %s", err.message);
    if (!st) {
        for (size_t i = 0; i < size; i++)
            if (!sp_gmatch_accept_bytes(m, data + i, 1, &err)) break;
        /* No dead ends: where the text so far is not complete, some byte
         * goes on (alternatives that can never complete are not entered). */
        bool goes_on = sp_gmatch_accepting(m) || err.status;
        int32_t at = sp_gmatch_state(m);
        for (int b = 0; b < 256 && !goes_on; b++) {
            uint8_t byte = (uint8_t)b;
            goes_on = sp_gmatch_accept_bytes(m, &byte, 1, &err) || err.status;
            sp_gmatch_set_state(m, at);
        }
        FUZZ_CHECK(goes_on, "a dead end: no byte continues an incomplete text");
        sp_gmatch_free(m);
    }
    sp_gram_free(&g);
    return 0;
}
