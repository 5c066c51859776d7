"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
through the official `anthropic` Python SDK, on the tiny Qwen3 of the
server suite (make_server_model.py): greedy answers equal mlx-lm's and the
chat route's for the same conversation, usage and count_tokens equal the
chat route's token counts, stop_sequences and max_tokens give Anthropic's
stop reasons, a stream has Anthropic's event order and reassembles to the
whole answer, errors come as the SDK's typed exceptions in Anthropic's
error shape, and a forced tool gives a schema-valid tool_use block.

The server runs with --api-key: the Anthropic SDK sends it as x-api-key,
the OpenAI SDK as a bearer token."""
import json
import re

import pytest

from server_common import ALIAS, Server, request

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

KEY = "sekret"
CHATS = ["hello", "system", "turns"]
# The SDK has no sampling arguments any more; the body's fields still work.
GREEDY = {"temperature": 0}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12},
                   "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
# One call (the grammar then ends the reply), whatever the model samples.
FORCED = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
TOOL = {"name": "get_weather", "description": "The weather of a city", "input_schema": WEATHER}


@pytest.fixture(scope="module")
def server(server_model):
    s = Server(server_model, "--alias", ALIAS, "--parallel", 2, "--api-key", KEY)
    try:
        yield s
    finally:
        s.stop_cleanly()


@pytest.fixture(scope="module")
def claude(server):
    with anthropic.Anthropic(base_url=server.base_url, api_key=KEY, timeout=120,
                             max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def oai(server):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=KEY, timeout=120,
                       max_retries=0) as c:
        yield c


def split_system(messages):
    """OpenAI messages -> (Anthropic's system, its messages)."""
    system = "".join(m["content"] for m in messages if m["role"] == "system")
    return system, [m for m in messages if m["role"] != "system"]


def ask(claude, messages, **kw):
    system, rest = split_system(messages)
    if system:
        kw["system"] = system
    return claude.messages.create(model=ALIAS, messages=rest, **kw)


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


@pytest.mark.parametrize("name", CHATS)
def test_greedy_equals_mlx_and_chat_route(claude, oai, reference, name):
    ref = reference["chats"][name]
    n = len(ref["tokens"])
    m = ask(claude, ref["messages"], max_tokens=n, extra_body=GREEDY)
    o = oai.chat.completions.create(model=ALIAS, messages=ref["messages"], max_tokens=n,
                                    temperature=0)
    assert m.type == "message" and m.role == "assistant" and m.model == ALIAS
    assert m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"]
    assert text_of(m) == ref["text"] == o.choices[0].message.content
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None
    u = m.usage
    # Anthropic counts the tokens read from the cache apart from input_tokens.
    assert u.input_tokens + u.cache_read_input_tokens == o.usage.prompt_tokens
    assert o.usage.prompt_tokens == len(ref["prompt_tokens"])
    assert u.cache_creation_input_tokens == 0
    assert u.output_tokens == o.usage.completion_tokens == n


def test_system_as_text_blocks(claude, reference):
    ref = reference["chats"]["system"]
    system, rest = split_system(ref["messages"])
    blocks = [{"type": "text", "text": system[:5]}, {"type": "text", "text": system[5:]}]
    content = [{"type": "text", "text": rest[0]["content"]}]
    m = claude.messages.create(model=ALIAS, system=blocks, max_tokens=len(ref["tokens"]),
                               messages=[{"role": "user", "content": content}],
                               extra_body=GREEDY, metadata={"user_id": "someone"})
    assert text_of(m) == ref["text"]


def test_stop_sequences(claude, reference):
    ref = reference["chats"]["hello"]
    stop = ref["text"][6:9]
    m = ask(claude, ref["messages"], max_tokens=len(ref["tokens"]), extra_body=GREEDY,
            stop_sequences=["never-there", stop])
    assert text_of(m) == ref["text"][:ref["text"].find(stop)]
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    with claude.messages.stream(model=ALIAS, messages=ref["messages"],
                                max_tokens=len(ref["tokens"]), extra_body=GREEDY,
                                stop_sequences=[stop]) as s:
        final = s.get_final_message()
    assert text_of(final) == text_of(m)
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop


@pytest.mark.parametrize("name", CHATS)
def test_count_tokens_equals_chat_prompt_tokens(claude, reference, name):
    ref = reference["chats"][name]
    system, rest = split_system(ref["messages"])
    kw = {"system": system} if system else {}
    r = claude.messages.count_tokens(model=ALIAS, messages=rest, **kw)
    assert r.input_tokens == len(ref["prompt_tokens"])


def test_thinking_switch_is_enable_thinking(claude, oai):
    """thinking disabled / enabled: the template's enable_thinking, as the
    chat route's chat_template_kwargs give it (Qwen3's template writes an
    empty think block when it is off)."""
    hi = [{"role": "user", "content": "hi"}]
    for on in (False, True):
        counted = claude.messages.count_tokens(
            model=ALIAS, messages=hi, thinking={"type": "enabled", "budget_tokens": 1024}
            if on else {"type": "disabled"})
        o = oai.chat.completions.create(model=ALIAS, messages=hi, max_tokens=1,
                                        extra_body={"chat_template_kwargs":
                                                    {"enable_thinking": on}})
        assert counted.input_tokens == o.usage.prompt_tokens
    plain = claude.messages.count_tokens(model=ALIAS, messages=hi).input_tokens
    off = claude.messages.count_tokens(model=ALIAS, messages=hi,
                                       thinking={"type": "disabled"}).input_tokens
    assert off > plain


def sse_events(server, body):
    """[(event name, data object)] of a raw stream (the SDK drops pings)."""
    status, hdrs, data = request(server.port, "POST", "/v1/messages", {**body, "stream": True},
                                 {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert status == 200 and hdrs["content-type"] == "text/event-stream", data[:300]
    events = []
    for frame in data.decode().split("\n\n"):
        if not frame.strip():
            continue
        name, payload = frame.split("\n", 1)
        assert name.startswith("event: ") and payload.startswith("data: "), frame
        obj = json.loads(payload[6:])
        assert obj["type"] == name[7:], frame
        events.append((name[7:], obj))
    return events


def collapse(kinds):
    out = []
    for k in kinds:
        if not out or out[-1] != k:
            out.append(k)
    return out


def test_stream_events_and_text(claude, server, reference):
    ref = reference["chats"]["turns"]
    n = len(ref["tokens"])
    system, rest = split_system(ref["messages"])
    events = sse_events(server, {"model": ALIAS, "messages": rest, "max_tokens": n, **GREEDY})
    kinds = [k for k, _ in events]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"], kinds
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"], kinds
    assert set(kinds[3:-3]) == {"content_block_delta"}, kinds
    start, block, deltas = events[0][1], events[1][1], [o for _, o in events[3:-3]]
    assert start["message"]["id"].startswith("msg_") and start["message"]["content"] == []
    assert block["index"] == 0 and block["content_block"] == {"type": "text", "text": ""}
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for d in deltas)
    assert "".join(d["delta"]["text"] for d in deltas) == ref["text"]
    end = events[-2][1]
    assert end["delta"]["stop_reason"] == "max_tokens" and end["usage"]["output_tokens"] == n
    # Through the SDK: its events, and its stream helper's accumulated message.
    sdk = list(claude.messages.create(model=ALIAS, messages=rest, max_tokens=n,
                                      extra_body=GREEDY, stream=True))
    # (How many tokens one delta carries depends on timing: runs collapsed.)
    assert collapse(e.type for e in sdk) == collapse(k for k in kinds if k != "ping")
    with claude.messages.stream(model=ALIAS, messages=rest, max_tokens=n,
                                extra_body=GREEDY) as s:
        final = s.get_final_message()
    whole = claude.messages.create(model=ALIAS, messages=rest, max_tokens=n, extra_body=GREEDY)
    assert text_of(final) == text_of(whole) == ref["text"]
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == n
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens


def check_error_shape(exc, want_type):
    body = exc.body
    assert body["type"] == "error", body
    assert body["error"]["type"] == want_type and body["error"]["message"], body


def test_errors_are_typed(claude, server):
    hi = [{"role": "user", "content": "hi"}]
    # The SDK checks max_tokens itself, so the body goes out as it is.
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.post("/v1/messages", cast_to=object, body={"model": ALIAS, "messages": hi})
    check_error_shape(e.value, "invalid_request_error")
    assert "max_tokens" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=ALIAS, max_tokens=4,
                               messages=[{"role": "system", "content": "hi"}])
    check_error_shape(e.value, "invalid_request_error")
    assert "role" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="no-such-model", max_tokens=4, messages=hi)
    check_error_shape(e.value, "not_found_error")
    for kw, what in [({"tool_choice": {"type": "any"}}, "tool_choice"),
                     ({"stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences"),
                     ({"messages": [{"role": "user", "content": [
                         {"type": "image", "source": {"type": "url", "url": "x"}}]}]},
                      "image"),
                     ({"stream": True, "messages": [{"role": "tool", "content": "x"}]}, "role")]:
        with pytest.raises(anthropic.BadRequestError) as e:
            claude.messages.create(**{"model": ALIAS, "max_tokens": 4, "messages": hi, **kw})
        check_error_shape(e.value, "invalid_request_error")
        assert what in e.value.body["error"]["message"], (kw, e.value.body)
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.count_tokens(model=ALIAS, messages=[{"role": "system", "content": "x"}])
    check_error_shape(e.value, "invalid_request_error")
    with anthropic.Anthropic(base_url=server.base_url, api_key="wrong", max_retries=0) as bad:
        for call in (lambda: bad.messages.create(model=ALIAS, max_tokens=4, messages=hi),
                     lambda: bad.messages.count_tokens(model=ALIAS, messages=hi)):
            with pytest.raises(anthropic.AuthenticationError) as e:
                call()
            check_error_shape(e.value, "authentication_error")


def test_forced_tool_gives_tool_use(claude):
    """A forced tool gives one tool_use block, whole and streamed, whose id
    has the form Anthropic's clients expect ("toolu_" and 24 base-62
    characters, not the chat route's "call_")."""
    ask_weather = [{"role": "user", "content": "Weather in Paris for three days?"}]
    m = claude.messages.create(model=ALIAS, messages=ask_weather, max_tokens=400,
                               tools=[TOOL], tool_choice=FORCED,
                               extra_body={"temperature": 1.0})
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and len(uses) == 1, m
    assert uses[0].name == "get_weather"
    assert re.fullmatch(r"toolu_[0-9A-Za-z]{24}", uses[0].id), uses[0].id
    jsonschema.validate(uses[0].input, WEATHER)
    # Streamed: a tool_use block whose input arrives as input_json_delta.
    with claude.messages.stream(model=ALIAS, messages=ask_weather, max_tokens=400,
                                tools=[TOOL], tool_choice=FORCED,
                                extra_body={"temperature": 1.0}) as s:
        events = list(s)
        final = s.get_final_message()
    assert any(e.type == "content_block_delta" and e.delta.type == "input_json_delta"
               for e in events)
    uses = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and uses and uses[0].name == "get_weather"
    assert re.fullmatch(r"toolu_[0-9A-Za-z]{24}", uses[0].id), uses[0].id
    jsonschema.validate(uses[0].input, WEATHER)


def test_tool_turns_render_as_chat_tool_calls(claude, oai):
    """tool_use / tool_result blocks are the chat route's assistant
    tool_calls and tool message: the same prompt, token for token."""
    args = {"city": "Paris", "days": 3}
    claude_turns = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": args}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny, 21 C"}]},
    ]
    chat_turns = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
    ]
    fn = {"type": "function", "function": {"name": TOOL["name"],
                                           "description": TOOL["description"],
                                           "parameters": WEATHER}}
    counted = claude.messages.count_tokens(model=ALIAS, messages=claude_turns, tools=[TOOL])
    o = oai.chat.completions.create(model=ALIAS, messages=chat_turns, tools=[fn], max_tokens=1)
    assert counted.input_tokens == o.usage.prompt_tokens


