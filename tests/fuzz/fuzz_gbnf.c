/* GBNF text: sp_gbnf_parse, then a matcher fed the input's own bytes.
 * Invariants: a failure has a status and a one-line message naming the
 * place ("grammar line L col C: ..." or "grammar: ..."); a parsed grammar
 * has a root, every reference names a rule, and the matcher neither
 * crashes nor hangs on any bytes. */
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
    if (!sp_gmatch_new(&g, NULL, &m, &err)) {
        for (size_t i = 0; i < size; i++)
            if (!sp_gmatch_accept_bytes(m, data + i, 1, &err)) break;
        (void)sp_gmatch_accepting(m);
        sp_gmatch_free(m);
    }
    sp_gram_free(&g);
    return 0;
}
