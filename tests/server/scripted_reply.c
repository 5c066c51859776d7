/* The test build's scripted replies (src/server/reply.h): the
 * `spindle_scripted` binary is `spindle` with this strong definition of the
 * hook, so that the server suite can make the tiny random model "say" a
 * tool call through the real detokenizer, parser and SSE path.
 *
 * SPINDLE_TEST_SCRIPT holds a JSON array of [needle, reply] pairs: a request
 * whose rendered prompt contains `needle` gets `reply` (the first match) in
 * place of the generated tokens; other requests generate as usual. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static cJSON *rules;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load_rules(void) {
    const char *env = getenv("SPINDLE_TEST_SCRIPT");
    rules = env ? cJSON_Parse(env) : NULL;
}

const char *sp_server_scripted_reply(const char *prompt);

const char *sp_server_scripted_reply(const char *prompt) {
    pthread_once(&once, load_rules);
    if (!prompt || !cJSON_IsArray(rules)) return NULL;
    for (const cJSON *r = rules->child; r; r = r->next) {
        const cJSON *needle = cJSON_GetArrayItem(r, 0), *reply = cJSON_GetArrayItem(r, 1);
        if (cJSON_IsString(needle) && cJSON_IsString(reply) &&
            strstr(prompt, needle->valuestring))
            return reply->valuestring;
    }
    return NULL;
}
