/* JSON Schema -> GBNF, following llama.cpp's json-schema-to-grammar.cpp
 * (SchemaConverter::visit): the same rule names, object layout (required
 * properties in order, then optional ones as nested alternatives), array
 * repetition and whitespace rule. Keywords that would constrain the value
 * in a way the grammar cannot express are refused, naming the keyword and
 * its JSON pointer, rather than silently ignored. */
#include "grammar/json_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static const char *visit(js_conv *c, const cJSON *s, const char *name,
                         const char *ptr);

/* JSON Schema's assertion and applicator keywords that the converter
 * does not compile: a schema using one is refused, naming it, since
 * leaving it out would admit values it rejects. Every other keyword
 * either is read by the branches below or does not constrain the value
 * (annotations such as title, vendor keywords such as x-... or
 * markdownDescription, draft 4's id), as validators treat unknown
 * keywords, or acts only beside a keyword refused here: `then` / `else`
 * without `if`, `minContains` / `maxContains` without `contains`. */
static const char *const REFUSED[] = {
    "not", "if", "propertyNames", "dependentRequired", "dependentSchemas",
    "dependencies", "unevaluatedProperties", "uniqueItems", "contains"};

bool js_refused_keyword(const char *k) {
    for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++)
        if (!strcmp(REFUSED[i], k)) return true;
    return false;
}

void js_child_ptr(char *out, size_t cap, const char *ptr, const char *a,
                      const char *b) {
    snprintf(out, cap, "%s/%s%s%s", ptr, a, b ? "/" : "", b ? b : "");
}

static char *take(sp_strbuf *b) {
    if (b->oom || b->overflow) {
        sp_strbuf_free(b);
        return NULL;
    }
    return b->p ? b->p : calloc(1, 1);
}

const char *js_rule_from(js_conv *c, const char *name, sp_strbuf *body) {
    char *text = take(body);
    if (!text) {
        js_fail(c, NULL, "out of memory");
        return NULL;
    }
    const char *r = js_add_rule(c, name, text);
    free(text);
    return r;
}

void js_sub_name(char *out, size_t cap, const char *name, const char *part) {
    snprintf(out, cap, "%s%s%s", name, *name ? "-" : "", part);
}

/* unit{lo,hi} (hi < 0: no cap), unit one GBNF symbol. Counts past the
 * GBNF limit go through a block of SP_GRAMMAR_MAX_REPEAT units: lo as
 * whole blocks then the rest, and up to hi - lo more as fewer than q
 * blocks then under a block, or q blocks then up to r (hi - lo = qB + r),
 * which together are each count once. */
static void counted(js_conv *c, sp_strbuf *o, const char *unit, long lo, long hi, const char *ptr) {
    const long B = SP_GRAMMAR_MAX_REPEAT;
    if (lo <= B && hi <= B) {
        if (hi < 0) sp_strbuf_printf(o, "%s{%ld,}", unit, lo);
        else sp_strbuf_printf(o, "%s{%ld,%ld}", unit, lo, hi);
        return;
    }
    if (lo > B * B || hi > B * B) {
        js_fail(c, ptr, "minLength/maxLength/minItems/maxItems past %ld are not supported", B * B);
        return;
    }
    char bn[300];
    snprintf(bn, sizeof bn, "%s-block", unit[0] == '(' ? "group" : unit);
    sp_strbuf body = {0};
    sp_strbuf_printf(&body, "%s{%ld}", unit, B);
    const char *block = js_rule_from(c, bn, &body);
    if (!block) return;
    sp_strbuf_printf(o, "( %s{%ld} %s{%ld} ", block, lo / B, unit, lo % B);
    long n = hi < 0 ? -1 : hi - lo, q = n / B, r = n % B;
    if (n < 0) sp_strbuf_printf(o, "%s* )", unit);
    else if (n <= B) sp_strbuf_printf(o, "%s{0,%ld} )", unit, n);
    else sp_strbuf_printf(o, "( %s{0,%ld} %s{0,%ld} | %s{%ld} %s{0,%ld} ) )", block, q - 1, unit, B - 1,
                          block, q, unit, r);
}

