/* Objects: the listed properties in order (required ones, then the
 * optional ones as nested alternatives), then the keys patternProperties
 * and additionalProperties add; minProperties / maxProperties counted
 * over the optional ones; allOf over objects merged into one object. */
#include "grammar/json_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static const cJSON *get(const cJSON *s, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(s, k);
}

typedef struct prop {
    const char *key;
    const char *kv;  /* the key-value rule */
    bool required;
} prop;

/* One optional property of a chain: `( "," space kv )?` after an earlier
 * one, else kv itself; the additional keys (key NULL) repeat. */
static void chain_link(sp_strbuf *o, const prop *p, bool after_another) {
    bool star = p->key == NULL;
    if (after_another) sp_strbuf_printf(o, "( \",\" space %s )%s", p->kv, star ? "*" : "?");
    else if (star) sp_strbuf_printf(o, "%s ( \",\" space %s )*", p->kv, p->kv);
    else sp_strbuf_printf(o, "%s", p->kv);
}

/* rests[k] (0 < k < n; rests[n] NULL): the rule for optional properties
 * k.. after an earlier one, each optional, in order. Built once from the
 * last, so that n optional properties cost n rules (a schema may list
 * over a thousand), not a chain per alternative. */
static const char **optional_rests(js_conv *c, const prop *props, int n,
                                   const char *name) {
    const char **rests = calloc((size_t)n + 1, sizeof *rests);
    if (!rests) return js_fail(c, NULL, "out of memory"), NULL;
    for (int k = n - 1; k >= 1 && !c->failed; k--) {
        sp_strbuf body = {0};
        chain_link(&body, &props[k], true);
        if (rests[k + 1]) sp_strbuf_printf(&body, " %s", rests[k + 1]);
        char rn[200];
        snprintf(rn, sizeof rn, "%s%s%s-rest", name, *name ? "-" : "",
                 props[k - 1].key ? props[k - 1].key : "additional");
        rests[k] = js_rule_from(c, rn, &body);
    }
    return rests;
}

/* Whether the array `list` holds the string s. */
bool js_in_list(const cJSON *list, const char *s) {
    const cJSON *r;
    cJSON_ArrayForEach(r, list)
        if (cJSON_IsString(r) && !strcmp(r->valuestring, s)) return true;
    return false;
}

/* Optional items with their count held in lo..hi (hi < 0: no cap): the
 * rule for items k.. after j of them (each then preceded by ","), one rule
 * per (k, j), j saturating at lo when there is no cap. The last item may
 * be the repeated additional keys (key NULL). */
typedef struct counting {
    js_conv *c;
    const prop *opt;
    int n;
    long lo, hi, cap;
    const char *name, *ptr;
    const char **memo;  /* (n + 1) x (cap + 1) */
} counting;

#define JS_MAX_COUNTED_RULES 4000

/* Whether items k.. can bring j present to lo..hi. */
static bool count_feasible(const counting *t, int k, long j) {
    if (t->hi >= 0 && j > t->hi) return false;
    bool star = t->n && !t->opt[t->n - 1].key;
    long more = t->n - k - (star && k < t->n);
    return (star && k < t->n) || j + more >= t->lo;
}

/* ( "," space kv ){a,b}: the repeated keys after j present. */
static void star_tail(const counting *t, sp_strbuf *o, const char *kv, long j) {
    long a = t->lo > j ? t->lo - j : 0, b = t->hi < 0 ? -1 : t->hi - j;
    if (b == 0) sp_strbuf_add(o, "\"\"", 2);
    else if (b < 0) sp_strbuf_printf(o, "( \",\" space %s ){%ld,}", kv, a);
    else sp_strbuf_printf(o, "( \",\" space %s ){%ld,%ld}", kv, a, b);
    if (a > SP_GRAMMAR_MAX_REPEAT || b > SP_GRAMMAR_MAX_REPEAT)
        js_fail(t->c, t->ptr, "minProperties/maxProperties past %d additional keys",
                SP_GRAMMAR_MAX_REPEAT);
}

