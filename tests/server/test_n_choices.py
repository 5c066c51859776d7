"""`n` > 1 on /v1/chat/completions and /v1/completions through the openai
SDK: choice i of a request with seed s equals a solo request with seed
s + i (streamed or not), greedy choices are equal, usage counts the prompt
once and every choice's tokens, the later choices map the prompt's full
KV blocks from the prefix index (/metrics), n out of range is a 400, and
a client that leaves cancels every choice."""

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_common import ALIAS, gauge, request, start_raw_chat, wait_running

MESSAGES = [{"role": "user", "content": "Tell me a story about a lighthouse."}]
SAMPLING = {"max_tokens": 12, "temperature": 1.0, "top_p": 0.95}


def solo_chat(client, seed, **extra):
    r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, seed=seed,
                                       **SAMPLING, **extra)
    return r.choices[0]


def reply(c):
    return c.message.content, c.finish_reason


def test_chat_choices_equal_solo_runs_with_seed_plus_index(client):
    r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, seed=40, n=3,
                                       logprobs=True, **SAMPLING)
    assert [c.index for c in r.choices] == [0, 1, 2]
    solos = [client.chat.completions.create(model=ALIAS, messages=MESSAGES, seed=40 + i,
                                            logprobs=True, **SAMPLING) for i in range(3)]
    assert [reply(c) for c in r.choices] == [reply(s.choices[0]) for s in solos]
    assert len({c.message.content for c in r.choices}) > 1   # the seeds differ
    for c, s in zip(r.choices, solos):   # logprobs per choice
        got = [(t.token, t.logprob) for t in c.logprobs.content]
        want = [(t.token, t.logprob) for t in s.choices[0].logprobs.content]
        assert [t for t, _ in got] == [t for t, _ in want]
        assert [lp for _, lp in got] == pytest.approx([lp for _, lp in want], abs=1e-4)
    # The prompt once, every choice's completion tokens.
    assert r.usage.prompt_tokens == solos[0].usage.prompt_tokens
    completions = [s.usage.completion_tokens for s in solos]
    assert r.usage.completion_tokens == sum(completions)
    assert r.usage.total_tokens == r.usage.prompt_tokens + sum(completions)


def test_chat_stream_reassembled_by_index(client):
    stream = client.chat.completions.create(model=ALIAS, messages=MESSAGES, seed=40, n=3,
                                            stream=True,
                                            stream_options={"include_usage": True},
                                            **SAMPLING)
    text, finish, usage = {}, {}, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text[c.index] = text.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason is not None:
                assert c.index not in finish
                finish[c.index] = c.finish_reason
    assert sorted(text) == [0, 1, 2]
    assert [(text[i], finish[i]) for i in range(3)] == \
        [reply(solo_chat(client, 40 + i)) for i in range(3)]
    assert usage is not None and usage.completion_tokens >= 3


def test_completion_choices_stream_and_whole(client):
    prompt = "Once upon a time"
    whole = client.completions.create(model=ALIAS, prompt=prompt, seed=5, n=2, **SAMPLING)
    solos = [client.completions.create(model=ALIAS, prompt=prompt, seed=5 + i,
                                       **SAMPLING).choices[0].text for i in range(2)]
    assert [c.text for c in sorted(whole.choices, key=lambda c: c.index)] == solos
    text = {}
    for chunk in client.completions.create(model=ALIAS, prompt=prompt, seed=5, n=2,
                                           stream=True, **SAMPLING):
        for c in chunk.choices:
            text[c.index] = text.get(c.index, "") + c.text
    assert [text[0], text[1]] == solos


def test_greedy_choices_are_equal(client):
    r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, n=2,
                                       max_tokens=10, temperature=0)
    assert len(r.choices) == 2
    assert r.choices[0].message.content == r.choices[1].message.content
    assert r.choices[0].message.content


PET = {
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog", "fish"]}, "ok": {"type": "boolean"}},
    "required": ["kind", "ok"],
    "additionalProperties": False,
}


def test_response_format_holds_for_every_choice(client):
    """Each choice runs under its own copy of the schema's grammar."""
    jsonschema = pytest.importorskip("jsonschema")
    fmt = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}
    args = dict(model=ALIAS, messages=[{"role": "user", "content": "Describe a pet."}],
                max_tokens=60, temperature=1.0, response_format=fmt)
    r = client.chat.completions.create(n=3, seed=9, **args)
    solos = [client.chat.completions.create(seed=9 + i, **args).choices[0] for i in range(3)]
    assert [reply(c) for c in r.choices] == [reply(c) for c in solos]
    for c in r.choices:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), PET)


def prefix_cached_tokens(server):
    status, _, data = request(server.port, "GET", "/metrics")
    assert status == 200
    for f in text_string_to_metric_families(data.decode()):
        for s in f.samples:
            if s.name == "spindle_prompt_cached_tokens_total":
                return s.value
    raise AssertionError("no spindle_prompt_cached_tokens_total")


def test_prompt_computed_once(server, client):
    """A prompt no request has sent before: the first choice computes it,
    the other two map its whole 32-token blocks (never the last prompt
    token) from the prefix index."""
    prompt = [(i * 53 + 17) % 450 + 7 for i in range(100)]
    before = prefix_cached_tokens(server)
    r = client.completions.create(model=ALIAS, prompt=prompt, n=3, seed=1,
                                  max_tokens=4, temperature=1.0)
    assert r.usage.prompt_tokens == 100
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    assert prefix_cached_tokens(server) - before == 2 * ((100 - 1) // 32 * 32)


@pytest.mark.parametrize("n", [0, 17, 2.5, "2"])
def test_n_out_of_range_is_400(server, n):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                       max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=ALIAS, messages=MESSAGES, n=n, max_tokens=4)
        assert e.value.body["param"] == "n"
        with pytest.raises(openai.BadRequestError):
            c.completions.create(model=ALIAS, prompt="x", n=n, max_tokens=4)


@pytest.mark.parametrize("stream", [True, False])
def test_client_leaving_cancels_every_choice(server, stream):
    """Left alone, three choices would each run for 2000 tokens; the client
    closing its socket cancels all three within a few steps."""
    assert wait_running(server, 0) == 0
    generated = gauge(server, "spindle_generation_tokens_total")
    sock = start_raw_chat(server, {"messages": MESSAGES, "max_tokens": 2000,
                                   "ignore_eos": True, "n": 3}, stream)
    assert wait_running(server, 3) == 3, "the choices did not start:\n" + server.stderr()[-3000:]
    sock.close()
    assert wait_running(server, 0) == 0, "a choice still runs"
    more = gauge(server, "spindle_generation_tokens_total") - generated
    assert more < 3000, f"{more} tokens generated: the choices were not all cancelled"