/* item (sep item){min-1..max-1}: llama.cpp's build_repetition. */
static void repetition(js_conv *c, sp_strbuf *o, const char *item, long min, long max,
                       const char *sep, const char *ptr) {
    if (max == 0) return;
    if (min == 0 && max == 1) {
        sp_strbuf_printf(o, "%s?", item);
        return;
    }
    if (!sep) return counted(c, o, item, min, max, ptr);
    if (min == 0) sp_strbuf_addc(o, '(');
    sp_strbuf_printf(o, "%s ", item);
    char unit[300];
    snprintf(unit, sizeof unit, "(%s %s)", sep, item);
    counted(c, o, unit, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1, ptr);
    if (min == 0) sp_strbuf_add(o, ")?", 2);
}

static const char *resolve_ref(js_conv *c, const char *ref, const char *ptr) {
    if (strncmp(ref, "#", 1))
        return js_fail(c, ptr, "$ref '%s' is not local (only '#...' refs)", ref), NULL;
    const cJSON *target = NULL;
    bool anchor = ref[1] && ref[1] != '/';
    if (anchor) target = js_anchor_target(c->root, ref + 1);
    else if (!js_pointer_target(c->root, ref, &target))
        return js_fail(c, ptr, "$ref '%s' is not a JSON pointer", ref), NULL;
    if (!target) return js_fail(c, ptr, "$ref '%s' points at nothing", ref), NULL;
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) return c->rules[c->refs[i].rule].name;
    if (c->n_refs >= JS_MAX_REFS)
        return js_fail(c, ptr, "more than %d distinct $refs", JS_MAX_REFS), NULL;
    const char *last = strrchr(ref, '/');
    char name[160];
    snprintf(name, sizeof name, "%s", last && last[1] ? last + 1 : "ref");
    /* Reserve the rule first, so that a recursive $ref finds its name. */
    char pending[200];
    snprintf(pending, sizeof pending, "\x01%s", ref);
    if (!js_add_rule(c, name, pending)) return NULL;
    int slot = c->n_rules - 1;
    c->refs[c->n_refs].ref = ref;
    c->refs[c->n_refs++].rule = slot;
    char def[200];
    snprintf(def, sizeof def, "%s-def", c->rules[slot].name);
    const char *res = visit(c, target, def, ref + 1);
    if (!res) return NULL;
    char *body = malloc(strlen(res) + 1);
    if (!body) return js_fail(c, ptr, "out of memory"), NULL;
    strcpy(body, res);
    free(c->rules[slot].body);
    c->rules[slot].body = body;
    return c->rules[slot].name;
}

static const char *union_rule(js_conv *c, const cJSON *alts, const char *name,
                              const char *ptr, const char *kw) {
    sp_strbuf o = {0};
    char nm[256], p2[512], idx[16];
    int i = 0;
    const cJSON *it;
    if (cJSON_GetArraySize(alts) == 0) return js_fail(c, ptr, "%s is empty", kw), NULL;
    cJSON_ArrayForEach(it, alts) {
        snprintf(idx, sizeof idx, "%d", i);
        snprintf(nm, sizeof nm, "%s%s%d", name, *name ? "-" : "alternative-", i);
        js_child_ptr(p2, sizeof p2, ptr, kw, idx);
        const char *r = visit(c, it, nm, p2);
        if (!r) {
            sp_strbuf_free(&o);
            return NULL;
        }
        sp_strbuf_printf(&o, "%s%s", i++ ? " | " : "", r);
    }
    return js_rule_from(c, name, &o);
}


static const cJSON *get(const cJSON *s, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(s, k);
}

