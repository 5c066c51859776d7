/* The server's stop-string matcher (src/server/stop_strings.h) against a
 * plain reference over the whole text: generation stops after the first
 * piece (token) by whose end some stop string has occurred, and the text is
 * cut at the earliest start among the occurrences complete by then (a stop
 * string still incomplete at that point never counts, even if it starts
 * earlier).
 *
 * Input: up to 4 stop strings, each ended by a NUL byte, then a 0x01 byte,
 * then the generated text split into pieces at every 0x02 byte. Invariants:
 * what the matcher sends (across all pieces, then the flush) equals the
 * reference; it reports a match exactly when the reference finds one; and
 * at no point has it sent a byte that the reference does not keep. */
#include "fuzz_common.h"

#include "server/stop_strings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data, *end = p + size;
    const char *sep = memchr(p, 1, size);
    if (!sep) return 0;
    char *stops[4];
    int n_stops = 0;
    while (p < sep && n_stops < 4) {
        const char *nul = memchr(p, 0, (size_t)(sep - p));
        size_t n = nul ? (size_t)(nul - p) : (size_t)(sep - p);
        if (n) {
            stops[n_stops] = strndup(p, n);
            if (!stops[n_stops]) abort();
            n_stops++;
        }
        p += n + (nul ? 1 : 0);
        if (!nul) break;
    }
    /* The reference: the text without the separators; at each piece's end
     * E, the occurrences ending by E; the first E that has one cuts at
     * their earliest start. */
    const char *text = sep + 1;
    size_t text_len = (size_t)(end - text);
    char *all = malloc(text_len + 1);
    if (!all) abort();
    size_t all_len = 0;
    for (size_t i = 0; i < text_len; i++)
        if (text[i] != 2) all[all_len++] = text[i];
    size_t cut = all_len, piece_end = 0;
    bool want_match = false;
    for (size_t i = 0; i <= text_len && !want_match; i++) {
        if (i < text_len && text[i] != 2) {
            piece_end++;
            continue;
        }
        for (int k = 0; k < n_stops; k++) {
            const char *hit = memmem(all, piece_end, stops[k], strlen(stops[k]));
            if (hit && (size_t)(hit - all) < cut) cut = (size_t)(hit - all);
        }
        want_match = cut < all_len;
    }

    sp_stop_matcher m;
    sp_stop_init(&m, stops, n_stops);
    sp_strbuf out = {0};
    bool matched = false;
    const char *piece = text;
    for (const char *q = text; q <= end; q++) {
        if (q < end && *q != 2) continue;
        matched = sp_stop_feed(&m, piece, (size_t)(q - piece), &out) || matched;
        FUZZ_CHECK(out.len <= cut && fuzz_same_bytes(out.p, all, out.len),
                   "sent %zu bytes that the reference cuts at %zu", out.len, cut);
        piece = q + 1;
    }
    if (!matched) sp_stop_flush(&m, &out);
    FUZZ_CHECK(matched == want_match, "match %d, reference %d", matched, want_match);
    FUZZ_CHECK(out.len == cut && fuzz_same_bytes(out.p, all, cut),
               "sent %zu bytes, reference %zu", out.len, cut);
    sp_strbuf_free(&out);
    sp_stop_free(&m);
    free(all);
    for (int i = 0; i < n_stops; i++) free(stops[i]);
    return 0;
}
