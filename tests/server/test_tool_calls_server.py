"""Tool calls and reasoning through the server with the official OpenAI
Python SDK: the tool call, the tool's result sent back, the final answer,
streamed and not.

The tiny random model cannot decide to call a tool, so this suite runs
`spindle_scripted` (tests/server/scripted_reply.c: `spindle` whose test-only
hook replaces the generated tokens by a scripted reply for matching
prompts). Everything after the tokens is the real server: the Qwen3 chat
template (with the request's tools), the real tokenizer's ids detokenized
one by one, the reply parser and the SSE chunks. What the SDK reads back is
checked against the scripted text, and the stream's deltas, joined, must
equal the whole answer.
"""
import json

import pytest

from scripted_calls import (ASK, CALLS, FINAL, THOUGHT, WEATHER_SCRIPT,
                            start_scripted_server)

SCRIPT = WEATHER_SCRIPT + [["Think aloud", "<think>\nPondering.\n</think>\n\nDone."]]
TOOLS = [{"type": "function", "function": {
    "name": name, "description": "test tool",
    "parameters": {"type": "object", "properties": {k: {"type": "string"} for k in args}}}}
    for name, args in CALLS]

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client(server_model):
    s = start_scripted_server(server_model, SCRIPT)
    try:
        with openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", timeout=120,
                           max_retries=0) as c:
            yield c
    finally:
        s.stop_cleanly()


def create(client, messages, **kw):
    return client.chat.completions.create(model="tiny", messages=messages, max_tokens=200,
                                          **kw)


def streamed(client, messages, **kw):
    """The stream's deltas joined: content, reasoning and each call."""
    content, reasoning, calls, finish = "", "", {}, None
    for chunk in create(client, messages, stream=True, **kw):
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        finish = c.finish_reason or finish
        d = c.delta
        content += d.content or ""
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
        for t in d.tool_calls or []:
            if t.index not in calls:
                # OpenAI's shape: the first delta of a call has its id and name.
                assert t.id and t.type == "function" and t.function.name
                assert t.index == len(calls)
                calls[t.index] = {"id": t.id, "name": t.function.name, "arguments": ""}
            else:
                assert t.id is None and t.function.name is None
            calls[t.index]["arguments"] += t.function.arguments or ""
    return content, reasoning, [calls[i] for i in sorted(calls)], finish


def whole(client, messages, **kw):
    r = create(client, messages, **kw)
    m = r.choices[0].message
    calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
             for t in m.tool_calls or []]
    for t in m.tool_calls or []:
        assert t.type == "function"
    return (m.content, (m.model_extra or {}).get("reasoning_content") or "", calls,
            r.choices[0].finish_reason)


def test_tool_call_whole_and_streamed(client):
    content, reasoning, calls, finish = whole(client, ASK, tools=TOOLS)
    assert content is None and finish == "tool_calls"
    assert reasoning == THOUGHT
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == CALLS
    assert all(c["id"].startswith("call_") for c in calls) and calls[0]["id"] != calls[1]["id"]
    s_content, s_reasoning, s_calls, s_finish = streamed(client, ASK, tools=TOOLS)
    assert s_content == "" and s_finish == "tool_calls" and s_reasoning == reasoning
    # The joined stream is the whole answer (ids are per request).
    assert [(c["name"], c["arguments"]) for c in s_calls] == \
        [(c["name"], c["arguments"]) for c in calls]


def test_round_trip_with_tool_results(client):
    _, _, calls, _ = whole(client, ASK, tools=TOOLS)
    results = {"get_weather": "21 C", "get_time": "14:00"}
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]}] + [
        {"role": "tool", "tool_call_id": c["id"], "content": results[c["name"]]} for c in calls]
    content, reasoning, final_calls, finish = whole(client, messages, tools=TOOLS)
    assert (content, reasoning, final_calls, finish) == (FINAL, "Got it.", [], "stop")
    assert streamed(client, messages, tools=TOOLS) == (FINAL, "Got it.", [], "stop")


def test_tool_choice_none_and_parallel(client):
    content, _, calls, finish = whole(client, ASK, tools=TOOLS, tool_choice="none")
    assert calls == [] and finish == "stop" and "<tool_call>" in content
    _, _, calls, _ = whole(client, ASK, tools=TOOLS, parallel_tool_calls=False)
    assert [c["name"] for c in calls] == ["get_weather"]
    _, _, calls, _ = whole(client, ASK, tools=TOOLS, tool_choice="required")
    assert len(calls) == 2
    named = {"type": "function", "function": {"name": "get_time"}}
    _, _, calls, _ = streamed(client, ASK, tools=TOOLS, tool_choice=named)
    assert len(calls) == 2   # no grammar forces the shape yet: parsed as it comes


def test_reasoning_format_none(client):
    content, reasoning, calls, _ = whole(client, ASK, extra_body={"reasoning_format": "none"})
    assert reasoning == "" and calls == [] and content.startswith("<think>")


@pytest.mark.parametrize("body,param", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_bad_tool_fields(client, body, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=ASK, extra_body=body)
    assert e.value.status_code == 400 and e.value.body["param"] == param


def test_tool_calls_per_choice(client):
    """n = 2: each choice parses its own reply into its own calls (their
    own ids), whole and streamed (the chunks reassembled by choice index)."""
    r = create(client, ASK, tools=TOOLS, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    for c in r.choices:
        assert c.finish_reason == "tool_calls" and c.message.content is None
        assert [(t.function.name, json.loads(t.function.arguments))
                for t in c.message.tool_calls] == CALLS
    assert r.choices[0].message.tool_calls[0].id != r.choices[1].message.tool_calls[0].id
    calls, finish = {0: {}, 1: {}}, {}
    for chunk in create(client, ASK, tools=TOOLS, n=2, stream=True):
        for c in chunk.choices:
            finish[c.index] = c.finish_reason or finish.get(c.index)
            for t in c.delta.tool_calls or []:
                entry = calls[c.index].setdefault(t.index, [t.function.name, ""])
                entry[1] += t.function.arguments or ""
    assert finish == {0: "tool_calls", 1: "tool_calls"}
    for i in (0, 1):
        assert [(n, json.loads(a)) for n, a in calls[i].values()] == CALLS
