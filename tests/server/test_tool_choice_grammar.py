"""tool_choice "required" and a named function are enforced by a grammar:
whatever the model samples, the reply parses into the forced call(s), each
with arguments valid for its function's `parameters` schema (checked with
Python's jsonschema), streamed and not.

The tiny random model would never write a call on its own, so every call
the OpenAI SDK reads back here was shaped by the grammar. Two formats, both
on the real Qwen3 tokenizer: the Qwen3 chat template (Hermes
<tool_call>...</tool_call>) and Llama 3.1's own template (a bare
{"name", "parameters"} object), swapped into a copy of the model's
tokenizer_config.json. Where a test needs the model to write newlines or
markup at given places (after a call, between calls), greedy decoding
with logit_bias steers it, the grammar still deciding what may come.
"""
import json
import os
import pathlib
import re

import pytest

from server_common import REPO, Server

jsonschema = pytest.importorskip("jsonschema")
openai = pytest.importorskip("openai")

LLAMA_TEMPLATE = REPO / "tests" / "templates" / "models" / "meta-llama-Llama-3.1-8B-Instruct.jinja"

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
# $defs and a $ref: the tool's refs point at its own root.
ALARM = {
    "type": "object",
    "$defs": {"hhmm": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}},
    "properties": {"at": {"$ref": "#/$defs/hhmm"}, "loud": {"type": "boolean"}},
    "required": ["at", "loud"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": n, "description": "a test tool",
                                           "parameters": p}}
         for n, p in (("get_weather", WEATHER), ("set_alarm", ALARM))]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "Weather in Paris, and wake me at seven."}]


def llama_model(server_model, tmp):
    """The tiny model with Llama 3.1's chat template (the weights linked)."""
    out = tmp / "llama-template"
    out.mkdir()
    for f in server_model.iterdir():
        if f.name != "tokenizer_config.json":
            (out / f.name).symlink_to(f.resolve())
    cfg = json.loads((server_model / "tokenizer_config.json").read_text())
    cfg["chat_template"] = LLAMA_TEMPLATE.read_text()
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


@pytest.fixture(scope="module", params=["hermes", "llama3"])
def client(request, server_model, tmp_path_factory):
    model = server_model
    if request.param == "llama3":
        if not LLAMA_TEMPLATE.is_file():
            pytest.skip(f"{LLAMA_TEMPLATE} missing (scripts/setup.sh unpacks it)")
        model = llama_model(server_model, tmp_path_factory.mktemp("tc"))
    s = Server(model, "--alias", "tiny", "--parallel", 2)
    try:
        with openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", timeout=120,
                           max_retries=0) as c:
            c.tool_format = request.param
            yield c
    finally:
        s.stop_cleanly()


def ask(client, stream, **kw):
    """(content, [(name, arguments text)], finish_reason) of one reply."""
    kw = {"model": "tiny", "messages": ASK, "tools": TOOLS, "max_tokens": 400,
          "temperature": 1.0, **kw}
    if not stream:
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        return (m.content, [(t.function.name, t.function.arguments) for t in m.tool_calls or []],
                r.choices[0].finish_reason)
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        finish = c.finish_reason or finish
        content += c.delta.content or ""
        for t in c.delta.tool_calls or []:
            if t.index not in calls:
                assert t.id and t.function.name, t   # id and name first
                calls[t.index] = [t.function.name, ""]
            calls[t.index][1] += t.function.arguments or ""
    return content or None, [tuple(calls[i]) for i in sorted(calls)], finish


def assert_forced(reply, names, complete=True):
    """Every call is a forced one with valid arguments; complete: the reply
    ended by itself (else the token limit may cut the last call short)."""
    content, calls, finish = reply
    assert finish == "tool_calls" or (not complete and finish == "length"), reply
    assert not content, reply
    if finish == "length":
        calls = calls[:-1]
    assert calls, reply
    for name, arguments in calls:
        assert name in names, reply
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


SINGLE = {"parallel_tool_calls": False}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("stream", [False, True])
def test_required_is_one_of_the_tools(client, seed, stream):
    reply = ask(client, stream, tool_choice="required", seed=seed, **SINGLE)
    assert_forced(reply, set(SCHEMAS))
    assert len(reply[1]) == 1, reply