static const char *count_rest(counting *t, int k, long j) {
    if (t->hi < 0 && j > t->lo) j = t->lo;
    const char **slot = &t->memo[(size_t)k * (size_t)(t->cap + 1) + (size_t)j];
    if (*slot || t->c->failed) return *slot;
    sp_strbuf body = {0};
    if (k == t->n) {
        sp_strbuf_add(&body, "\"\"", 2);
    } else if (!t->opt[k].key) {
        star_tail(t, &body, t->opt[k].kv, j);
    } else {
        if (count_feasible(t, k + 1, j + 1)) {
            const char *next = count_rest(t, k + 1, j + 1);
            sp_strbuf_printf(&body, "\",\" space %s %s", t->opt[k].kv, next ? next : "");
        }
        if (count_feasible(t, k + 1, j)) {
            const char *skip = count_rest(t, k + 1, j);
            sp_strbuf_printf(&body, "%s%s", body.len ? " | " : "", skip ? skip : "");
        }
    }
    char rn[240];
    snprintf(rn, sizeof rn, "%s%srest-%d-%ld", t->name, *t->name ? "-" : "", k, j);
    return *slot = t->c->failed ? NULL : js_rule_from(t->c, rn, &body);
}

/* The optional items, at least one, their count in lo..hi: which comes
 * first, then the counted rest. */
static void counted_first(js_conv *c, sp_strbuf *o, const prop *opt, int n, long lo, long hi,
                          const char *name, const char *ptr) {
    counting t = {c, opt, n, lo, hi, hi >= 0 ? hi : lo, name, ptr, NULL};
    if ((double)(n + 1) * (double)(t.cap + 1) > JS_MAX_COUNTED_RULES) {
        js_fail(c, ptr, "minProperties/maxProperties over %d optional properties make over %d "
                "rules", n, JS_MAX_COUNTED_RULES);
        return;
    }
    t.memo = calloc((size_t)(n + 1) * (size_t)(t.cap + 1), sizeof *t.memo);
    if (!t.memo) return (void)js_fail(c, ptr, "out of memory");
    int alts = 0;
    for (int i = 0; i < n && !c->failed; i++) {
        if (!count_feasible(&t, i + 1, 1) && opt[i].key) continue;
        if (hi == 0) break;
        sp_strbuf_printf(o, "%s%s ", alts++ ? " | " : "", opt[i].kv);
        if (!opt[i].key) {
            star_tail(&t, o, opt[i].kv, 1);
        } else {
            const char *rest = count_rest(&t, i + 1, 1);
            if (rest) sp_strbuf_add(o, rest, strlen(rest));
        }
    }
    if (!alts && !c->failed) sp_strbuf_add(o, "\"\"", 2);
    free(t.memo);
}

/* An object: the listed properties in order (required ones, then the
 * optional ones as nested alternatives), then any number of the keys
 * patternProperties (of s) or additionalProperties add. */