/* A literal rule: const or enum, then space. */
static const char *constant_rule(js_conv *c, const cJSON *s, const char *name,
                                 const char *ptr) {
    const cJSON *k = get(s, "const"), *e = get(s, "enum"), *it;
    sp_strbuf o = {0};
    js_add_primitive(c, "space");
    if (k) {
        js_const_rule(&o, k);
    } else {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) == 0)
            return js_fail(c, ptr, "enum must be a non-empty array"), NULL;
        sp_strbuf_addc(&o, '(');
        int i = 0;
        cJSON_ArrayForEach(it, e) {
            if (i++) sp_strbuf_add(&o, " | ", 3);
            js_const_rule(&o, it);
        }
        sp_strbuf_addc(&o, ')');
    }
    sp_strbuf_add(&o, " space", 6);
    return js_rule_from(c, name, &o);
}

/* A minItems/maxLength-style count as a long: dflt when absent; a value
 * that is no whole number in 0..1e9 maps to -2 (refused by the caller's
 * range check, where a plain cast would be UB). */
static long count_value(const cJSON *v, long dflt) {
    if (!cJSON_IsNumber(v)) return dflt;
    double d = v->valuedouble;
    return d >= 0 && d <= 1e9 && d == floor(d) ? (long)d : -2;
}

/* prefixItems (or draft 4's items array): the tuple's members in order,
 * then members of `items` (draft 4: `additionalItems`; a schema; false or
 * absent: none, llama.cpp's closed tuple), the count within
 * minItems..maxItems. Without
 * minItems every tuple member is required, as llama.cpp writes tuples. */
static const char *tuple_rule(js_conv *c, const cJSON *s, const char *name,
                              const char *ptr) {
    const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems");
    const cJSON *mn = get(s, "minItems"), *mx = get(s, "maxItems");
    const cJSON *tuple = cJSON_IsArray(prefix) ? prefix : items, *it;
    /* After the tuple: 2020-12's items, or draft 4's additionalItems. */
    const cJSON *after = tuple == prefix ? items : get(s, "additionalItems");
    const cJSON *rest = after && !cJSON_IsFalse(after) ? after : NULL;
    long n = cJSON_GetArraySize(tuple);
    long max = count_value(mx, rest ? -1 : n);
    long min = count_value(mn, max >= 0 && max < n ? max : n);
    if (min < 0 || max < -1 || (max >= 0 && max < min))
        return js_fail(c, ptr, "minItems/maxItems must be whole numbers with min <= max"), NULL;
    if (n > SP_GRAMMAR_MAX_REPEAT) return js_fail(c, ptr, "more than %d prefixItems", SP_GRAMMAR_MAX_REPEAT), NULL;
    if (!rest && min > n)
        return js_fail(c, ptr, "minItems %ld is more than the %ld items the tuple allows", min, n), NULL;
    char nm[256], p2[512], idx[24];
    const char **member = calloc((size_t)n + 1, sizeof *member);
    if (!member) return js_fail(c, ptr, "out of memory"), NULL;
    int i = 0;
    cJSON_ArrayForEach(it, tuple) {
        snprintf(idx, sizeof idx, "tuple-%d", i);
        js_sub_name(nm, sizeof nm, name, idx);
        snprintf(idx, sizeof idx, "%d", i);
        js_child_ptr(p2, sizeof p2, ptr, tuple == prefix ? "prefixItems" : "items", idx);
        if (!(member[i++] = visit(c, it, nm, p2))) return free(member), NULL;
    }
    const char *more = NULL;
    if (rest && (max < 0 || max > n)) {
        js_sub_name(nm, sizeof nm, name, "item");
        js_child_ptr(p2, sizeof p2, ptr, tuple == prefix ? "items" : "additionalItems", NULL);
        if (!(more = visit(c, rest, nm, p2))) return free(member), NULL;
    }
    js_add_primitive(c, "space");
    sp_strbuf o = {0};
    sp_strbuf_add(&o, "\"[\" space ", 10);
    /* Member k+1 is optional once minItems are there: nest "( , next )?". */
    long shown = max < 0 || max > n ? n : max, opened = 0;
    for (long k = 0; k < shown; k++) {
        bool optional = k >= min;
        sp_strbuf_printf(&o, "%s%s%s ", optional ? "( " : "", k ? "\",\" space " : "", member[k]);
        opened += optional;
    }
    if (more) {
        long lo = min > n ? min - n : 0;
        char unit[300];
        snprintf(unit, sizeof unit, "( \",\" space %s )", more);
        if (n == 0) repetition(c, &o, more, lo, max, "\",\" space", ptr);
        else counted(c, &o, unit, lo, max < 0 ? -1 : max - n, ptr);
    }
    free(member);
    for (long k = 0; k < opened; k++) sp_strbuf_add(&o, " )?", 3);
    sp_strbuf_add(&o, " \"]\" space", 10);
    return js_rule_from(c, name, &o);
}

