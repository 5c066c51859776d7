/* The JSON Schema converter's shared state (json_schema.c: the schema
 * walk; json_schema_rules.c: primitives, literals, formats, ranges).
 * Internal to src/grammar/. */
#ifndef SP_GRAMMAR_JSON_SCHEMA_H
#define SP_GRAMMAR_JSON_SCHEMA_H

#include <cjson/cJSON.h>

#include "grammar/grammar.h"

#define JS_MAX_RULES 20000
#define JS_MAX_DEPTH 64
#define JS_MAX_REFS 256

typedef struct js_rule {
    char *name;
    char *body;
} js_rule;

typedef struct js_conv {
    const cJSON *root;
    js_rule *rules;
    int n_rules, cap_rules;
    struct {
        const char *ref;      /* into the schema document */
        int rule;             /* its rule, reserved before its body */
    } refs[256];
    int n_refs;
    int depth;
    bool failed;
    spindle_error *err;
} js_conv;

/* Add rule `name` (sanitized, made unique unless the same body is there)
 * with `body`; returns its final name (owned by conv), NULL on failure. */
const char *js_add_rule(js_conv *c, const char *name, const char *body);
/* Add one of the built-in rules (space, string, number, date, ...) and
 * the rules it needs; returns its name. */
const char *js_add_primitive(js_conv *c, const char *name);
bool js_fail(js_conv *c, const char *pointer, const char *fmt, ...)
    SP_PRINTF(3, 4);
/* A GBNF literal matching the JSON text of `value` exactly. */
bool js_literal(sp_strbuf *out, const char *text);
bool js_const_rule(sp_strbuf *out, const cJSON *value);
/* Integer bounds -> GBNF for the digits (min/max may be absent). */
bool js_int_range(sp_strbuf *out, bool has_min, long long min, bool has_max,
                  long long max);

/* [lo, hi] of non-negative integers as digits; hi < 0: unbounded (up to
 * 16 digits, the cap of llama.cpp's integral-part). */
void js_uint_range(sp_strbuf *out, unsigned long long lo, long long hi);
/* An email-format string (the email-string built-in) whose length is in
 * [min, max] (max < 0: none), as rule `name`; NULL after js_fail. */
const char *js_email_rule(js_conv *c, long min, long max, const char *name,
                          const char *ptr);
/* Whether f is a format JSON Schema defines (a validator checks it):
 * js_format_rule compiles it or refuses it by name. Other formats only
 * annotate. */
bool js_format_checked(const char *f);
/* A string of format f whose length is in [min, max] (max < 0: none), as
 * rule `name` (json_schema_formats.c); NULL after js_fail. */
const char *js_format_rule(js_conv *c, const char *f, long min, long max,
                           const char *name, const char *ptr);
/* Integers divisible by multipleOf (a whole number up to
 * JS_MAX_MULTIPLE: the grammar has a rule per remainder and digit), or
 * for a number (`number`) also such integers written with zero decimals,
 * or the decimals that are multiples of a multipleOf 10^-e (0.1, 0.01
 * ...), as rule `name`; NULL after js_fail. */
#define JS_MAX_MULTIPLE 100
const char *js_multiple_rule(js_conv *c, const cJSON *k, bool number, const char *name,
                             const char *ptr);
/* A bound of a number: its value, and whether it is exclusive. */
typedef struct js_bound {
    double value;
    bool strict;
} js_bound;
/* Number bounds (lo/hi NULL: none) -> GBNF for the numbers llama.cpp's
 * number rule writes without an exponent (the form llguidance keeps for
 * bounded numbers too) whose decimal value lies in the bounds, exactly.
 * False when no such number exists. */
bool js_number_range(sp_strbuf *out, const js_bound *lo, const js_bound *hi);

/* The converter's schema walk (json_schema.c's visit): a rule for schema
 * s named after `name`, errors at JSON pointer ptr. */
typedef const char *(*js_visit_fn)(js_conv *c, const cJSON *s, const char *name,
                                   const char *ptr);
/* Whether schema s admits every value (true, {} or annotations only). */
bool js_schema_unconstrained(const cJSON *s);
/* patternProperties (json_schema_patterns.c): the key-value rule of the
 * keys the patterns add to an object with `props` and `additional`
 * (additionalProperties, NULL when absent), "" when there are no
 * patterns, NULL after js_fail (where it cannot be compiled exactly). */
const char *js_pattern_kv(js_conv *c, const cJSON *patterns, const cJSON *props,
                          const cJSON *additional, const char *name, const char *ptr,
                          js_visit_fn visit);

/* What json_schema.c's walk shares with the files beside it. */
bool js_refused_keyword(const char *k);
/* Whether keyword k only annotates (title, description, default, ...). */
bool js_annotation_keyword(const char *k);
bool js_in_list(const cJSON *list, const char *s);
void js_child_ptr(char *out, size_t cap, const char *ptr, const char *a, const char *b);
void js_sub_name(char *out, size_t cap, const char *name, const char *part);
/* Rule `name` with body's text (body freed); NULL after js_fail. */
const char *js_rule_from(js_conv *c, const char *name, sp_strbuf *body);
/* An object (json_schema_object.c): props (a properties object, NULL for
 * none) in order, those `required` lists required, then the keys
 * patternProperties (of s) and `additional` add (NULL: none); the count
 * of properties within min_props..max_props (-1: no bound). */
const char *js_object_rule(js_conv *c, const cJSON *s, const char *name, const char *ptr,
                           const cJSON *props, const cJSON *required,
                           const cJSON *additional, long min_props, long max_props,
                           js_visit_fn visit);
/* s's minProperties / maxProperties (-1: absent); false after js_fail. */
bool js_property_counts(js_conv *c, const cJSON *s, const char *ptr, long *min, long *max);
/* allOf over objects merged into one object rule. */
const char *js_all_of_rule(js_conv *c, const cJSON *s, const char *name, const char *ptr,
                           js_visit_fn visit);

/* The schema a local $ref ("#" then a JSON pointer) names in root: false
 * when ref is no such pointer; *out NULL when it points at nothing. */
bool js_pointer_target(const cJSON *root, const char *ref, const cJSON **out);
/* The subschema whose $anchor or $dynamicAnchor is name, NULL if none. */
const cJSON *js_anchor_target(const cJSON *root, const char *name);
/* Whether a subschema of root sets its own $id (an embedded resource). */
bool js_has_nested_resource(const cJSON *root);
/* Whether oneOf's alternatives `alts` (of schema s) provably exclude each
 * other, so that it may be compiled as anyOf (json_schema_oneof.c);
 * js_fail naming two that may overlap when not. */
bool js_one_of_disjoint(js_conv *c, const cJSON *s, const cJSON *alts, const char *ptr);

#endif