const char *js_object_rule(js_conv *c, const cJSON *s, const char *name, const char *ptr,
                           const cJSON *props_obj, const cJSON *required,
                           const cJSON *additional, long min_props, long max_props,
                           js_visit_fn visit) {
    int n = cJSON_GetArraySize(props_obj) + 1;
    prop *props = calloc((size_t)n, sizeof *props);
    if (!props) return js_fail(c, ptr, "out of memory"), NULL;
    int np = 0;
    char nm[256], p2[512];
    const cJSON *it;
    cJSON_ArrayForEach(it, props_obj) {
        js_sub_name(nm, sizeof nm, name, it->string);
        js_child_ptr(p2, sizeof p2, ptr, "properties", it->string);
        /* The schema false: the property must not appear, so it is left
         * out (and unsatisfiable if required). */
        if (cJSON_IsFalse(it) && !js_in_list(required, it->string)) continue;
        const char *value = visit(c, it, nm, p2);
        if (!value) break;
        sp_strbuf kv = {0};
        cJSON *ks = cJSON_CreateString(it->string);
        if (!ks || !js_const_rule(&kv, ks)) kv.oom = true;
        cJSON_Delete(ks);
        sp_strbuf_printf(&kv, " space \":\" space %s", value);
        char kvn[300];
        snprintf(kvn, sizeof kvn, "%s-kv", nm);
        props[np].kv = js_rule_from(c, kvn, &kv);
        props[np].key = it->string;
        props[np].required = js_in_list(required, it->string);
        np++;
    }
    const cJSON *patterns = s ? cJSON_GetObjectItemCaseSensitive(s, "patternProperties") : NULL;
    const char *pattern_kv = patterns && !c->failed
        ? js_pattern_kv(c, patterns, props_obj, additional, name, ptr, visit) : "";
    if (!c->failed && additional && !cJSON_IsFalse(additional)) {
        char an[256];
        js_sub_name(an, sizeof an, name, "additional");
        const char *value;
        if (cJSON_IsObject(additional)) {
            char vn[300];
            snprintf(vn, sizeof vn, "%s-value", an);
            js_child_ptr(p2, sizeof p2, ptr, "additionalProperties", NULL);
            value = visit(c, additional, vn, p2);
        } else {
            value = js_add_primitive(c, "value");
        }
        const char *key = js_add_primitive(c, "string");
        sp_strbuf kv = {0};
        sp_strbuf_printf(&kv, "%s \":\" space %s", key ? key : "string", value ? value : "value");
        char kvn[300];
        snprintf(kvn, sizeof kvn, "%s-kv", an);
        if (pattern_kv && *pattern_kv) sp_strbuf_printf(&kv, " | %s", pattern_kv);
        props[np].kv = js_rule_from(c, kvn, &kv);
        props[np++].key = NULL;
    } else if (pattern_kv && *pattern_kv) {
        props[np].kv = pattern_kv;
        props[np++].key = NULL;
    }
    if (c->failed) {
        free(props);
        return NULL;
    }
    js_add_primitive(c, "space");
    prop *opt = calloc((size_t)np + 1, sizeof *opt);
    int n_req = 0, n_opt = 0;
    for (int i = 0; opt && i < np; i++) {
        if (props[i].required) n_req++;
        else opt[n_opt++] = props[i];
    }
    /* The count over the optional ones: lo..hi (hi < 0: no cap). */
    long lo = min_props > n_req ? min_props - n_req : 0, hi = max_props < 0 ? -1 : max_props - n_req;
    bool star = n_opt && !opt[n_opt - 1].key;
    if (max_props >= 0 && hi < 0)
        js_fail(c, ptr, "maxProperties %ld is below the %d required properties", max_props, n_req);
    else if (hi >= 0 && lo > hi)
        js_fail(c, ptr, "minProperties %ld is above maxProperties %ld", min_props, max_props);
    else if (lo > n_opt && !star)
        js_fail(c, ptr, "minProperties %ld is more than the %d properties the object may have",
                min_props, n_req + n_opt);
    bool counted = lo > 0 || (hi >= 0 && (star || hi < n_opt));
    sp_strbuf o = {0};
    sp_strbuf_add(&o, "\"{\" space ", 10);
    for (int i = 0, k = 0; i < np; i++)
        if (props[i].required) sp_strbuf_printf(&o, "%s%s", k++ ? " \",\" space " : "", props[i].kv);
    if (n_opt > 0 && opt && !c->failed) {
        sp_strbuf_add(&o, " (", 2);
        if (n_req) sp_strbuf_add(&o, " \",\" space ( ", 13);
        if (counted) {
            counted_first(c, &o, opt, n_opt, lo, hi, name, ptr);
        } else {
            const char **rests = optional_rests(c, opt, n_opt, name);
            for (int i = 0; rests && i < n_opt; i++) {
                if (i) sp_strbuf_add(&o, " | ", 3);
                chain_link(&o, &opt[i], false);
                if (rests[i + 1]) sp_strbuf_printf(&o, " %s", rests[i + 1]);
            }
            free(rests);
        }
        if (n_req) sp_strbuf_add(&o, " )", 2);
        sp_strbuf_add(&o, lo > 0 ? " )" : " )?", lo > 0 ? 2 : 3);
    }
    sp_strbuf_add(&o, " \"}\" space", 10);
    free(opt);
    free(props);
    if (c->failed) return sp_strbuf_free(&o), NULL;
    return js_rule_from(c, name, &o);
}
/* Keywords an allOf member may carry besides properties / required /
 * type object / additionalProperties true or false / minProperties /
 * maxProperties / allOf: ones that constrain the value in a way the merge
 * below does not carry over. */
static const char *const UNMERGED[] = {
    "anyOf", "oneOf", "enum", "const", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "pattern", "format",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "nullable", "patternProperties"};

#define JS_MAX_MEMBERS 64

/* The merge of allOf: its members (a local $ref followed, a member's own
 * allOf flattened into the list), then what they add up to. */
