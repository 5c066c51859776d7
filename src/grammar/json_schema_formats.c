/* String formats: the built-in date / time / uuid / email rules (length
 * bounds intersected with them), and the formats compiled from
 * llguidance's own regular expressions (its parser/src/json/formats.rs),
 * so that a format means here what it means there: hostname, ipv4, ipv6,
 * uri, duration. The other formats JSON Schema defines are refused by
 * name; formats it does not define only annotate (the caller's any
 * string). */
#include "grammar/json_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* llguidance's regexes with its named groups made plain (?:) groups. */
#define H16 "[0-9a-fA-F]{1,4}"
#define LS32 H16 ":" H16
#define DEC_OCTET "(?:[0-9]|[1-9][0-9]|25[0-5]|2[0-4][0-9]|1[0-9][0-9])"
#define URI_UNRESERVED "a-zA-Z0-9\\-._~"
#define URI_SUB_DELIMS "!$&'()*+,;="
#define URI_PCHAR "(?:[" URI_UNRESERVED URI_SUB_DELIMS ":@]|%[0-9a-fA-F]{2})"
#define URI_QCHAR "(?:[" URI_UNRESERVED URI_SUB_DELIMS ":@/?]|%[0-9a-fA-F]{2})"
#define DUR_TIME "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"

static const struct {
    const char *name, *regex;
} REGEX_FORMATS[] = {
    {"hostname", "[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
                 "(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*"},
    {"ipv4", "(?:" DEC_OCTET "\\.){3}" DEC_OCTET},
    {"ipv6", "(?:" H16 ":){7}" H16
             "|::(?:" H16 ":){0,5}" LS32
             "|(?:" H16 ")?::(?:" H16 ":){0,4}" LS32
             "|(?:(?:" H16 ":){0,1}" H16 ")?::(?:" H16 ":){0,3}" LS32
             "|(?:(?:" H16 ":){0,2}" H16 ")?::(?:" H16 ":){0,2}" LS32
             "|(?:(?:" H16 ":){0,3}" H16 ")?::" H16 ":" LS32
             "|(?:(?:" H16 ":){0,4}" H16 ")?::" LS32
             "|(?:(?:" H16 ":){0,5}" H16 ")?::" H16
             "|(?:(?:" H16 ":){0,6}" H16 ")?::"},
    /* RFC 3986: scheme ":" hier-part ["?" query] ["#" fragment], with
     * llguidance's IPv6 literal forms. */
    {"uri", "[a-zA-Z][a-zA-Z0-9+\\-.]*:"
            "(?://(?:(?:[" URI_UNRESERVED URI_SUB_DELIMS ":]|%[0-9a-fA-F]{2})*@)?"
            "(?:\\[(?:(?:" H16 ":){7}" H16 "|(?:" H16 ":){1,7}:|(?:" H16 ":){1,6}:" H16
            "|(?:" H16 ":){1,5}(?::" H16 "){1,2}|(?:" H16 ":){1,4}(?::" H16 "){1,3}"
            "|(?:" H16 ":){1,3}(?::" H16 "){1,4}|(?:" H16 ":){1,2}(?::" H16 "){1,5}"
            "|" H16 ":(?::" H16 "){1,6}|:(?::" H16 "){1,7}|::"
            "|v[0-9a-fA-F]+\\.[" URI_UNRESERVED URI_SUB_DELIMS ":]+)\\]"
            "|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}"
            "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
            "|(?:[" URI_UNRESERVED URI_SUB_DELIMS "]|%[0-9a-fA-F]{2})*)"
            "(?::[0-9]*)?(?:/" URI_PCHAR "*)*"
            "|/(?:" URI_PCHAR "+(?:/" URI_PCHAR "*)*)?"
            "|" URI_PCHAR "+(?:/" URI_PCHAR "*)*"
            "|)"
            "(?:\\?" URI_QCHAR "*)?(?:#" URI_QCHAR "*)?"},
    {"duration", "P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
                 "(?:" DUR_TIME ")?|" DUR_TIME "|[0-9]+W)"},
};

/* Formats of JSON Schema's vocabulary that have no rule here: a validator
 * checks them, so an any-string would be looser than the schema. */
static const char *const REFUSED_FORMATS[] = {
    "uri-reference", "iri", "iri-reference", "idn-email", "idn-hostname",
    "uri-template", "json-pointer", "relative-json-pointer", "regex"};

static bool is_uuid(const char *f) {
    return !strncmp(f, "uuid", 4) && (!f[4] || (f[4] >= '1' && f[4] <= '5' && !f[5]));
}

static bool is_shaped(const char *f) {
    return is_uuid(f) || !strcmp(f, "date") || !strcmp(f, "time") ||
           !strcmp(f, "date-time") || !strcmp(f, "email");
}

static const char *format_regex(const char *f) {
    for (size_t i = 0; i < sizeof REGEX_FORMATS / sizeof *REGEX_FORMATS; i++)
        if (!strcmp(REGEX_FORMATS[i].name, f)) return REGEX_FORMATS[i].regex;
    return NULL;
}

