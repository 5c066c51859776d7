/* Stop strings across token boundaries (stop_strings.h): text that may still
 * begin a stop string is held back, and never sent once it matches. Fuzzed
 * against a reference by tests/fuzz/fuzz_server_stop.c. */
#include "server/stop_strings.h"

#include <string.h>

void sp_stop_init(sp_stop_matcher *m, char *const *stops, int n_stops) {
    memset(m, 0, sizeof *m);
    m->which = -1;
    m->stops = stops;
    m->n_stops = n_stops;
    for (int i = 0; i < n_stops; i++) {
        size_t n = strlen(stops[i]);
        if (n > m->longest) m->longest = n;
    }
}

void sp_stop_free(sp_stop_matcher *m) {
    sp_strbuf_free(&m->held);
}

/* Offset of the earliest stop string in [p, p+n), or n when none; *which
 * is its index. */
static size_t first_stop(const sp_stop_matcher *m, const char *p, size_t n, int *which) {
    size_t best = n;
    for (int i = 0; i < m->n_stops; i++) {
        const char *hit = memmem(p, n, m->stops[i], strlen(m->stops[i]));
        if (hit && (size_t)(hit - p) < best) {
            best = (size_t)(hit - p);
            *which = i;
        }
    }
    return best;
}

/* Length of the longest suffix of [p, p+n) that begins some stop string. */
static size_t open_prefix(const sp_stop_matcher *m, const char *p, size_t n) {
    size_t most = m->longest ? m->longest - 1 : 0;
    for (size_t k = most < n ? most : n; k > 0; k--)
        for (int i = 0; i < m->n_stops; i++)
            if (strlen(m->stops[i]) > k && !memcmp(p + n - k, m->stops[i], k)) return k;
    return 0;
}

bool sp_stop_feed(sp_stop_matcher *m, const char *text, size_t len, sp_strbuf *out) {
    if (m->matched) return true;
    if (m->n_stops == 0) {
        sp_strbuf_add(out, text, len);
        return false;
    }
    sp_strbuf_add(&m->held, text, len);
    const char *p = m->held.p ? m->held.p : "";
    size_t n = m->held.len;
    size_t stop_at = first_stop(m, p, n, &m->which);
    if (stop_at < n) {
        sp_strbuf_add(out, p, stop_at);
        m->matched = true;
        m->held.len = 0;
        return true;
    }
    size_t keep = open_prefix(m, p, n);
    sp_strbuf_add(out, p, n - keep);
    if (m->held.p) {
        memmove(m->held.p, p + n - keep, keep);
        m->held.p[keep] = '\0';
    }
    m->held.len = keep;
    return false;
}

void sp_stop_flush(sp_stop_matcher *m, sp_strbuf *out) {
    if (!m->matched && m->held.len) sp_strbuf_add(out, m->held.p, m->held.len);
    m->held.len = 0;
}