typedef struct merge {
    const cJSON *member[JS_MAX_MEMBERS];
    char where[JS_MAX_MEMBERS][256];
    int n;
    long min_props, max_props;
} merge;

bool js_property_counts(js_conv *c, const cJSON *s, const char *ptr, long *min, long *max) {
    static const char *const K[] = {"minProperties", "maxProperties"};
    long *out[] = {min, max};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = get(s, K[i]);
        *out[i] = -1;
        if (!v) continue;
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) ||
            v->valuedouble > 1e9)
            return js_fail(c, ptr, "%s must be a non-negative integer", K[i]);
        *out[i] = (long)v->valuedouble;
    }
    return true;
}

/* minProperties / maxProperties of t into the merge's: the object is the
 * same for every member, so the largest minimum and smallest maximum. */
static bool merge_counts(js_conv *c, merge *m, const cJSON *t, const char *ptr) {
    long lo, hi;
    if (!js_property_counts(c, t, ptr, &lo, &hi)) return false;
    if (lo > m->min_props) m->min_props = lo;
    if (hi >= 0 && (m->max_props < 0 || hi < m->max_props)) m->max_props = hi;
    return true;
}

/* Member t of allOf (at ptr) and the members of its own allOf into m;
 * refused, naming the keyword, unless the merge takes all it asks. */
/* An allOf member with its local $ref followed; NULL after js_fail. */
static const cJSON *member_target(js_conv *c, const cJSON *t, const char *ptr) {
    const cJSON *ref = get(t, "$ref");
    if (cJSON_IsString(ref)) {
        const cJSON *target = NULL;
        if (!js_pointer_target(c->root, ref->valuestring, &target) || !target)
            return js_fail(c, ptr, "allOf: $ref '%s' of a member is not a local pointer to a "
                           "schema", ref->valuestring), NULL;
        if (cJSON_GetArraySize((cJSON *)t) > 1)
            return js_fail(c, ptr, "allOf: a member with $ref and other keywords is not merged"), NULL;
        t = target;
    }
    if (!cJSON_IsObject(t)) return js_fail(c, ptr, "allOf is supported only over schema objects"), NULL;
    return t;
}

static bool add_member(js_conv *c, merge *m, const cJSON *t, const char *ptr, int depth) {
    const cJSON *it;
    if (!(t = member_target(c, t, ptr))) return false;
    if (depth > JS_MAX_DEPTH || m->n >= JS_MAX_MEMBERS)
        return js_fail(c, ptr, "allOf: more than %d members, or nested past %d", JS_MAX_MEMBERS,
                       JS_MAX_DEPTH);
    cJSON_ArrayForEach(it, t) {
        bool unmerged = js_refused_keyword(it->string);
        for (size_t i = 0; i < sizeof UNMERGED / sizeof *UNMERGED; i++)
            unmerged = unmerged || !strcmp(UNMERGED[i], it->string);
        if (unmerged) return js_fail(c, ptr, "allOf: keyword '%s' in a member is not merged", it->string);
    }
    const cJSON *type = get(t, "type"), *add = get(t, "additionalProperties");
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "object")))
        return js_fail(c, ptr, "allOf is supported only over objects (type '%s')",
                       cJSON_IsString(type) ? type->valuestring : "list");
    if (add && !cJSON_IsBool(add))
        return js_fail(c, ptr, "allOf: additionalProperties as a schema in a member is not merged");
    if (get(t, "properties") && !cJSON_IsObject(get(t, "properties")))
        return js_fail(c, ptr, "properties must be an object");
    snprintf(m->where[m->n], sizeof m->where[0], "%s", ptr);
    m->member[m->n++] = t;
    if (!merge_counts(c, m, t, ptr)) return false;
    char p2[512], idx[16];
    int i = 0;
    cJSON_ArrayForEach(it, get(t, "allOf")) {
        snprintf(idx, sizeof idx, "%d", i++);
        js_child_ptr(p2, sizeof p2, ptr, "allOf", idx);
        if (!add_member(c, m, it, p2, depth + 1)) return false;
    }
    return true;
}

/* A reference to item (freed with its holder, item left alone). */
static cJSON *reference_to(const cJSON *item) {
    cJSON *tmp = cJSON_CreateArray();
    cJSON_AddItemReferenceToArray(tmp, (cJSON *)item);
    cJSON *ref = cJSON_DetachItemFromArray(tmp, 0);
    cJSON_Delete(tmp);
    return ref;
}