static const char *array_rule(js_conv *c, const cJSON *s, const char *name,
                              const char *ptr) {
    const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems");
    const cJSON *mn = get(s, "minItems"), *mx = get(s, "maxItems");
    char nm[256], p2[512];
    sp_strbuf o = {0};
    js_add_primitive(c, "space");
    if (cJSON_IsArray(prefix) || cJSON_IsArray(items)) return tuple_rule(c, s, name, ptr);
    long min = count_value(mn, 0);
    long max = count_value(mx, -1);
    if (min < 0 || max < -1 || (max >= 0 && max < min))
        return js_fail(c, ptr, "minItems/maxItems must be whole numbers with min <= max"), NULL;
    js_sub_name(nm, sizeof nm, name, "item");
    js_child_ptr(p2, sizeof p2, ptr, "items", NULL);
    const char *item = items ? visit(c, items, nm, p2) : js_add_primitive(c, "value");
    if (!item) return NULL;
    sp_strbuf_add(&o, "\"[\" space ", 10);
    repetition(c, &o, item, min, max, "\",\" space", ptr);
    sp_strbuf_add(&o, " \"]\" space", 10);
    return js_rule_from(c, name, &o);
}

static const char *string_rule(js_conv *c, const cJSON *s, const char *name,
                               const char *ptr) {
    const cJSON *pat = get(s, "pattern"), *fmt = get(s, "format");
    const cJSON *mn = get(s, "minLength"), *mx = get(s, "maxLength");
    sp_strbuf o = {0};
    js_add_primitive(c, "space");
    if (pat) {
        if (!cJSON_IsString(pat)) return js_fail(c, ptr, "pattern must be a string"), NULL;
        if (fmt) return js_fail(c, ptr, "pattern with format is not supported"), NULL;
        long min = count_value(mn, 0), max = count_value(mx, -1);
        if (min < 0 || max < -1 || (max >= 0 && max < min))
            return js_fail(c, ptr, "minLength/maxLength must be whole numbers with min <= max"), NULL;
        sp_strbuf_add(&o, "\"\\\"\" ", 5);
        spindle_error e = {0};
        if (sp_regex_to_gbnf_lengths(pat->valuestring, strlen(pat->valuestring), min, max, &o, &e)) {
            sp_strbuf_free(&o);
            return js_fail(c, ptr, "pattern: %s", e.message), NULL;
        }
        sp_strbuf_add(&o, " \"\\\"\" space", 11);
        return js_rule_from(c, name, &o);
    }
    if (cJSON_IsString(fmt) && js_format_checked(fmt->valuestring)) {
        long min = count_value(mn, 0), max = count_value(mx, -1);
        if (min < 0 || max < -1 || (max >= 0 && max < min))
            return js_fail(c, ptr, "minLength/maxLength must be whole numbers with min <= max"), NULL;
        if (min > SP_GRAMMAR_MAX_REPEAT || max > SP_GRAMMAR_MAX_REPEAT)
            return js_fail(c, ptr, "format with minLength/maxLength past %d is not supported",
                           SP_GRAMMAR_MAX_REPEAT), NULL;
        return js_format_rule(c, fmt->valuestring, min, max, name, ptr);
    }
    /* Formats JSON Schema does not define (int64, password, ...) only
     * annotate: validators ignore them, so the value is any string. */
    if (mn || mx) {
        long min = count_value(mn, 0);
        long max = count_value(mx, -1);
        if (min < 0 || max < -1 || (max >= 0 && max < min))
            return js_fail(c, ptr, "minLength/maxLength must be whole numbers with min <= max"), NULL;
        const char *ch = js_add_primitive(c, "char");
        sp_strbuf_add(&o, "\"\\\"\" ", 5);
        repetition(c, &o, ch ? ch : "char", min, max, NULL, ptr);
        sp_strbuf_add(&o, " \"\\\"\" space", 11);
        return js_rule_from(c, name, &o);
    }
    const char *r = js_add_primitive(c, "string");
    return r && strcmp(name, "root") ? r : r ? js_add_rule(c, name, r) : NULL;
}

