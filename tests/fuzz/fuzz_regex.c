/* A JSON Schema pattern: sp_regex_to_gbnf. Invariants: a failure has a
 * one-line "regex ..." message; a success is a GBNF expression that, as
 * the body of a rule, sp_gbnf_parse accepts. */
#include "fuzz_common.h"

#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sp_strbuf out = {0};
    sp_strbuf_add(&out, "root ::= ", 9);
    spindle_error err = {0};
    spindle_status st = sp_regex_to_gbnf((const char *)data, size, &out, &err);
    if (st) {
        FUZZ_CHECK(err.message[0] && !strchr(err.message, '\n'), "error '%s'", err.message);
        FUZZ_CHECK(!strncmp(err.message, "regex", 5), "error '%s'", err.message);
    } else {
        sp_strbuf_addc(&out, '\n');
        sp_gram g;
        st = sp_gbnf_parse(out.p, out.len, &g, &err);
        /* A pattern may match nothing at all ([^\s\S]): its grammar says so. */
        FUZZ_CHECK(st == SPINDLE_OK || st == SPINDLE_ERR_LIMIT ||
                       strstr(err.message, "left-recursive") ||
                       !strncmp(err.message, SP_GRAMMAR_EMPTY, strlen(SP_GRAMMAR_EMPTY)),
                   "regex became bad GBNF: %s\n%s", err.message, out.p);
        if (!st) sp_gram_free(&g);
    }
    sp_strbuf_free(&out);
    return 0;
}