/* Schema a without its annotations equals b without its own. */
static bool same_but_annotations(const cJSON *a, const cJSON *b) {
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return cJSON_Compare(a, b, true);
    cJSON *x = cJSON_Duplicate(a, true), *y = cJSON_Duplicate(b, true);
    for (cJSON *t = x; t; t = t == x ? y : NULL) {
        for (cJSON *it = t->child, *next; it; it = next) {
            next = it->next;
            if (js_annotation_keyword(it->string)) cJSON_DeleteItemFromObjectCaseSensitive(t, it->string);
        }
    }
    bool same = x && y && cJSON_Compare(x, y, true);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return same;
}

/* Property p of a member into the merged properties: kept where the two
 * schemas differ only in annotations or one admits every value, else
 * both apply: the property's schema is their allOf (merged in turn when
 * it is visited, or refused there). */
static void merge_property(cJSON *props, const cJSON *p) {
    cJSON *had = cJSON_GetObjectItemCaseSensitive(props, p->string);
    if (!had) {
        cJSON_AddItemReferenceToObject(props, p->string, (cJSON *)p);
    } else if (js_schema_unconstrained(had) && !js_schema_unconstrained(p)) {
        cJSON_ReplaceItemInObjectCaseSensitive(props, p->string, reference_to(p));
    } else if (!js_schema_unconstrained(p) && !same_but_annotations(had, p)) {
        if (had->type & cJSON_IsReference) {
            cJSON *both = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(both, "allOf");
            cJSON_AddItemToArray(list, reference_to(had));
            cJSON_AddItemReferenceToArray(list, (cJSON *)p);
            cJSON_ReplaceItemInObjectCaseSensitive(props, p->string, both);
        } else {
            cJSON_AddItemReferenceToArray(cJSON_GetObjectItemCaseSensitive(had, "allOf"), (cJSON *)p);
        }
    }
}

/* ----------------------------------------------- allOf over non-objects */

static const char *const OBJECT_KEYWORDS[] = {"properties", "required", "additionalProperties",
                                              "patternProperties", "minProperties", "maxProperties"};

/* Whether schema t (a member, $ref followed, and its own allOf) says
 * anything of objects; false after js_fail too. */
static bool about_objects(js_conv *c, const cJSON *t, const char *ptr, int depth) {
    if (!(t = member_target(c, t, ptr)) || depth > JS_MAX_DEPTH) return false;
    const cJSON *type = get(t, "type"), *it;
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "object")) return true;
    for (size_t i = 0; i < sizeof OBJECT_KEYWORDS / sizeof *OBJECT_KEYWORDS; i++)
        if (get(t, OBJECT_KEYWORDS[i])) return true;
    cJSON_ArrayForEach(it, get(t, "allOf"))
        if (about_objects(c, it, ptr, depth + 1)) return true;
    return false;
}

/* JSON Schema's types as bits; integer within number. */
static int type_bits(const cJSON *type) {
    static const char *const NAMES[] = {"null", "boolean", "object", "array", "number", "string", "integer"};
    int bits = 0;
    for (const cJSON *t = cJSON_IsArray(type) ? type->child : type; t; t = cJSON_IsArray(type) ? t->next : NULL)
        for (int i = 0; i < 7; i++)
            if (cJSON_IsString(t) && !strcmp(t->valuestring, NAMES[i])) bits |= i == 4 ? 0x50 : 1 << i;
    return bits;
}

static cJSON *type_of_bits(int bits) {
    static const char *const NAMES[] = {"null", "boolean", "object", "array", "number", "string", "integer"};
    if (bits & 0x10) bits &= ~0x40;  /* number holds integer */
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < 7; i++)
        if (bits & (1 << i)) cJSON_AddItemToArray(list, cJSON_CreateString(NAMES[i]));
    return list;
}

/* The type bit a value has (integer: a number with no fraction). */
static int value_bits(const cJSON *v) {
    if (cJSON_IsNull(v)) return 1;
    if (cJSON_IsBool(v)) return 2;
    if (cJSON_IsObject(v)) return 4;
    if (cJSON_IsArray(v)) return 8;
    if (cJSON_IsString(v)) return 0x20;
    return v->valuedouble == floor(v->valuedouble) ? 0x50 : 0x10;
}