bool js_format_checked(const char *f) {
    for (size_t i = 0; i < sizeof REFUSED_FORMATS / sizeof *REFUSED_FORMATS; i++)
        if (!strcmp(REFUSED_FORMATS[i], f)) return true;
    return is_shaped(f) || format_regex(f);
}

/* A string of format f (date, time, date-time, uuid, email) whose length
 * is in [min, max] (max < 0: no bound): built-in rules. The date and time formats are a
 * few shapes of fixed length each, so the bound picks shapes; an email's
 * length is a sum of parts (js_email_rule). */
static const char *shaped_format_rule(js_conv *c, const char *f, long min, long max,
                               const char *name, const char *ptr) {
    char prim[64];
    snprintf(prim, sizeof prim, "%s-string", f);
    bool bounded = min > 0 || max >= 0;
    if (!bounded || !strcmp(f, "uuid")) {
        if (!strcmp(f, "uuid") && (min > 36 || (max >= 0 && max < 36)))
            return js_fail(c, ptr, "format 'uuid' is 36 characters, outside minLength/maxLength"), NULL;
        const char *r = js_add_primitive(c, !strcmp(f, "uuid") ? "uuid" : prim);
        return r ? js_add_rule(c, name, r) : NULL;
    }
    if (!strcmp(f, "email")) return js_email_rule(c, min, max, name, ptr);
    bool date = !strcmp(f, "date"), with_date = !strcmp(f, "date-time");
    sp_strbuf o = {0};
    int n = 0;
    js_add_primitive(c, "space");
    if (date) {
        if (min <= 10 && (max < 0 || max >= 10)) sp_strbuf_printf(&o, "%s", js_add_primitive(c, "date"));
        n = o.len > 0;
    } else {
        const char *d = with_date ? js_add_primitive(c, "date") : NULL;
        const char *hms = js_add_primitive(c, "time-hms"), *off = js_add_primitive(c, "time-offset");
        for (int ms = 0; ms < 2 && hms && off; ms++)
            for (int zulu = 0; zulu < 2; zulu++) {
                long len = (with_date ? 11 : 0) + 8 + 4 * ms + (zulu ? 1 : 6);
                if (len < min || (max >= 0 && len > max)) continue;
                sp_strbuf_printf(&o, "%s%s%s%s%s %s", n++ ? " | " : "", d ? d : "",
                                 d ? " \"T\" " : "", hms, ms ? " \".\" [0-9]{3}" : "",
                                 zulu ? "\"Z\"" : off);
            }
    }
    if (n == 0) {
        sp_strbuf_free(&o);
        return js_fail(c, ptr, "format '%s': no such string has a length within minLength/maxLength", f), NULL;
    }
    sp_strbuf body = {0};
    sp_strbuf_printf(&body, "\"\\\"\" ( %s ) \"\\\"\" space", o.p);
    sp_strbuf_free(&o);
    if (body.oom) return sp_strbuf_free(&body), js_fail(c, ptr, "out of memory"), NULL;
    const char *r = js_add_rule(c, name, body.p);
    sp_strbuf_free(&body);
    return r;
}


static const char *regex_format_rule(js_conv *c, const char *f, const char *regex,
                                     long min, long max, const char *name,
                                     const char *ptr) {
    if (min > 0 || max >= 0)
        return js_fail(c, ptr, "format '%s' with minLength/maxLength is not supported", f), NULL;
    char anchored[2048];
    snprintf(anchored, sizeof anchored, "^(?:%s)$", regex);
    sp_strbuf o = {0};
    const char *space = js_add_primitive(c, "space");
    sp_strbuf_add(&o, "\"\\\"\" ", 5);
    spindle_error e = {0};
    if (sp_regex_to_gbnf(anchored, strlen(anchored), &o, &e)) {
        sp_strbuf_free(&o);
        return js_fail(c, ptr, "internal: format '%s': %s", f, e.message), NULL;
    }
    sp_strbuf_printf(&o, " \"\\\"\" %s", space ? space : "space");
    if (o.oom || o.overflow) return sp_strbuf_free(&o), js_fail(c, ptr, "out of memory"), NULL;
    const char *r = js_add_rule(c, name, o.p);
    sp_strbuf_free(&o);
    return r;
}

const char *js_format_rule(js_conv *c, const char *f, long min, long max,
                           const char *name, const char *ptr) {
    if (is_shaped(f)) return shaped_format_rule(c, is_uuid(f) ? "uuid" : f, min, max, name, ptr);
    const char *regex = format_regex(f);
    if (regex) return regex_format_rule(c, f, regex, min, max, name, ptr);
    return js_fail(c, ptr, "format '%s' is not supported (compiled: date, time, date-time, "
                   "duration, email, hostname, ipv4, ipv6, uri, uuid)", f), NULL;
}