# ---- Tools and thinking chosen by the model: `spindle_scripted` makes the
# tiny model "say" a reasoned tool call (tests/server/test_tool_calls_server.py
# has the same script on the chat route).
from scripted_calls import (ASK, CALLS, FINAL, THOUGHT,  # noqa: E402
                            WEATHER_SCRIPT as SCRIPT, start_scripted_server)
SCRIPT_TOOLS = [{"name": n, "description": "test tool", "input_schema": {
    "type": "object", "properties": {k: {"type": "string"} for k in a}}} for n, a in CALLS]


@pytest.fixture(scope="module")
def scripted(server_model):
    s = start_scripted_server(server_model, SCRIPT)
    try:
        with anthropic.Anthropic(base_url=s.base_url, api_key="unused", timeout=120,
                                 max_retries=0) as c:
            yield c
    finally:
        s.stop_cleanly()


def blocks(message):
    """The content as comparable tuples (tool_use ids are per request)."""
    out = []
    for b in message.content:
        if b.type == "thinking":
            out.append(("thinking", b.thinking))
        elif b.type == "text":
            out.append(("text", b.text))
        else:
            assert b.type == "tool_use" and b.id
            out.append(("tool_use", b.name, b.input))
    return out


def test_thinking_and_tool_use_whole_and_streamed(scripted):
    want = [("thinking", THOUGHT)] + [("tool_use", n, a) for n, a in CALLS]
    m = scripted.messages.create(model="tiny", max_tokens=200, messages=ASK,
                                 tools=SCRIPT_TOOLS)
    assert blocks(m) == want and m.stop_reason == "tool_use"
    with scripted.messages.stream(model="tiny", max_tokens=200, messages=ASK,
                                  tools=SCRIPT_TOOLS) as s:
        events = list(s)
        final = s.get_final_message()
    assert blocks(final) == want and final.stop_reason == "tool_use"
    deltas = {e.delta.type for e in events if e.type == "content_block_delta"}
    assert deltas == {"thinking_delta", "input_json_delta"}
    starts = [e.index for e in events if e.type == "content_block_start"]
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert starts == stops == [0, 1, 2]