/* Keyword k = v of one member into the union u: a new keyword joins; type
 * takes the types both allow, enum / const the values both list; any
 * other keyword in two members must be the same. */
static bool union_keyword(js_conv *c, cJSON *u, const char *k, const cJSON *v, const char *ptr) {
    bool is_const = !strcmp(k, "const");
    if (is_const) k = "enum";
    cJSON *had = cJSON_GetObjectItemCaseSensitive(u, k);
    if (!strcmp(k, "enum")) {
        if (!is_const && !cJSON_IsArray(v)) return js_fail(c, ptr, "enum must be an array");
        cJSON *list = cJSON_CreateArray();
        const cJSON *x, *y;
        if (is_const) cJSON_AddItemReferenceToArray(list, (cJSON *)v);
        else cJSON_ArrayForEach(x, v) cJSON_AddItemReferenceToArray(list, (cJSON *)x);
        if (!had) return cJSON_AddItemToObject(u, k, list), true;
        cJSON *both = cJSON_CreateArray();
        cJSON_ArrayForEach(y, had) {
            bool in = false;
            cJSON_ArrayForEach(x, list) in = in || cJSON_Compare(x, y, true);
            if (in) cJSON_AddItemReferenceToArray(both, (cJSON *)y);
        }
        cJSON_Delete(list);
        cJSON_ReplaceItemInObjectCaseSensitive(u, k, both);
        return true;
    }
    if (!had) return cJSON_AddItemReferenceToObject(u, k, (cJSON *)v), true;
    if (!strcmp(k, "type")) {
        cJSON_ReplaceItemInObjectCaseSensitive(u, k, type_of_bits(type_bits(had) & type_bits(v)));
        return true;
    }
    /* Two item schemas: every item must meet both, their allOf. */
    if (!strcmp(k, "items") && cJSON_IsObject(had) && cJSON_IsObject(v) && !cJSON_Compare(had, v, true)) {
        if (!(had->type & cJSON_IsReference))  /* already an allOf of ours */
            return cJSON_AddItemReferenceToArray(cJSON_GetObjectItemCaseSensitive(had, "allOf"), (cJSON *)v), true;
        cJSON *both = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(both, "allOf");
        cJSON_AddItemToArray(list, reference_to(had));
        cJSON_AddItemReferenceToArray(list, (cJSON *)v);
        cJSON_ReplaceItemInObjectCaseSensitive(u, k, both);
        return true;
    }
    if (!cJSON_Compare(had, v, true))
        return js_fail(c, ptr, "allOf: keyword '%s' differs in two members (not merged)", k);
    return true;
}

/* Member t's keywords (and its allOf's members') into u. */
static bool union_member(js_conv *c, cJSON *u, const cJSON *t, const char *ptr, int depth) {
    const cJSON *it;
    if (depth > JS_MAX_DEPTH) return js_fail(c, ptr, "allOf nests past %d", JS_MAX_DEPTH);
    cJSON_ArrayForEach(it, t) {
        /* Annotations, and what holds or names schemas without applying. */
        static const char *const SKIP[] = {"$schema", "$id", "id", "$ref", "$defs", "definitions",
                                           "$anchor"};
        bool skip = js_annotation_keyword(it->string);
        for (size_t i = 0; i < sizeof SKIP / sizeof *SKIP; i++) skip = skip || !strcmp(SKIP[i], it->string);
        if (skip) continue;
        if (!strcmp(it->string, "allOf")) {
            const cJSON *m;
            cJSON_ArrayForEach(m, it) {
                const cJSON *target = member_target(c, m, ptr);
                if (!target || !union_member(c, u, target, ptr, depth + 1)) return false;
            }
        } else if (!union_keyword(c, u, it->string, it, ptr)) {
            return false;
        }
    }
    return true;
}

/* allOf whose members say nothing of objects: one schema with every
 * member's keywords (exact, since each keyword then holds once); values
 * listed by enum / const kept where their type is allowed, and refused
 * beside other keywords (the value rule does not check them). */