/* d as a long long, saturated at +-1e18 (js_int_range refuses anything
 * past 15 digits, so the saturated value is refused too, never UB). */
static long long saturate(double d) {
    if (!(d > -1e18)) return (long long)-1e18;
    if (!(d < 1e18)) return (long long)1e18;
    return (long long)d;
}

static bool bound(const cJSON *s, const char *k, const char *xk, bool upper,
                  long long *out) {
    const cJSON *v = get(s, k), *x = get(s, xk);
    bool have = false;
    if (cJSON_IsNumber(v)) {
        double d = upper ? floor(v->valuedouble) : ceil(v->valuedouble);
        if (cJSON_IsTrue(x)) d += upper ? -1 : 1;  /* draft 4's boolean form */
        *out = saturate(d);
        have = true;
    }
    if (cJSON_IsNumber(x)) {
        double d = upper ? ceil(x->valuedouble) - 1 : floor(x->valuedouble) + 1;
        if (!have || (upper ? d < *out : d > *out)) *out = saturate(d);
        have = true;
    }
    return have;
}

/* The multiples of k in [min, max], listed: bounds with multipleOf are
 * compiled where that leaves at most JS_MAX_LISTED_MULTIPLES values. */
#define JS_MAX_LISTED_MULTIPLES 1000
static const char *multiples_in_range(js_conv *c, const cJSON *k, bool has_min, long long min,
                                      bool has_max, long long max, const char *name,
                                      const char *ptr) {
    double kd = k->valuedouble;
    if (kd != floor(kd) || kd > 1e15)
        return js_fail(c, ptr, "multipleOf on an integer must be a whole number"), NULL;
    long long kk = (long long)kd;
    long long first = has_min ? (min >= 0 ? (min + kk - 1) / kk : -((-min) / kk)) * kk : 0;
    long long last = has_max ? (max >= 0 ? max / kk : -((-max + kk - 1) / kk)) * kk : 0;
    if (!has_min || !has_max || (last - first) / kk >= JS_MAX_LISTED_MULTIPLES)
        return js_fail(c, ptr, "multipleOf with minimum/maximum is supported where they leave at "
                       "most %d values", JS_MAX_LISTED_MULTIPLES), NULL;
    if (last < first) return js_fail(c, ptr, "no multiple of multipleOf lies within minimum/maximum"), NULL;
    sp_strbuf o = {0};
    sp_strbuf_addc(&o, '(');
    for (long long v = first; v <= last; v += kk) sp_strbuf_printf(&o, "%s\"%lld\"", v > first ? " | " : "", v);
    sp_strbuf_add(&o, ") space", 7);
    return js_rule_from(c, name, &o);
}

static const char *integer_rule(js_conv *c, const cJSON *s, const char *name,
                                const char *ptr) {
    long long min = 0, max = 0;
    bool has_min = bound(s, "minimum", "exclusiveMinimum", false, &min);
    bool has_max = bound(s, "maximum", "exclusiveMaximum", true, &max);
    if (!has_min && !has_max) {
        const char *r = js_add_primitive(c, "integer");
        return r && !strcmp(name, "root") ? js_add_rule(c, name, r) : r;
    }
    sp_strbuf o = {0};
    js_add_primitive(c, "space");
    const cJSON *mult = get(s, "multipleOf");
    if (mult) return multiples_in_range(c, mult, has_min, min, has_max, max, name, ptr);
    if (!js_int_range(&o, has_min, min, has_max, max)) {
        sp_strbuf_free(&o);
        return js_fail(c, ptr, "integer bounds are empty or beyond 15 digits"), NULL;
    }
    sp_strbuf_add(&o, " space", 6);
    return js_rule_from(c, name, &o);
}

