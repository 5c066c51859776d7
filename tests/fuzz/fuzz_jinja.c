/* The Jinja engine: sp_jinja_parse, then sp_jinja_render twice.
 *
 * Input: template source, optionally a NUL byte and the context as JSON
 * (else a fixed chat-like context). Invariants: a failure has a one-line
 * message that starts "template line L, column C: "; output is
 * NUL-terminated at its length and within the output limit; rendering is
 * deterministic (the same template and context give the same bytes). */
#include "fuzz_common.h"

#include "template/jinja.h"

static const char default_context[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi <b>&amp;</b> \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [1, null, true]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"n\": 3, \"f\": 2.5, \"neg\": -7, \"big\": 1e300, \"s\": \"a,b,c\", \"none\": null}";

static void check_failure(spindle_status st, const spindle_error *err) {
    fuzz_check_error(st, err);
    FUZZ_CHECK(st == SPINDLE_ERR_TEMPLATE || st == SPINDLE_ERR_LIMIT || st == SPINDLE_ERR_MEMORY,
               "status %d: %s", (int)st, err->message);
    unsigned line = 0, col = 0;
    FUZZ_CHECK(sscanf(err->message, "template line %u, column %u: ", &line, &col) == 2,
               "message without its position: %s", err->message);
}

static void render(const sp_jinja_template *tpl, const cJSON *ctx) {
    sp_jinja_limits lim = sp_jinja_default_limits();
    lim.max_iterations = 20000;
    lim.max_output = 1 << 20;
    lim.max_value_bytes = 8 << 20;
    lim.now = 1700000000; /* a fixed clock: the two renders must agree */
    char *out[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    spindle_status st[2];
    spindle_error err[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++) {
        st[i] = sp_jinja_render(tpl, ctx, &lim, &out[i], &len[i], &err[i]);
        if (st[i] != SPINDLE_OK) {
            check_failure(st[i], &err[i]);
            continue;
        }
        FUZZ_CHECK(out[i] && out[i][len[i]] == '\0', "output not NUL-terminated");
        FUZZ_CHECK(len[i] <= lim.max_output, "%zu bytes past the limit", len[i]);
    }
    FUZZ_CHECK(st[0] == st[1], "renders disagree: status %d then %d", (int)st[0], (int)st[1]);
    if (st[0] == SPINDLE_OK)
        FUZZ_CHECK(len[0] == len[1] && fuzz_same_bytes(out[0], out[1], len[0]),
                   "renders disagree: %zu then %zu bytes", len[0], len[1]);
    else
        FUZZ_CHECK(!strcmp(err[0].message, err[1].message), "errors disagree: %s | %s",
                   err[0].message, err[1].message);
    free(out[0]);
    free(out[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *parts[2];
    fuzz_split(data, size, parts, 2);
    cJSON *ctx = sp_json_parse(parts[1] ? parts[1] : default_context);
    if (parts[1] && !cJSON_IsObject(ctx)) {
        cJSON_Delete(ctx);
        ctx = NULL; /* the engine takes NULL for no variables */
    }
    sp_jinja_template *tpl = NULL;
    spindle_error err = {0};
    spindle_status st = sp_jinja_parse(parts[0], strlen(parts[0]), &tpl, &err);
    if (st == SPINDLE_OK) {
        render(tpl, ctx);
        sp_jinja_free(tpl);
    } else {
        check_failure(st, &err);
        FUZZ_CHECK(!tpl, "template returned with an error");
    }
    cJSON_Delete(ctx);
    fuzz_free_parts(parts, 2);
    return 0;
}
