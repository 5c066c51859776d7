/* JSON Schema text: sp_json_schema_to_gbnf. Invariants: a failure has a
 * one-line message naming the schema location; a success is GBNF that
 * sp_gbnf_parse accepts (the converter never writes a grammar that does
 * not parse). */
#include "fuzz_common.h"

#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf = NULL;
    spindle_error err = {0};
    spindle_status st = sp_json_schema_to_gbnf((const char *)data, size, &gbnf, &err);
    if (st) {
        FUZZ_CHECK(err.message[0] && !strchr(err.message, '\n') && !gbnf, "error '%s'", err.message);
        FUZZ_CHECK(!strncmp(err.message, "json schema", 11), "error '%s'", err.message);
        return 0;
    }
    sp_gram g;
    st = sp_gbnf_parse(gbnf, strlen(gbnf), &g, &err);
    FUZZ_CHECK(st == SPINDLE_OK || st == SPINDLE_ERR_LIMIT, "converter wrote bad GBNF: %s\n%s",
               err.message, gbnf);
    if (!st) sp_gram_free(&g);
    free(gbnf);
    return 0;
}
