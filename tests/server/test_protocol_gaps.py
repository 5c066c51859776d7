"""Protocol points where `spindle serve` answers as OpenAI's API (or vLLM)
does, through the OpenAI Python SDK: chat logprobs cover the reply's
tokens only (not the end-of-turn token that stops it), alternatives that a
grammar masked never come back (OpenAI never sends a null logprob), an
unknown role or a message without content is a 400 naming it (an
assistant turn with tool_calls and no content stays valid), GET
/v1/models/{id} answers the served model (404 for others), and a
max_tokens beyond the context is vLLM's 400 naming both numbers."""
import math

import pytest

from server_common import ALIAS

openai = pytest.importorskip("openai")

# Two answers only: the grammar masks almost the whole vocabulary at each
# step and ends the reply with the end-of-turn token.
YES_NO = {"type": "json_schema",
          "json_schema": {"name": "answer", "schema": {"type": "string", "enum": ["yes", "no"]}}}
CONTEXT = 4096   # make_server_model.CONTEXT


def ask(client, **kw):
    kw.setdefault("max_tokens", 16)
    return client.chat.completions.create(
        model=ALIAS, messages=[{"role": "user", "content": "Yes or no?"}],
        temperature=0, **kw)


def yes_no(client, stream):
    """(content, logprob entries) of a reply under the YES_NO grammar."""
    r = ask(client, logprobs=True, top_logprobs=5, response_format=YES_NO, stream=stream)
    if not stream:
        assert r.choices[0].finish_reason == "stop"
        return r.choices[0].message.content, r.choices[0].logprobs.content
    chunks = [c for c in r if c.choices]
    assert chunks[-1].choices[0].finish_reason == "stop"
    return ("".join(c.choices[0].delta.content or "" for c in chunks),
            [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.content])


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs_leave_out_the_end_of_turn(client, stream):
    content, tokens = yes_no(client, stream)
    assert content in ('"yes"', '"no"')
    assert "".join(t.token for t in tokens) == content, [t.token for t in tokens]


@pytest.mark.parametrize("stream", [False, True])
def test_masked_alternatives_are_left_out(client, stream):
    """Where the grammar allows one token, it is the one alternative; no
    entry is ever null."""
    _, tokens = yes_no(client, stream)
    for t in tokens:
        assert t.top_logprobs and t.top_logprobs[0].token == t.token, t
        for alt in t.top_logprobs:
            assert isinstance(alt.logprob, float) and math.isfinite(alt.logprob), t
    assert any(len(t.top_logprobs) == 1 for t in tokens), tokens


@pytest.mark.parametrize("messages, param, words", [
    ([{"role": "user", "content": "hi"}, {"role": "bot", "content": "hello"}],
     "messages[1].role", ["'bot'", "system", "assistant"]),
    ([{"role": "system", "content": "Be brief."}, {"role": "user"}],
     "messages[1].content", ["required", "user"]),
    ([{"role": "user", "content": None}], "messages[0].content", ["required"]),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
     "messages[1].content", ["required", "tool_calls"]),
])
def test_bad_message_is_400_naming_it(client, messages, param, words):
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=2)
    err = exc.value.body
    assert exc.value.status_code == 400 and err["param"] == param, err
    assert all(w in err["message"] for w in words), err


def test_assistant_tool_call_without_content_is_valid(client):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_time", "arguments": "{}"}}
    for content in (None, "absent"):
        turn = {"role": "assistant", "tool_calls": [call]}
        if content != "absent":
            turn["content"] = content
        r = client.chat.completions.create(
            model=ALIAS, max_tokens=2, temperature=0,
            messages=[{"role": "user", "content": "What time is it?"}, turn,
                      {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}])
        assert r.choices[0].finish_reason in ("length", "stop")


def test_models_retrieve(client, server_model):
    m = client.models.retrieve(ALIAS)
    assert (m.id, m.object, m.owned_by) == (ALIAS, "model", "spindle")
    # The -m path names the model in requests too (slashes and all).
    assert client.models.retrieve(str(server_model)).id == ALIAS
    assert m.model_dump()["meta"]["context_length"] == CONTEXT
    assert [x.id for x in client.models.list()] == [ALIAS]
    with pytest.raises(openai.NotFoundError) as exc:
        client.models.retrieve("no-such-model")
    err = exc.value.body
    assert err["code"] == "model_not_found" and "no-such-model" in err["message"], err
    assert set(err) == {"message", "type", "param", "code"}


def test_max_tokens_beyond_the_context_is_400(client, reference):
    r = ask(client)   # the prompt's length, from usage
    n = r.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as exc:
        ask(client, max_tokens=CONTEXT - n + 1)
    err = exc.value.body
    assert err["code"] == "context_length_exceeded" and err["param"] == "max_tokens", err
    assert str(CONTEXT) in err["message"] and str(CONTEXT + 1) in err["message"], err
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=ALIAS, prompt="Hello", max_tokens=CONTEXT)
    # Exactly the room left is fine (the end-of-turn token, biased, ends it).
    r = ask(client, max_tokens=CONTEXT - n,
            logit_bias={str(t): 100 for t in reference["eos_token_ids"]})
    assert r.choices[0].finish_reason == "stop"
