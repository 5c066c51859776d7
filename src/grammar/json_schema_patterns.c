/* patternProperties: the keys an object may add beyond `properties`,
 * each key in a pattern's language with that pattern's value. Compiled
 * only where the grammar is exact without intersecting or subtracting
 * languages: the patterns share one schema (a key matching two patterns
 * must satisfy both), no pattern matches a listed property's name (that
 * key would come twice, once with each value), and keys outside every
 * pattern follow additionalProperties only where a pattern's value is
 * unconstrained (otherwise such a key could fall in a pattern). */
#include "grammar/json_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* Whether the JSON text of `key` (escaped, without its quotes: what the
 * pattern's GBNF reads) is in the pattern's language. */
static bool pattern_matches(const char *pattern, const char *key, bool *matches,
                            spindle_error *err) {
    sp_strbuf g = {0};
    sp_strbuf_add(&g, "root ::= ", 9);
    if (sp_regex_to_gbnf(pattern, strlen(pattern), &g, err)) return sp_strbuf_free(&g), false;
    sp_strbuf_addc(&g, '\n');
    cJSON *k = cJSON_CreateString(key);
    char *text = k ? cJSON_PrintUnformatted(k) : NULL;
    cJSON_Delete(k);
    sp_gram gram;
    sp_gmatch *m = NULL;
    bool ok = text && !g.oom && !g.overflow;
    if (ok && sp_gbnf_parse(g.p, g.len, &gram, err) == SPINDLE_OK) {
        if (sp_gmatch_new(&gram, NULL, &m, err) == SPINDLE_OK) {
            size_t n = strlen(text) - 2;
            *matches = sp_gmatch_accept_bytes(m, (const uint8_t *)text + 1, n, err) &&
                       sp_gmatch_accepting(m);
            sp_gmatch_free(m);
        } else {
            ok = false;
        }
        sp_gram_free(&gram);
    } else if (ok) {
        /* A pattern no text matches matches no name either. */
        ok = !strncmp(err->message, SP_GRAMMAR_EMPTY, strlen(SP_GRAMMAR_EMPTY));
        if (ok) *err = (spindle_error){0};
        *matches = false;
    }
    cJSON_free(text);
    sp_strbuf_free(&g);
    return ok;
}

bool js_annotation_keyword(const char *k) {
    static const char *const NOTES[] = {"title", "description", "$comment", "default",
                                        "examples", "deprecated", "readOnly", "writeOnly",
                                        "markdownDescription"};
    if (!strncmp(k, "x-", 2)) return true;
    for (size_t i = 0; i < sizeof NOTES / sizeof *NOTES; i++)
        if (!strcmp(NOTES[i], k)) return true;
    return false;
}

bool js_schema_unconstrained(const cJSON *s) {
    if (cJSON_IsTrue(s)) return true;
    if (!cJSON_IsObject(s)) return false;
    const cJSON *it;
    cJSON_ArrayForEach(it, s)
        if (!js_annotation_keyword(it->string)) return false;
    return true;
}

const char *js_pattern_kv(js_conv *c, const cJSON *patterns, const cJSON *props,
                          const cJSON *additional, const char *name, const char *ptr,
                          js_visit_fn visit) {
    char p2[512];
    snprintf(p2, sizeof p2, "%s/patternProperties", ptr);
    if (!cJSON_IsObject(patterns)) return js_fail(c, p2, "must be an object"), NULL;
    const cJSON *first = patterns->child, *it, *prop;
    if (!first) return "";
    cJSON_ArrayForEach(it, patterns)
        if (!cJSON_Compare(it, first, true))
            return js_fail(c, p2, "patternProperties whose patterns have different schemas are not "
                           "supported (a key matching two would need both)"), NULL;
    if (!js_schema_unconstrained(first) && additional && !cJSON_IsFalse(additional))
        return js_fail(c, p2, "patternProperties with additionalProperties other than false are "
                       "not supported (an additional key could match a pattern)"), NULL;
    sp_strbuf key = {0};
    sp_strbuf_add(&key, "\"\\\"\" ( ", 7);
    cJSON_ArrayForEach(it, patterns) {
        spindle_error e = {0};
        cJSON_ArrayForEach(prop, props) {
            bool hit = false;
            if (!pattern_matches(it->string, prop->string, &hit, &e)) break;
            if (hit) {
                sp_strbuf_free(&key);
                return js_fail(c, p2, "patternProperties: pattern '%s' matches property '%s' (its key would be "
                               "written twice)", it->string, prop->string), NULL;
            }
        }
        if (e.message[0] || sp_regex_to_gbnf(it->string, strlen(it->string), &key, &e)) {
            sp_strbuf_free(&key);
            return js_fail(c, p2, "pattern '%s': %s", it->string, e.message), NULL;
        }
        if (it->next) sp_strbuf_add(&key, " | ", 3);
    }
    const char *space = js_add_primitive(c, "space");
    char vn[300], vp[600];
    snprintf(vn, sizeof vn, "%s%spattern-value", name, *name ? "-" : "");
    snprintf(vp, sizeof vp, "%s/%s", p2, first->string);
    /* visit() reads {} as any object (llama.cpp's reading); a pattern's
     * unconstrained value is any value, as in validators. */
    const char *value = js_schema_unconstrained(first) ? js_add_primitive(c, "value")
                                                       : visit(c, first, vn, vp);
    if (!value || !space) return sp_strbuf_free(&key), NULL;
    sp_strbuf_printf(&key, " ) \"\\\"\" %s \":\" %s %s", space, space, value);
    if (key.oom || key.overflow) return sp_strbuf_free(&key), js_fail(c, ptr, "out of memory"), NULL;
    snprintf(vn, sizeof vn, "%s%spattern-kv", name, *name ? "-" : "");
    const char *r = js_add_rule(c, vn, key.p);
    sp_strbuf_free(&key);
    return r;
}
