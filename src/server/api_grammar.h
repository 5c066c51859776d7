/* response_format / grammar of a generation body (api_grammar.c). */
#ifndef SP_SERVER_API_GRAMMAR_H
#define SP_SERVER_API_GRAMMAR_H

#include <cjson/cJSON.h>

#include "server/api_request.h"

/* Fill r->grammar_kind (-1: none) and r->grammar_text; false and a 400
 * when a field is malformed. */
bool sp_api_read_grammar(const cJSON *root, sp_api_request *r, sp_api_error *err);

#endif