/* The tighter of `minimum`-style k and `exclusiveMinimum`-style xk (a
 * number, or draft 4's boolean making k exclusive); false if neither. */
static bool number_bound(const cJSON *s, const char *k, const char *xk, bool upper,
                         js_bound *out) {
    const cJSON *v = get(s, k), *x = get(s, xk);
    bool have = false;
    if (cJSON_IsNumber(v)) {
        *out = (js_bound){v->valuedouble, cJSON_IsTrue(x)};
        have = true;
    }
    if (cJSON_IsNumber(x)) {
        double d = x->valuedouble;
        if (!have || (upper ? d <= out->value : d >= out->value)) *out = (js_bound){d, true};
        have = true;
    }
    return have;
}

static const char *number_rule(js_conv *c, const cJSON *s, const char *name,
                               const char *ptr) {
    js_bound lo, hi;
    bool has_lo = number_bound(s, "minimum", "exclusiveMinimum", false, &lo);
    bool has_hi = number_bound(s, "maximum", "exclusiveMaximum", true, &hi);
    sp_strbuf o = {0};
    js_add_primitive(c, "space");
    sp_strbuf_addc(&o, '(');
    if (!js_number_range(&o, has_lo ? &lo : NULL, has_hi ? &hi : NULL)) {
        sp_strbuf_free(&o);
        return js_fail(c, ptr, "no number satisfies minimum/maximum (the bounds are empty)"), NULL;
    }
    sp_strbuf_add(&o, ") space", 7);
    return js_rule_from(c, name, &o);
}

static const char *typed(js_conv *c, const cJSON *s, const char *type,
                         const char *name, const char *ptr) {
    const cJSON *props = get(s, "properties"), *add = get(s, "additionalProperties");
    bool object = !type || !strcmp(type, "object");
    /* allOf first: llama.cpp would take {"allOf": ..., "additionalProperties":
     * false} for an empty object. */
    if (object && get(s, "allOf")) return js_all_of_rule(c, s, name, ptr, visit);
    bool counted = get(s, "minProperties") || get(s, "maxProperties");
    if (object && (props || get(s, "patternProperties") || (add && !cJSON_IsTrue(add)) || counted)) {
        long lo, hi;
        if (!js_property_counts(c, s, ptr, &lo, &hi)) return NULL;
        /* Nothing listed: any keys, as the object built-in takes them. */
        static const cJSON any = {.type = cJSON_True};
        const cJSON *extra = add ? add : !props && !get(s, "patternProperties") ? &any : NULL;
        return js_object_rule(c, s, name, ptr, props, get(s, "required"), extra, lo, hi, visit);
    }
    if (get(s, "allOf")) return js_all_of_rule(c, s, name, ptr, visit);
    if ((!type || !strcmp(type, "array")) && (get(s, "items") || get(s, "prefixItems") ||
                                               get(s, "minItems") || get(s, "maxItems")))
        return array_rule(c, s, name, ptr);
    bool string = !type || !strcmp(type, "string");
    if (string && (get(s, "pattern") || get(s, "format") || (type && (get(s, "minLength") || get(s, "maxLength")))))
        return string_rule(c, s, name, ptr);
    bool bounded = get(s, "minimum") || get(s, "maximum") || get(s, "exclusiveMinimum") ||
                   get(s, "exclusiveMaximum");
    const cJSON *mult = get(s, "multipleOf");
    if (mult && (!type || !strcmp(type, "integer") || !strcmp(type, "number"))) {
        bool number = type && !strcmp(type, "number");
        if (!cJSON_IsNumber(mult) || !(mult->valuedouble > 0))
            return js_fail(c, ptr, "multipleOf must be a number above 0"), NULL;
        if (!type || (bounded && number))
            return js_fail(c, ptr, "multipleOf is supported on an integer, or on a number "
                           "without minimum/maximum"), NULL;
        if (bounded) return integer_rule(c, s, name, ptr);
        return js_multiple_rule(c, mult, number, name, ptr);
    }
    if ((!type || !strcmp(type, "integer")) && bounded) return integer_rule(c, s, name, ptr);
    if (type && !strcmp(type, "number") && bounded) return number_rule(c, s, name, ptr);
    if (!type || !strcmp(type, "object")) {
        const char *r = js_add_primitive(c, "object");
        return r && !strcmp(name, "root") ? js_add_rule(c, name, r) : r;
    }
    static const char *const prims[] = {"boolean", "null", "number", "integer", "array", "string"};
    for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
        if (!strcmp(type, prims[i])) {
            if (!strcmp(type, "string")) return string_rule(c, s, name, ptr);
            if (!strcmp(type, "integer")) return integer_rule(c, s, name, ptr);
            const char *r = js_add_primitive(c, type);
            return r && !strcmp(name, "root") ? js_add_rule(c, name, r) : r;
        }
    return js_fail(c, ptr, "unknown type '%s'", type), NULL;
}