@pytest.mark.parametrize("name", ["get_weather", "set_alarm"])
@pytest.mark.parametrize("stream", [False, True])
def test_named_function_is_that_one(client, name, stream):
    for seed in (5, 6):
        reply = ask(client, stream, seed=seed, **SINGLE,
                    tool_choice={"type": "function", "function": {"name": name}})
        assert_forced(reply, {name})


def test_parallel_calls_are_all_forced(client):
    # The random model rarely samples the end: calls follow calls until the
    # token limit (Llama 3's format has one call per reply).
    for choice in ("required", {"type": "function", "function": {"name": "set_alarm"}}):
        reply = ask(client, False, tool_choice=choice, seed=7)
        names = set(SCHEMAS) if choice == "required" else {"set_alarm"}
        assert_forced(reply, names, complete=client.tool_format == "llama3")
        if client.tool_format == "hermes":
            assert len(reply[1]) >= 2, reply


@pytest.mark.parametrize("choice", ["required", "named"])
def test_stream_equals_whole(client, choice):
    kw = {"seed": 9, "tool_choice": "required" if choice == "required" else
          {"type": "function", "function": {"name": "get_weather"}}}
    assert ask(client, True, **kw) == ask(client, False, **kw)


def steering(server_model, *texts_and_biases):
    """logit_bias {token id: bias} for the model's tokens of each text."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(server_model / "tokenizer.json"))
    out = {}
    for text, bias in texts_and_biases:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert len(ids) == 1, (text, ids)
        out[str(ids[0])] = bias
    return out


NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("choice", ["required", "named"])
def test_forced_call_ends_after_newlines(client, server_model, choice, parallel, stream):
    # Greedy, with a newline wherever the grammar lets one through (also
    # with the '>' that closes a tag), else the end of the turn wherever it
    # may come: templates and models write a newline after a call, and the
    # turn must still be able to end there.
    bias = steering(server_model, (">\n", 100), ("\n", 90), ("<|im_end|>", 50))
    kw = {"tool_choice": "required" if choice == "required" else NAMED, "temperature": 0,
          "logit_bias": bias}
    if not parallel:
        kw.update(SINGLE)
    reply = ask(client, stream, **kw)
    assert_forced(reply, set(SCHEMAS) if choice == "required" else {"get_weather"})
    assert len(reply[1]) == 1, reply


@pytest.mark.parametrize("stream", [False, True])
def test_forced_reply_cut_short_keeps_markup_out_of_content(client, server_model, stream):
    # Greedy, with a newline, else a "<", wherever they may come, so that
    # calls follow calls until the token limit; cut at every token inside
    # the markup between two calls, the reply's content stays empty.
    if client.tool_format == "llama3":
        pytest.skip("Llama 3's format has one call and no markup")
    bias = steering(server_model, ("\n", 100), ("<", 90), ("<|im_end|>", 50))
    kw = {"model": "tiny", "messages": ASK, "tools": TOOLS, "tool_choice": "required",
          "temperature": 0, "logit_bias": bias}
    whole = client.chat.completions.create(max_tokens=160, logprobs=True, **kw)
    assert whole.choices[0].finish_reason == "length", whole
    pieces = [t.token for t in whole.choices[0].logprobs.content]
    text = "".join(pieces)
    ends, at = [], 0   # the text's length after each token
    for p in pieces:
        at += len(p)
        ends.append(at)
    inside = set()     # text lengths strictly inside a marker after the first call
    close = text.find("</tool_call>")
    for marker in ("<tool_call>", "</tool_call>"):
        for m in re.finditer(re.escape(marker), text):
            if m.start() >= close:
                inside.update(range(m.start() + 1, m.end()))
    cuts = [k + 1 for k, e in enumerate(ends) if e in inside]
    assert len(cuts) >= 3, pieces
    for max_tokens in cuts[:8]:
        content, calls, finish = ask(client, stream, max_tokens=max_tokens, tool_choice="required",
                                     temperature=0, logit_bias=bias)
        assert finish == "length" and calls and not content, (max_tokens, content, calls)


def test_auto_is_not_forced(client):
    # The same tools without a forced choice: the random model writes text.
    content, calls, _ = ask(client, False, tool_choice="auto", seed=1, max_tokens=30)
    assert content and not calls


def test_unsupported_parameters_schema_is_a_400(client):
    # Never an unforced reply: a schema the converter refuses is a 400 on tools.
    bad = [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"not": {}}}}}}]
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, False, tools=bad, tool_choice="required")
    body = e.value.body
    assert body["param"] == "tools" and "/properties/a" in body["message"], body
