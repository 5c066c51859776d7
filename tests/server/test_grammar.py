"""Structured output over HTTP: response_format (json_object, json_schema)
and llama-server's "grammar" field constrain what the server's model
writes, validated here with Python's jsonschema and re; a grammar or schema
that does not compile is a 400 naming the field, where and why (never an
unconstrained 200, llama.cpp #19051)."""
import json
import re

import pytest

from server_common import ALIAS, assert_api_error, post_json

SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "fish"]},
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 99.5},
    },
    "required": ["kind", "ok", "n", "weight"],
    "additionalProperties": False,
}


def chat(server, extra, max_tokens=120, temperature=0.8, seed=1):
    body = {"model": ALIAS, "messages": [{"role": "user", "content": "Describe a pet."}],
            "max_tokens": max_tokens, "temperature": temperature, "seed": seed, **extra}
    return post_json(server.port, "/v1/chat/completions", body)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_output_validates(server, seed):
    jsonschema = pytest.importorskip("jsonschema")
    status, _, body = chat(server, {"response_format": {
        "type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMA, "strict": True}}},
        max_tokens=200, seed=seed)
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMA)


def test_gbnf_grammar_field(server):
    gbnf = 'root ::= "answer: " ("yes" | "no") " (" [0-9]{1,3} "%)"\n'
    status, _, body = chat(server, {"grammar": gbnf}, max_tokens=40)
    assert status == 200, body
    text = body["choices"][0]["message"]["content"]
    assert re.fullmatch(r"answer: (yes|no) \([0-9]{1,3}%\)", text), text
    assert body["choices"][0]["finish_reason"] == "stop"


def test_json_object_is_an_object_when_it_ends(server):
    status, _, body = chat(server, {"response_format": {"type": "json_object"}}, max_tokens=60)
    assert status == 200, body
    choice = body["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    else:
        assert choice["message"]["content"].lstrip().startswith("{")


@pytest.mark.parametrize("extra,param,needle", [
    ({"grammar": 'root ::= "a" | [b-\n'}, "grammar", "line 1 col"),
    ({"grammar": "root ::= undefined-rule\n"}, "grammar", "undefined-rule"),
    ({"grammar": "root ::= root \"x\"\n"}, "grammar", "left-recursive"),
    ({"grammar": 17}, "grammar", "string"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"not": {}}}}}}},
     "response_format", "/properties/a"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", "schema"),
    ({"response_format": {"type": "xml"}}, "response_format", "xml"),
    ({"grammar": "root ::= \"a\"\n", "response_format": {"type": "json_object"}},
     "grammar", "exclude"),
])
def test_bad_grammar_is_a_400(server, extra, param, needle):
    status, _, body = chat(server, extra)
    err = assert_api_error(status, body, 400, param=param)
    assert needle in err["message"], err


def test_batched_constrained_equal_solo(server):
    """Constrained requests batched together (the server's engine steps
    them in one forward) write what each writes alone."""
    import threading
    fmt = {"response_format": {"type": "json_schema",
                               "json_schema": {"name": "pet", "schema": SCHEMA}}}
    gbnf = {"grammar": 'root ::= "answer: " ("yes" | "no") " (" [0-9]{1,3} "%)"\n'}
    cases = [(fmt, 200, 0.0, 1), (gbnf, 40, 0.0, 2), (fmt, 200, 0.9, 5), (gbnf, 40, 0.9, 7)]
    solo = [chat(server, *c)[2]["choices"][0]["message"]["content"] for c in cases]
    together = [None] * len(cases)

    def run(i):
        together[i] = chat(server, *cases[i])[2]["choices"][0]["message"]["content"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert together == solo


def test_grammar_cache_keys_on_the_text(server):
    """The server keeps compiled grammars keyed by kind and text: the same
    schema again (its grammar and masks from the cache) writes the same
    greedy answer, and a different schema right after gets its own grammar,
    not the cached one."""
    jsonschema = pytest.importorskip("jsonschema")

    def fmt(schema):
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "x", "schema": schema}}}
    other = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}},
             "required": ["name"], "additionalProperties": False}
    first, again = (chat(server, fmt(SCHEMA), 200, 0.0)[2] for _ in range(2))
    assert first["choices"][0]["message"]["content"] == again["choices"][0]["message"]["content"]
    status, _, body = chat(server, fmt(other), 120, 0.0)
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["message"]["content"]), other)


# Grammars and schemas whose language is empty: no text can ever complete
# them, so a generation under them could only fail or run to the token
# limit. Each is the client's error, a 400 naming the problem, before any
# byte of the response (streaming too).
NOTHING = "[^\\x00-\\U0010FFFF]"   # a character class that matches nothing
EMPTY_LANGUAGE = [
    ({"grammar": f"root ::= {NOTHING}\n"}, "grammar", "matches no text"),
    ({"grammar": 'root ::= "a" root\n'}, "grammar", "matches no text"),
    ({"grammar": 'root ::= "x" item\nitem ::= "y" item | "z" item\n'}, "grammar",
     "rule 'item' matches nothing"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "pattern": "^[^\\s\\S]$"}}}}, "response_format", "no JSON text"),
    # An object that must contain itself: no finite JSON text.
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}}}},
     "response_format", "no JSON text"),
    # A forced call whose parameters nothing satisfies.
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"code": {"type": "string", "pattern": "^[^\\s\\S]$"}},
        "required": ["code"]}}}], "tool_choice": "required"}, "tools", "no JSON text"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("extra,param,needle", EMPTY_LANGUAGE)
def test_grammar_that_matches_nothing_is_a_400(server, extra, param, needle, stream):
    """Through the OpenAI SDK with its default retries: a 400 on the first
    request (a 5xx would be retried), streamed and not."""
    openai = pytest.importorskip("openai")
    sent = []
    http = openai.DefaultHttpxClient(event_hooks={"request": [sent.append]})
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=60,
                       http_client=http) as client:
        assert client.max_retries == 2
        with pytest.raises(openai.BadRequestError) as e:
            reply = client.chat.completions.create(
                model=ALIAS, messages=[{"role": "user", "content": "Describe a pet."}],
                max_tokens=40, stream=stream, extra_body=extra)
            if stream:
                list(reply)
    err = e.value.body
    assert e.value.status_code == 400 and len(sent) == 1, (e.value, len(sent))
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert needle in err["message"], err
