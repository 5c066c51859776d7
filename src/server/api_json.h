/* cJSON-level helpers shared by the request parsers (api_request.c,
 * api_messages.c); everything public is in api_request.h. */
#ifndef SP_SERVER_API_JSON_H
#define SP_SERVER_API_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "base/strbuf.h"
#include "server/api_request.h"

/* The body as a JSON object (cJSON_Delete it); trailing bytes after it
 * are malformed too. NULL with a 400 in *err. */
cJSON *sp_api_parse_object(const char *body, size_t len, sp_api_error *err);

/* A chat or completion body already parsed (sp_api_parse_generation's
 * work after the bytes are JSON). */
bool sp_api_parse_generation_root(sp_api_kind kind, const cJSON *root,
                                  const sp_api_limits *limits, sp_api_request *out,
                                  sp_api_error *err);

/* An integral JSON number in [lo, hi] into *out; else a 400 naming param. */
bool sp_api_read_long(const cJSON *v, const char *param, long lo, long hi,
                      long *out, sp_api_error *err);

/* `messages` (NULL when absent) as the JSON text spindle_chat_render takes
 * into r->messages_json: an array of objects with a string role; content a
 * string, null, or an array of {"type": "text", "text"} parts, which are
 * joined, and {"type": "image_url", "image_url": {"url"}} parts, each of
 * which leaves limits->image_marker in the text and its file in r->images
 * (a base64 data URL, decoded) or its URL in r->image_urls (an http(s)
 * URL, when limits->allow_remote_media; else a 400 naming the option);
 * limits NULL or without a marker: the model takes no images, a 400;
 * other part types are refused. Tool-call
 * arguments given as JSON strings become objects, as chat templates
 * expect (mlx_lm.server does the same). */
bool sp_api_messages_json(const cJSON *messages, const sp_api_limits *limits,
                          sp_api_request *r, sp_api_error *err);

/* `v` (NULL when absent) printed as JSON text into *out when it is of
 * cJSON type `type` (cJSON_Array, cJSON_Object); else a 400 naming it. */
bool sp_api_optional_json(const cJSON *v, const char *name, int type, char **out,
                          sp_api_error *err);

/* tool_choice, parallel_tool_calls and reasoning_format of a chat body
 * into r->tool_choice, checked against `tools` (NULL when absent): each tool
 * {"type": "function", "function": {"name"}}, a named choice one of them,
 * "required" or a name only with tools. */
bool sp_api_read_tool_choice(const cJSON *root, const cJSON *tools, sp_api_request *r,
                             sp_api_error *err);

/* ------------------------------------------------ images of other APIs
 * (api_media.c) The Anthropic and Responses translators build a
 * message's content from blocks: text runs, and images as chat image_url
 * parts in their place; the chat parser then decodes them. */

/* The name each image part had in the client's body, in the order of the
 * chat body's image parts ("input[0].content[1].image_url"). */
typedef struct sp_api_image_names {
    int n;
    char name[SP_API_MAX_IMAGES + 1][64];
} sp_api_image_names;

/* One message's content being built; zero-initialize, names may be NULL. */
typedef struct sp_api_content {
    sp_strbuf text;               /* the text since the last image */
    cJSON *parts;                 /* NULL until an image comes */
    sp_api_image_names *names;    /* where each image's name goes */
} sp_api_content;

void sp_api_content_text(sp_api_content *c, const char *text);
/* An image_url part of `url` (a data URL or a remote URL, which the chat
 * parser checks), named `source` in errors; false: out of memory (503). */
bool sp_api_content_image(sp_api_content *c, const char *url, const char *source,
                          sp_api_error *err);
bool sp_api_content_empty(const sp_api_content *c);
/* The content as the chat message takes it: the text as a string when no
 * image came, else the array of text and image_url parts; NULL when out
 * of memory. The caller owns it; free `c` after. */
cJSON *sp_api_content_take(sp_api_content *c);
/* {"role", "content": the content taken} appended to `msgs`; NULL when out
 * of memory. */
cJSON *sp_api_content_message(cJSON *msgs, const char *role, sp_api_content *c);
void sp_api_content_free(sp_api_content *c);

/* `source` appended to `names` (NULL: nothing); past the limit the names
 * are dropped, since the chat parser refuses those images anyway. */
void sp_api_image_name(sp_api_image_names *names, const char *source);
/* The image part of `messages` (the chat body's) that err names gets its
 * client-side name from `names`, in err->param and the message. */
void sp_api_name_image_error(sp_api_error *err, const cJSON *messages,
                             const sp_api_image_names *names);
/* How many image_url parts a chat message has. */
int sp_api_count_image_parts(const cJSON *message);
/* An error about `chat_name` (exactly) names `name` instead. */
void sp_api_rename_param(sp_api_error *err, const char *chat_name, const char *name);

#endif
