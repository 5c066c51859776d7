"""OpenAI's Responses API (POST /v1/responses, GET / DELETE
/v1/responses/{id}) through the official `openai` Python SDK's
client.responses, on the tiny Qwen3 of the server suite
(make_server_model.py): greedy answers equal mlx-lm's, usage counts the
prompt as the reference does, a stream has the SDK's semantic events in
order with consecutive sequence numbers and reassembles to the whole
answer, previous_response_id continues a kept conversation, store: false
keeps nothing, GET / DELETE find and forget a response, text.format's JSON
Schema constrains the output, and every malformed request is a 4xx in
OpenAI's error shape. Reasoning and function calls come from the scripted
binary (scripted_calls.py), with the calls' results sent back as
function_call_output items across previous_response_id."""
import json

import pytest

from scripted_calls import CALLS, FINAL, THOUGHT, WEATHER_SCRIPT, start_scripted_server
from server_common import ALIAS, Server, assert_api_error, request

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

CHATS = ["hello", "system", "turns"]
TEXT_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added", "response.output_text.delta",
               "response.output_text.done", "response.content_part.done",
               "response.output_item.done"]


@pytest.fixture(scope="module")
def server(server_model):
    s = Server(server_model, "--alias", ALIAS, "--parallel", 2)
    try:
        yield s
    finally:
        s.stop_cleanly()


@pytest.fixture(scope="module")
def oai(server):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=120,
                       max_retries=0) as c:
        yield c


def as_request(messages):
    """OpenAI chat messages -> (instructions, input items)."""
    system = "".join(m["content"] for m in messages if m["role"] == "system")
    items = [{"role": m["role"], "content": m["content"]}
             for m in messages if m["role"] != "system"]
    return (system or None), items


def ask(oai, messages, **kw):
    instructions, items = as_request(messages)
    return oai.responses.create(model=ALIAS, instructions=instructions, input=items,
                                temperature=0, **kw)


def call(server, method, path, body=None):
    """(status, the JSON reply)."""
    status, _, data = request(server.port, method, path, body)
    return status, json.loads(data)


def collapse(types):
    """Event types with runs of one delta type collapsed to one entry."""
    out = []
    for t in types:
        if not (out and t == out[-1] and t.endswith(".delta")):
            out.append(t)
    return out


@pytest.mark.parametrize("name", CHATS)
def test_greedy_equals_mlx(oai, reference, name):
    ref = reference["chats"][name]
    n = len(ref["tokens"])
    r = ask(oai, ref["messages"], max_output_tokens=n)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == ALIAS
    assert [o.type for o in r.output] == ["message"]
    assert r.output[0].role == "assistant" and r.output[0].content[0].type == "output_text"
    assert r.output_text == ref["text"]
    # The reply stopped at max_output_tokens.
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.max_output_tokens == n and r.temperature == 0
    assert r.usage.input_tokens == len(ref["prompt_tokens"])
    assert r.usage.output_tokens == n
    assert r.usage.total_tokens == r.usage.input_tokens + n
    assert r.usage.input_tokens_details.cached_tokens <= r.usage.input_tokens


def test_input_as_string_and_content_parts(oai, reference):
    ref = reference["chats"]["hello"]
    n = len(ref["tokens"])
    text = ref["messages"][0]["content"]
    r = oai.responses.create(model=ALIAS, input=text, max_output_tokens=n, temperature=0)
    assert r.output_text == ref["text"]
    parts = [{"type": "input_text", "text": text[:3]}, {"type": "input_text", "text": text[3:]}]
    r = oai.responses.create(model=ALIAS, max_output_tokens=n, temperature=0,
                             input=[{"type": "message", "role": "user", "content": parts}])
    assert r.output_text == ref["text"]