static const char *visit_object(js_conv *c, const cJSON *s, const char *name,
                                const char *ptr) {
    const cJSON *it;
    cJSON_ArrayForEach(it, s)
        if (js_refused_keyword(it->string))
            return js_fail(c, ptr, "keyword '%s' is not supported", it->string), NULL;
    const cJSON *ref = get(s, "$ref"), *type = get(s, "type");
    /* In a document that is one resource (no subschema sets its own $id),
     * the dynamic scope holds that resource alone: $recursiveRef "#" is
     * its root and $dynamicRef finds the one $dynamicAnchor, as $ref
     * would. */
    const char *dyn = get(s, "$dynamicRef") ? "$dynamicRef" : get(s, "$recursiveRef") ? "$recursiveRef" : NULL;
    if (!ref && dyn) {
        if (js_has_nested_resource(c->root))
            return js_fail(c, ptr, "%s in a document with embedded resources ($id) is not supported",
                           dyn), NULL;
        ref = get(s, dyn);
    }
    if (ref) {
        if (!cJSON_IsString(ref)) return js_fail(c, ptr, "$ref must be a string"), NULL;
        const char *r = resolve_ref(c, ref->valuestring, ptr);
        return r && !strcmp(name, "root") ? js_add_rule(c, name, r) : r;
    }
    const cJSON *any = get(s, "oneOf") ? get(s, "oneOf") : get(s, "anyOf");
    if (any) {
        if (!cJSON_IsArray(any)) return js_fail(c, ptr, "anyOf/oneOf must be an array"), NULL;
        if (get(s, "oneOf") && !js_one_of_disjoint(c, s, any, ptr)) return NULL;
        return union_rule(c, any, name, ptr, get(s, "oneOf") ? "oneOf" : "anyOf");
    }
    if (get(s, "const") || get(s, "enum")) return constant_rule(c, s, name, ptr);
    if (cJSON_IsArray(type) || cJSON_IsTrue(get(s, "nullable"))) {
        sp_strbuf o = {0};
        int i = 0;
        char nm[256];
        for (const cJSON *t = cJSON_IsArray(type) ? type->child : type; t || i == 0; t = t ? t->next : NULL) {
            if (t && !cJSON_IsString(t)) return sp_strbuf_free(&o), js_fail(c, ptr, "type must be a string or an array of strings"), NULL;
            snprintf(nm, sizeof nm, "%s%s%d", name, *name ? "-" : "alternative-", i);
            const char *r = typed(c, s, t ? t->valuestring : NULL, nm, ptr);
            if (!r) return sp_strbuf_free(&o), NULL;
            sp_strbuf_printf(&o, "%s%s", i++ ? " | " : "", r);
            if (!t) break;
        }
        if (cJSON_IsTrue(get(s, "nullable"))) sp_strbuf_printf(&o, " | %s", js_add_primitive(c, "null"));
        return js_rule_from(c, name, &o);
    }
    if (type && !cJSON_IsString(type)) return js_fail(c, ptr, "type must be a string or an array of strings"), NULL;
    return typed(c, s, type ? type->valuestring : NULL, name, ptr);
}