def test_tool_results_round_trip(scripted):
    m = scripted.messages.create(model="tiny", max_tokens=200, messages=ASK,
                                 tools=SCRIPT_TOOLS)
    results = {"get_weather": "21 C", "get_time": "14:00"}
    uses = [b for b in m.content if b.type == "tool_use"]
    turns = ASK + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id,
                                      "content": results[b.name]} for b in uses]}]
    answer = scripted.messages.create(model="tiny", max_tokens=200, messages=turns,
                                      tools=SCRIPT_TOOLS)
    assert blocks(answer) == [("thinking", "Got it."), ("text", FINAL)]
    assert answer.stop_reason == "end_turn"
    with scripted.messages.stream(model="tiny", max_tokens=200, messages=turns,
                                  tools=SCRIPT_TOOLS) as s:
        assert blocks(s.get_final_message()) == blocks(answer)


def test_tool_choice_none_and_single(scripted):
    m = scripted.messages.create(model="tiny", max_tokens=200, messages=ASK,
                                 tools=SCRIPT_TOOLS, tool_choice={"type": "none"})
    assert [b.type for b in m.content] == ["thinking", "text"] and m.stop_reason == "end_turn"
    assert "<tool_call>" in m.content[1].text
    m = scripted.messages.create(model="tiny", max_tokens=200, messages=ASK, tools=SCRIPT_TOOLS,
                                 tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert [b.name for b in m.content if b.type == "tool_use"] == ["get_weather"]