def test_stream_events_in_order(oai, reference):
    ref = reference["chats"]["system"]
    n = len(ref["tokens"])
    whole = ask(oai, ref["messages"], max_output_tokens=n)
    events = list(ask(oai, ref["messages"], max_output_tokens=n, stream=True))
    types = [e.type for e in events]
    assert collapse(types) == TEXT_EVENTS + ["response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == ref["text"] == whole.output_text
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == ref["text"]
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    final = events[-1].response
    assert final.id == events[0].response.id and final.output_text == ref["text"]
    assert final.usage.output_tokens == n


def test_previous_response_id_continues(oai, reference):
    """The second turn through previous_response_id equals the same
    conversation sent whole (which the chat route renders as mlx-lm does)."""
    ref = reference["chats"]["turns"]
    msgs = [m for m in ref["messages"] if m["role"] != "system"]
    assert [m["role"] for m in msgs[-3:]] == ["user", "assistant", "user"]
    first = oai.responses.create(model=ALIAS, input=msgs[-3]["content"], temperature=0,
                                 max_output_tokens=8)
    second = oai.responses.create(model=ALIAS, input=msgs[-1]["content"], temperature=0,
                                  max_output_tokens=8, previous_response_id=first.id)
    whole = oai.responses.create(model=ALIAS, temperature=0, max_output_tokens=8, input=[
        {"role": "user", "content": msgs[-3]["content"]},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": msgs[-1]["content"]}])
    assert second.previous_response_id == first.id
    assert second.output_text == whole.output_text
    assert second.usage.input_tokens == whole.usage.input_tokens > first.usage.input_tokens


def test_instructions_are_not_carried_over(oai):
    first = oai.responses.create(model=ALIAS, input="hi", instructions="Be terse.",
                                 temperature=0, max_output_tokens=4)
    second = oai.responses.create(model=ALIAS, input="more", temperature=0,
                                  max_output_tokens=4, previous_response_id=first.id)
    whole = oai.responses.create(model=ALIAS, temperature=0, max_output_tokens=4, input=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "more"}])
    assert second.instructions is None
    assert second.usage.input_tokens == whole.usage.input_tokens


def test_get_delete_and_store_false(oai):
    r = oai.responses.create(model=ALIAS, input="hi", temperature=0, max_output_tokens=4,
                             metadata={"k": "v"})
    got = oai.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.metadata == {"k": "v"}
    assert got.usage.output_tokens == r.usage.output_tokens and got.store is True
    oai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.retrieve(r.id)
    assert e.value.body["message"] == f"Response with id '{r.id}' not found."
    with pytest.raises(openai.NotFoundError):
        oai.responses.delete(r.id)
    unkept = oai.responses.create(model=ALIAS, input="hi", temperature=0, max_output_tokens=4,
                                  store=False)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(unkept.id)
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model=ALIAS, input="x", previous_response_id=unkept.id)
    assert e.value.code == "previous_response_not_found"
    assert e.value.body["param"] == "previous_response_id"
    # A streamed response is kept too.
    events = list(oai.responses.create(model=ALIAS, input="hi", max_output_tokens=4,
                                       stream=True))
    kept = oai.responses.retrieve(events[-1].response.id)
    assert kept.output_text == events[-1].response.output_text


PET = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10},
                   "age": {"type": "integer", "minimum": 0, "maximum": 30},
                   "kind": {"enum": ["cat", "dog"]}},
    "required": ["name", "age", "kind"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output_validates(oai, stream):
    fmt = {"format": {"type": "json_schema", "name": "pet", "schema": PET, "strict": True}}
    # Room for the longest text the schema's grammar allows (its whitespace
    # runs are bounded), whatever the model samples.
    kw = dict(model=ALIAS, input="Describe a pet.", text=fmt, temperature=0.8,
              max_output_tokens=600)
    if stream:
        with oai.responses.stream(**kw) as s:
            types = [e.type for e in s]
            r = s.get_final_response()
        assert collapse(types) == TEXT_EVENTS + ["response.completed"]
    else:
        r = oai.responses.create(**kw)
    assert r.status == "completed", r
    jsonschema.validate(json.loads(r.output_text), PET)
    assert r.text.format.type == "json_schema" and r.text.format.name == "pet"


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12},
                   "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True])
def test_forced_function_gives_a_schema_valid_call(oai, stream):
    """A named tool_choice is enforced by the tool-call grammar: one call of
    that function whose arguments the tool's schema accepts."""
    kw = dict(model=ALIAS, input="Weather in Paris for three days?", max_output_tokens=400,
              temperature=1.0, parallel_tool_calls=False,
              tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER}],
              tool_choice={"type": "function", "name": "get_weather"})
    if stream:
        with oai.responses.stream(**kw) as s:
            types = [e.type for e in s]
            r = s.get_final_response()
        assert "response.function_call_arguments.delta" in types
    else:
        r = oai.responses.create(**kw)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1, r
    assert calls[0].name == "get_weather" and calls[0].call_id
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    assert r.tool_choice.name == "get_weather"


# (body, param) pairs: each a 400 naming param.
MALFORMED = [
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": []}, "input"),
    ({"input": [5]}, "input[0]"),
    ({"input": [{"type": "web_search_call"}]}, "input[0]"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0]"),
    ({"input": [{"role": "user"}]}, "input[0].content"),
    # A text model takes no images (tests/vision for a vision model's).
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].image_url"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0]"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0]"),
    ({"input": "x", "instructions": 3}, "instructions"),
    ({"input": "x", "previous_response_id": 7}, "previous_response_id"),
    ({"input": "x", "tools": {}}, "tools"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0]"),
    ({"input": "x", "tool_choice": {"type": "mcp"}}, "tool_choice"),
    ({"input": "x", "tool_choice": "sometimes"}, "tool_choice"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}},
     "text.format.schema"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                                        "schema": {"type": "nonsense"}}}}, "text.format"),
    ({"input": "x", "store": "yes"}, "store"),
    ({"input": "x", "reasoning": "high"}, "reasoning"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "temperature": "hot"}, "temperature"),
    ({"input": "x", "model": "gpt-9"}, "model"),
]


