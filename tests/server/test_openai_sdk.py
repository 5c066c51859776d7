"""`spindle serve` through the official OpenAI Python SDK, on a tiny Qwen3
with the real Qwen3 tokenizer and chat template (make_server_model.py):
greedy answers, token counts and logprobs equal mlx-lm's on the same
prompt, streaming and not, chat and text completions; stop strings across
token boundaries; seeded sampling; concurrent clients."""
import concurrent.futures
import math

import pytest

from server_common import ALIAS


CHATS = ["hello", "system", "turns"]
TEXTS = ["story", "code"]


def chat(client, ref, **kw):
    return client.chat.completions.create(model=ALIAS, messages=ref["messages"],
                                          max_tokens=len(ref["tokens"]),
                                          temperature=0, **kw)


def stream_chat(client, ref, **kw):
    chunks = list(chat(client, ref, stream=True,
                       stream_options={"include_usage": True}, **kw))
    return chunks, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def completion(client, ref, **kw):
    return client.completions.create(model=ALIAS, prompt=ref["prompt"],
                                     max_tokens=len(ref["tokens"]), temperature=0, **kw)


def check_usage(usage, ref):
    assert usage.prompt_tokens == len(ref["prompt_tokens"])
    assert usage.completion_tokens == len(ref["tokens"])
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.parametrize("name", CHATS)
def test_chat_equals_mlx_greedy(client, reference, name):
    ref = reference["chats"][name]
    r = chat(client, ref)
    assert r.object == "chat.completion" and r.model == ALIAS
    assert r.id.startswith("chatcmpl-") and r.system_fingerprint
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == ref["text"]
    assert choice.finish_reason == "length" == ref["finish_reason"]
    check_usage(r.usage, ref)


@pytest.mark.parametrize("name", CHATS)
def test_chat_stream_equals_mlx_greedy(client, reference, name):
    ref = reference["chats"][name]
    chunks, text = stream_chat(client, ref)
    assert text == ref["text"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    with_choice = [c for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in with_choice][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in with_choice[:-1])
    # include_usage: one last chunk with no choices and the usage.
    assert chunks[-1].choices == [] and all(c.usage is None for c in chunks[:-1])
    check_usage(chunks[-1].usage, ref)


@pytest.mark.parametrize("name", TEXTS)
def test_completion_equals_mlx_greedy(client, reference, name):
    ref = reference["texts"][name]
    r = completion(client, ref)
    assert r.object == "text_completion"
    assert r.choices[0].text == ref["text"]
    assert r.choices[0].finish_reason == "length"
    check_usage(r.usage, ref)
    streamed = list(completion(client, ref, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == ref["text"]
    assert streamed[-1].choices[0].finish_reason == "length"


def test_completion_from_token_ids(client, reference):
    ref = reference["texts"]["story"]
    r = client.completions.create(model=ALIAS, prompt=ref["prompt_tokens"],
                                  max_tokens=len(ref["tokens"]), temperature=0)
    assert r.choices[0].text == ref["text"]
    assert r.usage.prompt_tokens == len(ref["prompt_tokens"])


@pytest.fixture
def stop_case(server_model, reference):
    """A stop string that spans the boundary between two generated tokens,
    and the text before its first occurrence, from mlx-lm's tokens decoded
    by the reference tokenizer."""
    import transformers
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(server_model / "tokenizer.json"))
    ref = reference["chats"]["hello"]
    for k in range(4, len(ref["tokens"]) - 2):
        head = tok.decode(ref["tokens"][:k])
        if "\ufffd" in head or len(head) < 2 or not ref["text"].startswith(head):
            continue
        stop = ref["text"][len(head) - 2:len(head) + 2]
        if len(stop) == 4 and "\ufffd" not in stop:
            return ref, stop, ref["text"][:ref["text"].index(stop)]
    pytest.fail("no clean token boundary in the reference text")


def test_stop_string_across_tokens(client, stop_case):
    ref, stop, before = stop_case
    r = chat(client, ref, stop=[stop, "never-generated-xyz"])
    assert r.choices[0].message.content == before
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < len(ref["tokens"])
    chunks, text = stream_chat(client, ref, stop=stop)
    assert text == before
    assert [c for c in chunks if c.choices][-1].choices[0].finish_reason == "stop"


def test_seed_reproducible(client, reference):
    ref = reference["chats"]["hello"]

    def sample(seed):
        return client.chat.completions.create(
            model=ALIAS, messages=ref["messages"], max_tokens=16, temperature=1.0,
            top_p=0.95, seed=seed).choices[0].message.content

    a, b, c = sample(7), sample(7), sample(8)
    assert a == b
    assert a != c and a != ref["text"][:len(a)]


def test_logprobs_equal_mlx(client, reference):
    ref = reference["chats"]["system"]
    r = chat(client, ref, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == len(ref["tokens"])
    for got, lp, top in zip(content, ref["logprobs"], ref["top_logprobs"]):
        assert math.isclose(got.logprob, lp, rel_tol=0, abs_tol=1e-3)
        assert len(got.top_logprobs) == len(top)
        for alt, (_, want) in zip(got.top_logprobs, top):
            assert math.isclose(alt.logprob, want, rel_tol=0, abs_tol=1e-3)
        assert got.top_logprobs[0].token == got.token
        assert bytes(got.bytes) == got.token.encode()
    c = completion(client, reference["texts"]["code"], logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == \
        len(reference["texts"]["code"]["tokens"])
    for got, want in zip(lp.token_logprobs, reference["texts"]["code"]["logprobs"]):
        assert math.isclose(got, want, abs_tol=1e-3)
    assert all(len(t) <= 2 for t in lp.top_logprobs)


def test_concurrent_clients_each_get_their_answer(client, reference):
    cases = [("chat", n) for n in CHATS] + [("text", n) for n in TEXTS]
    cases = cases * 2   # 10 requests on 4 running sequences: some queue

    def run(case, i):
        kind, name = case
        if kind == "chat":
            ref = reference["chats"][name]
            if i % 2:
                return ref["text"], stream_chat(client, ref)[1]
            return ref["text"], chat(client, ref).choices[0].message.content
        ref = reference["texts"][name]
        return ref["text"], completion(client, ref).choices[0].text

    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        futures = [pool.submit(run, c, i) for i, c in enumerate(cases)]
        for f in futures:
            want, got = f.result(timeout=300)
            assert got == want


def test_models_lists_the_alias(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [ALIAS]


def test_repeated_prompt_reports_cached_tokens(client):
    """The second time a long prompt comes, its whole 32-token KV blocks
    (never the last prompt token) come from the prefix index:
    usage.prompt_tokens_details.cached_tokens says how many, and the
    answer is the same."""
    prompt = "The pool keeps every block of this unusual prompt " * 12
    first = client.completions.create(model=ALIAS, prompt=prompt, max_tokens=8,
                                      temperature=0)
    second = client.completions.create(model=ALIAS, prompt=prompt, max_tokens=8,
                                       temperature=0)
    n = first.usage.prompt_tokens
    assert n > 64
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == (n - 1) // 32 * 32
    assert second.choices[0].text == first.choices[0].text