static const char *all_of_scalars(js_conv *c, const cJSON *s, const char *name, const char *ptr,
                                  js_visit_fn visit) {
    cJSON *u = cJSON_CreateObject();
    const cJSON *it;
    bool ok = u && union_member(c, u, s, ptr, 0);
    cJSON *values = cJSON_GetObjectItemCaseSensitive(u, "enum");
    cJSON_ArrayForEach(it, u) {
        if (!values || !ok || !strcmp(it->string, "enum") || !strcmp(it->string, "type")) continue;
        ok = js_fail(c, ptr, "allOf: keyword '%s' beside enum/const in another member is not merged",
                     it->string);
    }
    if (ok && values && get(u, "type")) {
        int bits = type_bits(get(u, "type"));
        cJSON *kept = cJSON_CreateArray(), *v;
        cJSON_ArrayForEach(v, values)
            if (value_bits(v) & bits) cJSON_AddItemReferenceToArray(kept, v);
        cJSON_ReplaceItemInObjectCaseSensitive(u, "enum", kept);
        values = kept;
    }
    if (ok && values && !cJSON_GetArraySize(values))
        ok = js_fail(c, ptr, "allOf: no value is in every member's enum/const and type");
    if (ok && cJSON_IsArray(get(u, "type")) && !cJSON_GetArraySize(get(u, "type")))
        ok = js_fail(c, ptr, "allOf: the members' types have none in common");
    const char *r = ok ? visit(c, u, name, ptr) : NULL;
    cJSON_Delete(u);
    return r;
}

/* allOf over objects: the members' properties merged in order, required
 * if any member, or the schema itself, requires it; minProperties /
 * maxProperties the tightest any of them sets. */
const char *js_all_of_rule(js_conv *c, const cJSON *s, const char *name, const char *ptr,
                           js_visit_fn visit) {
    const cJSON *all = get(s, "allOf"), *p, *r;
    if (cJSON_GetArraySize(all) == 1 && !get(s, "properties") && !get(s, "required") &&
        !get(s, "minProperties") && !get(s, "maxProperties"))
        return visit(c, cJSON_GetArrayItem(all, 0), name, ptr);
    if (!about_objects(c, s, ptr, 0)) return c->failed ? NULL : all_of_scalars(c, s, name, ptr, visit);
    merge *m = calloc(1, sizeof *m);
    if (!m) return js_fail(c, ptr, "out of memory"), NULL;
    m->min_props = m->max_props = -1;
    merge_counts(c, m, s, ptr);
    char p2[512], idx[16];
    int i = 0;
    cJSON_ArrayForEach(p, all) {
        snprintf(idx, sizeof idx, "%d", i++);
        js_child_ptr(p2, sizeof p2, ptr, "allOf", idx);
        if (c->failed || !add_member(c, m, p, p2, 0)) break;
    }
    /* The schema's own properties come first, as a member's would. */
    cJSON *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    cJSON_ArrayForEach(p, get(s, "properties")) merge_property(props, p);
    cJSON_ArrayForEach(r, get(s, "required"))
        if (cJSON_IsString(r)) cJSON_AddItemToArray(req, cJSON_CreateString(r->valuestring));
    for (int k = 0; k < m->n && !c->failed; k++) {
        cJSON_ArrayForEach(p, get(m->member[k], "properties")) merge_property(props, p);
        cJSON_ArrayForEach(r, get(m->member[k], "required"))
            if (cJSON_IsString(r)) cJSON_AddItemToArray(req, cJSON_CreateString(r->valuestring));
    }
    /* A member closed by additionalProperties false admits no property the
     * others add: such a property is left out (unsatisfiable if required). */
    for (int k = -1; k < m->n && !c->failed; k++) {
        const cJSON *closer = k < 0 ? s : m->member[k];
        if (!cJSON_IsFalse(get(closer, "additionalProperties"))) continue;
        for (cJSON *q = props->child, *next; q && !c->failed; q = next) {
            next = q->next;
            if (get(get(closer, "properties"), q->string)) continue;
            if (js_in_list(req, q->string))
                js_fail(c, k < 0 ? ptr : m->where[k], "allOf: additionalProperties false excludes "
                        "property '%s', which another member requires", q->string);
            else
                cJSON_DeleteItemFromObjectCaseSensitive(props, q->string);
        }
    }
    const char *res = c->failed ? NULL : js_object_rule(c, s, name, ptr, props, req, NULL,
                                                        m->min_props, m->max_props, visit);
    cJSON_Delete(props);
    cJSON_Delete(req);
    free(m);
    return res;
}