@pytest.mark.parametrize("body,param", MALFORMED)
def test_malformed_requests_are_4xx(server, oai, body, param):
    status, reply = call(server, "POST", "/v1/responses", body)
    want = 404 if param == "model" else 400
    err = assert_api_error(status, reply, want, param=param)
    # The message names the Responses field, not the chat field it maps to.
    assert param in err["message"] or param == "model" or "json schema" in err["message"], err


def test_malformed_through_the_sdk(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=ALIAS, input=[{"type": "item_reference", "id": "x"}])
    assert e.value.body["param"] == "input[0]" and "item_reference" in e.value.body["message"]
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model=ALIAS, input="x", previous_response_id="resp_nope")
    assert e.value.code == "previous_response_not_found"


def test_routes_refuse_other_methods(server):
    status, body = call(server, "GET", "/v1/responses/resp_nope")
    assert_api_error(status, body, 404, code="not_found")
    status, body = call(server, "DELETE", "/v1/responses/resp_nope")
    assert_api_error(status, body, 404, code="not_found")
    status, body = call(server, "PUT", "/v1/responses/resp_nope")
    assert_api_error(status, body, 405, code="method_not_allowed")
    status, body = call(server, "GET", "/v1/responses")
    assert_api_error(status, body, 405, code="method_not_allowed")
    status, body = call(server, "POST", "/v1/responses", b"{not json")
    assert_api_error(status, body, 400)


# ---- Reasoning and function calls chosen by the model: `spindle_scripted`
# makes the tiny model "say" a reasoned call of two tools, then, once their
# results are in the prompt, a final answer.
TOOLS = [{"type": "function", "name": n, "description": "test tool",
          "parameters": {"type": "object", "properties": {k: {"type": "string"} for k in a}}}
         for n, a in CALLS]
RESULTS = {"get_weather": "21 C", "get_time": "14:00"}


@pytest.fixture(scope="module")
def scripted(server_model):
    s = start_scripted_server(server_model, WEATHER_SCRIPT)
    try:
        with openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", timeout=120,
                           max_retries=0) as c:
            yield c
    finally:
        s.stop_cleanly()


def items(response):
    """The output as comparable tuples (call ids are per request)."""
    out = []
    for o in response.output:
        if o.type == "reasoning":
            out.append(("reasoning", "".join(c.text for c in o.content)))
        elif o.type == "message":
            out.append(("message", "".join(c.text for c in o.content)))
        else:
            assert o.type == "function_call" and o.call_id and o.status == "completed"
            out.append(("function_call", o.name, json.loads(o.arguments)))
    return out


def ask_weather(scripted, **kw):
    return scripted.responses.create(model="tiny", input="What is the weather in Paris?",
                                     tools=TOOLS, max_output_tokens=200, **kw)


def test_reasoning_and_function_calls_whole_and_streamed(scripted):
    want = [("reasoning", THOUGHT)] + [("function_call", n, a) for n, a in CALLS]
    r = ask_weather(scripted)
    assert items(r) == want and r.status == "completed"
    events = list(ask_weather(scripted, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert collapse([e.type for e in events]) == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.output_item.done"] + [
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done"] * 2 + [
        "response.completed"]
    assert items(events[-1].response) == want
    for e in events:
        if e.type == "response.function_call_arguments.done":
            assert json.loads(e.arguments) == dict(CALLS)[e.name]


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_outputs_across_previous_response_id(scripted, stream):
    first = ask_weather(scripted)
    outputs = [{"type": "function_call_output", "call_id": o.call_id, "output": RESULTS[o.name]}
               for o in first.output if o.type == "function_call"]
    kw = dict(model="tiny", input=outputs, tools=TOOLS, max_output_tokens=200,
              previous_response_id=first.id)
    if stream:
        with scripted.responses.stream(**kw) as s:
            answer = s.get_final_response()
    else:
        answer = scripted.responses.create(**kw)
    assert items(answer) == [("reasoning", "Got it."), ("message", FINAL)]
    assert answer.output_text == FINAL and answer.status == "completed"
    # The same turn with the calls sent as items instead of by reference.
    calls = [{"type": "function_call", "call_id": o.call_id, "name": o.name,
              "arguments": o.arguments} for o in first.output if o.type == "function_call"]
    again = scripted.responses.create(model="tiny", tools=TOOLS, max_output_tokens=200,
                                      input=[{"role": "user",
                                              "content": "What is the weather in Paris?"}]
                                      + calls + outputs)
    assert items(again) == items(answer)
    assert again.usage.input_tokens == answer.usage.input_tokens


def test_tool_choice(scripted):
    r = ask_weather(scripted, tool_choice="none")
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert "<tool_call>" in r.output_text
    r = ask_weather(scripted, parallel_tool_calls=False)
    assert [o.name for o in r.output if o.type == "function_call"] == ["get_weather"]
    assert r.parallel_tool_calls is False
