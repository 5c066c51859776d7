/* oneOf asks that exactly one alternative match. Compiled as anyOf, it
 * is exact only when no value matches two alternatives, so it is
 * compiled only where that is provable from the schemas' surface (as
 * llguidance does; it too refuses the rest): two alternatives exclude
 * each other when their JSON types (within the type of the schema around
 * them) do not meet, when their const / enum values do not, when a
 * property both
 * require has const / enum values that do not meet, or when one requires
 * a property that the other, closed by additionalProperties false, does
 * not list. */
#include <string.h>

#include "grammar/json_schema.h"

enum { T_NULL = 1, T_BOOL = 2, T_OBJECT = 4, T_ARRAY = 8, T_STRING = 16, T_NUMBER = 32,
       T_ANY = 63 };

static int type_bit(const char *t) {
    static const char *const NAMES[] = {"null", "boolean", "object", "array", "string",
                                        "number", "integer"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(NAMES[i], t)) return 1 << (i < 6 ? i : 5); /* integer is a number */
    return T_ANY;
}

static int value_bit(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsObject(v)) return T_OBJECT;
    if (cJSON_IsArray(v)) return T_ARRAY;
    if (cJSON_IsString(v)) return T_STRING;
    return T_NUMBER;
}

/* The alternative itself, a local $ref followed (a chain of them too). */
static const cJSON *deref(const cJSON *root, const cJSON *s) {
    for (int hops = 0; hops < 16 && cJSON_IsObject(s); hops++) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref"), *t = NULL;
        if (!cJSON_IsString(ref) || !js_pointer_target(root, ref->valuestring, &t) || !t) return s;
        s = t;
    }
    return s;
}

/* The JSON types a schema's values can have, read from type / const /
 * enum (T_ANY where they do not say). */
static int types_of(const cJSON *s) {
    if (!cJSON_IsObject(s)) return cJSON_IsFalse(s) ? 0 : T_ANY;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum"), *it;
    int bits = T_ANY;
    if (cJSON_IsString(t)) bits = type_bit(t->valuestring);
    if (cJSON_IsArray(t)) {
        bits = 0;
        cJSON_ArrayForEach(it, t) bits |= cJSON_IsString(it) ? type_bit(it->valuestring) : T_ANY;
    }
    if (k) bits &= value_bit(k);
    if (cJSON_IsArray(e)) {
        int vb = 0;
        cJSON_ArrayForEach(it, e) vb |= value_bit(it);
        bits &= vb;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "nullable"))) bits |= T_NULL;
    return bits;
}

static bool requires(const cJSON *s, const char *key) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(s, "required"))
        if (cJSON_IsString(r) && !strcmp(r->valuestring, key)) return true;
    return false;
}

/* The values a property schema allows when it lists them (const or
 * enum), as an array; NULL when it does not. */
static const cJSON *listed_values(const cJSON *root, const cJSON *prop, cJSON *one) {
    prop = deref(root, prop);
    if (!cJSON_IsObject(prop)) return NULL;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(prop, "const");
    if (k) {
        one->child = (cJSON *)k; /* a view: one is never freed with its child */
        return one;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(prop, "enum");
    return cJSON_IsArray(e) ? e : NULL;
}

static bool values_meet(const cJSON *a, const cJSON *b, bool a_single, bool b_single) {
    for (const cJSON *x = a->child; x; x = a_single ? NULL : x->next)
        for (const cJSON *y = b->child; y; y = b_single ? NULL : y->next)
            if (cJSON_Compare(x, y, true)) return true;
    return false;
}

/* A property both require whose listed values do not meet, or one that
 * a requires and b (closed) does not list. */
static bool objects_exclude(const cJSON *root, const cJSON *a, const cJSON *b) {
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties"), *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(a, "required")) {
        if (!cJSON_IsString(r)) continue;
        const char *key = r->valuestring;
        const cJSON *in_b = cJSON_GetObjectItemCaseSensitive(pb, key);
        if (!in_b && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "additionalProperties")) &&
            !cJSON_GetObjectItemCaseSensitive(b, "patternProperties"))
            return true;
        if (!in_b || !requires(b, key)) continue;
        cJSON one_a = {0}, one_b = {0};
        const cJSON *va = listed_values(root, cJSON_GetObjectItemCaseSensitive(pa, key), &one_a);
        const cJSON *vb = listed_values(root, in_b, &one_b);
        if (va && vb && !values_meet(va, vb, va == &one_a, vb == &one_b)) return true;
    }
    return false;
}

/* `within`: the types the schema around oneOf allows. */
static bool exclude(const cJSON *root, const cJSON *a, const cJSON *b, int within) {
    a = deref(root, a);
    b = deref(root, b);
    int ta = types_of(a) & within, tb = types_of(b) & within;
    if (!(ta & tb)) return true;
    cJSON one_a = {0}, one_b = {0};
    const cJSON *va = listed_values(root, a, &one_a), *vb = listed_values(root, b, &one_b);
    if (va && vb && !values_meet(va, vb, va == &one_a, vb == &one_b)) return true;
    if ((ta & tb) != T_OBJECT || !cJSON_IsObject(a) || !cJSON_IsObject(b)) return false;
    return objects_exclude(root, a, b) || objects_exclude(root, b, a);
}

bool js_one_of_disjoint(js_conv *c, const cJSON *s, const cJSON *alts, const char *ptr) {
    int within = types_of(s), i = 0;
    for (const cJSON *a = alts->child; a; a = a->next, i++) {
        int j = i + 1;
        for (const cJSON *b = a->next; b; b = b->next, j++)
            if (!exclude(c->root, a, b, within))
                return js_fail(c, ptr, "oneOf whose alternatives %d and %d may both match is not "
                               "supported (anyOf is): they share a type and no required "
                               "property's const/enum tells them apart", i, j);
    }
    return true;
}
