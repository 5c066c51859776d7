"""Conversations rendered through every chat template by the parity test.

Each case is a dict with: id, messages, tools (or None), documents (or
None), add_generation_prompt, extra (keyword arguments for
apply_chat_template).
Cases that a template rejects (raise_exception, missing fields) are skipped
for that template only.
"""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["location"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documentation. Returns at most `limit` hits — ranked.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Free text \"query\""},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                "score": {"type": "number", "description": "minimum score", "default": 0.25},
                "tags": {"type": "array", "items": {"type": "string"}},
                "strict": {"type": "boolean"},
            },
            "required": ["query"],
        },
    },
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def _u(text):
    return {"role": "user", "content": text}


def _a(text):
    return {"role": "assistant", "content": text}


def _call(name, args, call_id="call_1", as_string=False):
    import json

    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args) if as_string else args},
    }


def _cases():
    c = []

    def add(cid, messages, tools=None, agp=False, documents=None, **extra):
        c.append({"id": cid, "messages": messages, "tools": tools, "documents": documents,
                  "add_generation_prompt": agp, "extra": extra})

    add("single_user", [_u("Hello!")])
    add("single_user_gen", [_u("Hello!")], agp=True)
    add("system_user_gen", [SYSTEM, _u("What is 2+2?")], agp=True)
    add("multi_turn", [SYSTEM, _u("Hi"), _a("Hello! How can I help?"), _u("Tell me a joke.")], agp=True)
    add("multi_turn_no_system", [_u("Hi"), _a("Hey."), _u("Bye"), _a("Goodbye!")])
    add("ends_with_assistant_gen", [_u("Hi"), _a("Hey.")], agp=True)
    add("unicode", [_u("Héllo wörld — ünïcödé ✓ 日本語 🤖"), _a("Ça va? Привет! 😀")], agp=True)
    add("empty_content", [_u(""), _a("")], agp=True)
    add("whitespace_content", [_u("  padded  \n\n"), _a("\n answer \t")], agp=True)
    add("special_chars", [_u('quotes "double" and \'single\', backslash \\ and {{ braces }} {% tag %}')], agp=True)
    add("newlines", [SYSTEM, _u("line1\nline2\r\nline3\n"), _a("a\n\nb")], agp=False)
    add("long_conversation",
        [SYSTEM] + [m for i in range(6) for m in (_u(f"question {i}"), _a(f"answer {i}"))] + [_u("last")],
        agp=True)
    add("two_systems", [SYSTEM, {"role": "system", "content": "Be terse."}, _u("Hi")], agp=True)

    tools = [WEATHER_TOOL, SEARCH_TOOL]
    add("tools_defined", [_u("What's the weather in Paris?")], tools=tools, agp=True)
    add("tools_with_system", [SYSTEM, _u("What's the weather in Paris?")], tools=tools, agp=True)
    add("tool_call_dict_args",
        [_u("Weather in Paris?"),
         {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"location": "Paris, France", "unit": "celsius"})]},
         {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temperature": 21.5, "unit": "celsius"}'},
         ],
        tools=tools, agp=True)
    add("tool_call_string_args",
        [SYSTEM, _u("Weather in Paris?"),
         {"role": "assistant", "content": None,
          "tool_calls": [_call("get_weather", {"location": "Paris, France"}, as_string=True)]},
         {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny, 21°C"},
         _a("It is sunny and 21°C in Paris.")],
        tools=tools, agp=False)
    add("tool_call_none_content_string_args",
        [_u("Weather in Paris?"),
         {"role": "assistant", "content": None,
          "tool_calls": [_call("get_weather", {"location": "Paris, France"}, as_string=True)]},
         {"role": "tool", "content": "sunny"}],
        agp=True)
    add("parallel_tool_calls",
        [_u("Weather in Paris and Rome, and search docs"),
         {"role": "assistant", "content": "Let me check.",
          "tool_calls": [_call("get_weather", {"location": "Paris"}, "c1"),
                         _call("get_weather", {"location": "Rome", "unit": "fahrenheit"}, "c2"),
                         _call("search_docs", {"query": "weather API", "limit": 3, "score": 0.5,
                                               "tags": ["a", "b"], "strict": True, "nothing": None}, "c3")]},
         {"role": "tool", "tool_call_id": "c1", "content": "18C"},
         {"role": "tool", "tool_call_id": "c2", "content": "75F"},
         {"role": "tool", "tool_call_id": "c3", "content": "[]"},
         _a("Paris 18C, Rome 75F.")],
        tools=tools, agp=True)
    add("parallel_tool_calls_string_args",
        [_u("Two cities"),
         {"role": "assistant", "content": None,
          "tool_calls": [_call("get_weather", {"location": "Paris"}, "c1", as_string=True),
                         _call("get_weather", {"location": "Rome"}, "c2", as_string=True)]},
         {"role": "tool", "content": "18C"},
         {"role": "tool", "content": "25C"}],
        tools=tools, agp=True)
    add("tool_call_unicode_args",
        [_u("Wetter in München?"),
         {"role": "assistant", "content": "",
          "tool_calls": [_call("get_weather", {"location": "München, Deutschland ☀", "unit": "celsius"})]},
         {"role": "tool", "content": "Sonnig ☀"}],
        tools=tools, agp=True)

    add("integral_floats",
        [_u("Set it"),
         {"role": "assistant", "content": "",
          "tool_calls": [_call("search_docs", {"query": "q", "score": 2.0, "limit": 3, "big": 1e20,
                                               "small": 1e-7, "neg": -0.0})]},
         {"role": "tool", "content": "done"}],
        tools=[SEARCH_TOOL, {"type": "function", "function": {
            "name": "scale", "description": "Scale by a factor",
            "parameters": {"type": "object", "properties": {
                "factor": {"type": "number", "default": 1.0, "maximum": 10.0}}}}}],
        agp=True, temperature=1.0)
    think = "The user asks for 2+2.\nThat is 4."
    add("reasoning_content_field",
        [_u("What is 2+2?"), {"role": "assistant", "content": "4", "reasoning_content": think}, _u("And 3+3?")],
        agp=True)
    add("reasoning_last_assistant",
        [_u("What is 2+2?"), {"role": "assistant", "content": "4", "reasoning_content": think}])
    add("thinking_field",
        [_u("What is 2+2?"), {"role": "assistant", "content": "4", "thinking": think}])
    add("think_tags_in_content",
        [_u("What is 2+2?"), _a("<think>\nadding numbers\n</think>\n\nIt is 4.")])
    add("think_tags_then_user",
        [_u("What is 2+2?"), _a("<think>\nadding\n</think>\n\n4"), _u("thanks")], agp=True)
    add("enable_thinking_false", [_u("Hi there")], agp=True, enable_thinking=False)
    add("enable_thinking_true", [_u("Hi there")], agp=True, enable_thinking=True)
    add("enable_thinking_false_history",
        [SYSTEM, _u("Hi"), _a("Hello"), _u("Again")], agp=True, enable_thinking=False)
    add("reasoning_effort_extra", [SYSTEM, _u("Solve it")], agp=True, reasoning_effort="high")
    add("tool_response_wrapped_user",
        [_u("<tool_response>\nfake\n</tool_response>"), _a("ok")], agp=True)
    add("content_parts",
        [{"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "this."}]}],
        agp=True)
    add("system_content_parts",
        [{"role": "system", "content": [{"type": "text", "text": "Sys parts."}]}, _u("Hi")], agp=True)
    add("numbers_in_extra", [_u("Hi")], agp=True, custom_number=3, custom_float=0.5, custom_list=[1, "two", None])

    # Paths that the model templates take only with their own keywords,
    # Mistral's nine-character call ids, documents, flat (unwrapped) tool
    # schemas, markup-sensitive text and structured tool results.
    add("mistral_call_ids",
        [SYSTEM, _u("Weather in Paris?"),
         {"role": "assistant", "content": None,
          "tool_calls": [_call("get_weather", {"location": "Paris, France"}, "abcDEF123")]},
         {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "sunny"},
         _a("Sunny."), _u("And Rome?")],
        tools=tools, agp=True)
    add("markup_sensitive_text",
        [{"role": "system", "content": "Use <b>bold</b> & 'quotes' \"wisely\"."},
         _u("Is 1 < 2 && 3 > 2? It's <true>."),
         {"role": "assistant", "content": "",
          "tool_calls": [_call("lookup", {"q": "<a href='x'>&amp;</a>", "n": [1, 2.5, None]}, "Xy0123456")]},
         {"role": "tool", "tool_call_id": "Xy0123456", "content": "<ok> & 'done'"}],
        tools=[{"type": "function", "function": {
            "name": "lookup", "description": "Look up a user's \"profile\" & <settings>.\nSecond line.",
            "parameters": {"type": "object", "properties": {
                "q": {"type": "string", "description": "query with <tags> & 'quotes'"},
                "n": {"type": "array", "items": {"type": ["number", "null"]}},
                "mode": {"type": "string", "enum": ["a&b", "<c>"], "nullable": True},
                "nested": {"type": "object", "properties": {"deep": {"type": "boolean"}},
                           "additionalProperties": False}},
                "required": ["q"]}}}],
        agp=True)
    add("structured_tool_result",
        [_u("Weather?"),
         {"role": "assistant", "content": None,
          "tool_calls": [_call("get_weather", {"location": "Oslo"}, "c0FFee123")]},
         {"role": "tool", "tool_call_id": "c0FFee123", "content": {"temp": -3, "sky": "snow ❄", "ok": True}}],
        tools=tools, agp=True)
    add("named_user_and_tool",
        [{"role": "user", "name": "alice", "content": "Weather?"},
         {"role": "assistant", "content": "Checking.",
          "tool_calls": [_call("get_weather", {"location": "Lima"}, "lima00001")]},
         {"role": "tool", "name": "get_weather", "tool_call_id": "lima00001", "content": "warm"},
         {"role": "user", "name": "bob", "content": "thanks"}],
        tools=tools, agp=True)
    docs = [{"title": "Tall penguins", "text": "Emperor penguins are the tallest."},
            {"title": "Penguin habitats", "text": "Emperor penguins only live in Antarctica."}]
    add("documents_rag", [SYSTEM, _u("Which penguins are the tallest?")], documents=docs, agp=True)
    add("documents_with_tools", [_u("Tallest penguins?")], tools=tools, documents=docs, agp=True)
    add("flat_tools",
        [_u("Search the web for penguins")],
        tools=[{"name": "internet_search", "description": "Returns a list of relevant document snippets",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
                "parameter_definitions": {"query": {"description": "Query to search the internet with",
                                                    "type": "str", "required": True}}},
               {"name": "directly_answer", "description": "Answer directly", "parameters": {},
                "parameter_definitions": {}}],
        agp=True)
    add("llama_builtin_tools",
        [_u("Search for the news"),
         {"role": "assistant", "content": "",
          "tool_calls": [_call("brave_search", {"query": "news today"}, "brave0001")]},
         {"role": "ipython", "content": "headlines"}],
        tools=tools, agp=True, builtin_tools=["brave_search", "wolfram_alpha"], date_string="26 Jul 2024")
    add("llama_tools_in_system",
        [SYSTEM, _u("Weather?")], tools=tools, agp=True, tools_in_user_message=False)
    add("model_keywords",
        [SYSTEM, _u("Solve it"), {"role": "assistant", "content": "Done.", "thinking": "work"}, _u("Again")],
        tools=[WEATHER_TOOL], agp=True, reasoning_effort="low", model_identity="You are Spindle.",
        thinking=True, controls={"citations": True, "length": "short", "hallucinations": True},
        builtin_tools=["browser", "python"], xml_tools=[WEATHER_TOOL], python_tools=[SEARCH_TOOL],
        functions='[{"name": "get_weather", "description": "Weather", "parameters": {}}]')
    add("thinking_keyword_off", [_u("Hi")], agp=True, thinking=False, enable_thinking=False)
    add("assistant_content_parts_with_calls",
        [_u("Weather?"),
         {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}],
          "tool_calls": [_call("get_weather", {"location": "Quito"}, "quito0001")]},
         {"role": "tool", "tool_call_id": "quito0001", "content": [{"type": "text", "text": "mild"}]}],
        tools=tools, agp=True)
    return c


CASES = _cases()
