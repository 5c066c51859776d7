/* A chat reply's raw text split into what OpenAI's API returns: content,
 * reasoning_content and tool calls, for the tool-call formats the chat
 * templates emit.
 *
 * Pure functions over text (no model or socket), so that tests/fuzz and the
 * template round-trip tests drive them directly. The same parser serves
 * both modes: the whole answer (`final`) and every prefix of a stream
 * (partial). A partial parse holds back what may still turn into markup
 * (the start of a tool-call marker, a half-written call, whitespace that
 * trimming may drop), so that each partial result is a prefix of the next
 * and of the final one: tool_stream.h sends the differences, and their
 * concatenation equals the whole answer. */
#ifndef SP_SERVER_TOOL_CALLS_H
#define SP_SERVER_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"

typedef enum sp_tool_format {
    SP_TOOLS_HERMES = 0, /* Qwen 2.5/3, Hermes, SmolLM3: <tool_call>{json}</tool_call>
                            (also the fallback: templates with no known format) */
    SP_TOOLS_LLAMA3,     /* Llama 3.x: a bare {"name", "parameters"} object, or
                            after <|python_tag|> */
    SP_TOOLS_MISTRAL,    /* [TOOL_CALLS][{...}, ...] or [TOOL_CALLS]name[ARGS]{...} */
    SP_TOOLS_HARMONY,    /* gpt-oss: messages on channels, calls addressed
                            to=functions.NAME */
    SP_TOOLS_GEMMA,      /* Gemma 4: <|tool_call>call:NAME{key:value}<tool_call|> */
    SP_TOOLS_N_FORMATS
} sp_tool_format;

/* "hermes", "llama3", "mistral", "harmony", "gemma". */
const char *sp_tool_format_name(sp_tool_format f);
/* false when `name` is none of those. */
bool sp_tool_format_from_name(const char *name, sp_tool_format *out);

/* The name of the function in the probe conversation (see below). */
#define SP_TOOL_PROBE_NAME "spindle_probe_fn"
/* The probe conversation (JSON messages): a user turn and an assistant turn
 * calling SP_TOOL_PROBE_NAME with {"x": 1}. */
extern const char sp_tool_probe_messages[];
/* The tools array offered with the probe. */
extern const char sp_tool_probe_tools[];
/* Which format the chat template writes, from its rendering of the probe
 * conversation (NULL: the template failed on it): the markup around the
 * probe call names the format. */
sp_tool_format sp_tool_format_detect(const char *probe_rendered);

/* Whether the format's markers are special tokens, so the reply must be
 * detokenized with them kept (and the stop tokens left out). */
bool sp_tool_format_needs_special(sp_tool_format f);

typedef struct sp_reply_options {
    sp_tool_format format;
    bool tools;               /* split tool calls off (tools given, tool_choice not "none") */
    bool reasoning;           /* split <think> / the analysis channel off */
    bool starts_in_reasoning; /* the prompt ended inside <think> */
    bool single_call;         /* parallel_tool_calls false: the first call only */
    bool calls_only;          /* a grammar forced the reply to be calls (tool_choice
                                 "required" or a named function): from the first
                                 call marker on, nothing is content (a marker cut
                                 short by the token limit included) */
    const char *call_id_prefix; /* static; NULL: OpenAI's "call_" (Anthropic's
                                 clients expect "toolu_") */
} sp_reply_options;

typedef struct sp_tool_call {
    char *name;               /* malloc'd */
    sp_strbuf arguments;      /* JSON text as the model wrote it (Gemma's
                                 syntax converted) */
} sp_tool_call;

typedef struct sp_reply_parts {
    sp_strbuf content;
    sp_strbuf reasoning;
    sp_tool_call *calls;
    int n_calls, cap_calls;
    bool oom;
} sp_reply_parts;

/* Split text[0..len) into `out` (which must be zeroed or freed before).
 * final: the reply is complete; else it is a prefix of one. False only
 * when out of memory. */
bool sp_reply_parse(const sp_reply_options *opt, const char *text, size_t len, bool final,
                    sp_reply_parts *out);
void sp_reply_parts_free(sp_reply_parts *p);

#endif