static const char *visit(js_conv *c, const cJSON *s, const char *name,
                         const char *ptr) {
    if (c->failed) return NULL;
    if (cJSON_IsTrue(s)) return js_add_primitive(c, "value");
    if (cJSON_IsFalse(s)) return js_fail(c, ptr, "the schema false matches nothing"), NULL;
    if (!cJSON_IsObject(s)) return js_fail(c, ptr, "a schema must be an object or a boolean"), NULL;
    if (++c->depth > JS_MAX_DEPTH) return js_fail(c, ptr, "schemas nest deeper than %d", JS_MAX_DEPTH), NULL;
    const char *r = visit_object(c, s, name, ptr);
    c->depth--;
    return r;
}

/* A schema can be valid JSON Schema yet have no grammar: a $ref cycle
 * that recurses before consuming anything ({"anyOf": [..., {"$ref": "#"}]})
 * is left-recursive, and a pattern that matches nothing (or an object
 * that must contain itself) leaves no text. Parsing the result says so as
 * a schema error, so a success is always GBNF that compiles (over a size
 * limit aside). */
static spindle_status check_grammar(char **gbnf, spindle_error *err) {
    sp_gram g;
    spindle_error ge = {0};
    spindle_status st = sp_gbnf_parse(*gbnf, strlen(*gbnf), &g, &ge);
    if (st == SPINDLE_OK) sp_gram_free(&g);
    if (st == SPINDLE_OK || st == SPINDLE_ERR_LIMIT) return SPINDLE_OK;
    free(*gbnf);
    *gbnf = NULL;
    /* The converted rules' names mean nothing to the schema's author. */
    if (!strncmp(ge.message, SP_GRAMMAR_EMPTY, strlen(SP_GRAMMAR_EMPTY)))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "json schema: no JSON text satisfies it (a pattern, enum or "
                       "combination of keywords that matches nothing)");
    return sp_fail(err, SPINDLE_ERR_FORMAT, "json schema: it has no grammar: %s", ge.message);
}

spindle_status sp_json_schema_to_gbnf(const char *schema, size_t len,
                                      char **gbnf, spindle_error *err) {
    *gbnf = NULL;
    if (len > SP_GRAMMAR_MAX_SOURCE)
        return sp_fail(err, SPINDLE_ERR_LIMIT, "json schema: %zu bytes is over the limit of %d",
                       len, SP_GRAMMAR_MAX_SOURCE);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(schema, len, &end, false);
    if (!root) {
        return sp_fail(err, SPINDLE_ERR_FORMAT, "json schema: not valid JSON (at byte %zu)",
                       end && end >= schema ? (size_t)(end - schema) : 0);
    }
    js_conv c = {.root = root, .err = err};
    if (!cJSON_IsObject(root) && !cJSON_IsBool(root))
        js_fail(&c, NULL, "a schema must be an object or a boolean");
    /* The root rule is named first so that it stays "root". */
    const char *r = c.failed ? NULL : visit(&c, root, "root", "");
    sp_strbuf out = {0};
    if (r && !c.failed) {
        if (strcmp(r, "root")) sp_strbuf_printf(&out, "root ::= %s\n", r);
        for (int i = 0; i < c.n_rules; i++)
            sp_strbuf_printf(&out, "%s ::= %s\n", c.rules[i].name, c.rules[i].body);
    }
    for (int i = 0; i < c.n_rules; i++) {
        free(c.rules[i].name);
        free(c.rules[i].body);
    }
    free(c.rules);
    cJSON_Delete(root);
    if (c.failed) {
        sp_strbuf_free(&out);
        return err ? err->status : SPINDLE_ERR_FORMAT;
    }
    *gbnf = take(&out);
    if (!*gbnf) return sp_fail(err, SPINDLE_ERR_MEMORY, "json schema: out of memory");
    return check_grammar(gbnf, err);
}

