"""A diffusion model (the tiny LLaDA GGUF) through `spindle serve`, with the
openai SDK: a completion equals `spindle run`'s canvas for the same
settings and seed (spindle run itself is checked against
llama-diffusion-cli in test_llama_diffusion.py), a stream's block chunks
concatenate to the whole text, two concurrent requests each get what they
get alone, and malformed or unsupported fields are 400s naming the field."""
import sys
import threading
from pathlib import Path

import pytest

import llada_gguf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_common import Server  # noqa: E402

openai = pytest.importorskip("openai")

PROMPT = "hello world"
# canvas 16 in 4 blocks of 4, 2 steps each, sampled: the seed matters
SETTINGS = {"max_tokens": 16, "diffusion_steps": 8, "block_length": 4,
            "remasking": "confidence", "temperature": 0.7, "top_k": 40,
            "top_p": 0.9}


@pytest.fixture(scope="module")
def server(llada):
    s = Server(llada, "--alias", "llada")
    yield s
    s.stop_cleanly()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                       timeout=60, max_retries=0) as c:
        yield c


def run_text(run_llada, seed, settings=SETTINGS):
    """spindle run's canvas text for PROMPT; the settings avoid an
    end-of-sequence token in the canvas (the server's reply ends at one)."""
    r = run_llada("-p", PROMPT, "-n", settings["max_tokens"], "--diffusion-steps",
                  settings["diffusion_steps"], "--block-length", settings["block_length"],
                  "--remasking", settings["remasking"], "--temp", settings["temperature"],
                  "--top-k", settings["top_k"], "--top-p", settings["top_p"],
                  "--seed", seed, "--json")
    assert llada_gguf.EOS not in r.out["tokens"], "pick settings without an EOS in the canvas"
    return r.out["text"], len(r.out["prompt_tokens"])


def complete(client, seed, **extra):
    body = dict(SETTINGS)
    return client.completions.create(
        model="llada", prompt=PROMPT, seed=seed, max_tokens=body.pop("max_tokens"),
        temperature=body.pop("temperature"), top_p=body.pop("top_p"),
        extra_body=body, **extra)


@pytest.mark.parametrize("seed", [3, 11])
def test_completion_equals_spindle_run(client, run_llada, seed):
    want, n_prompt = run_text(run_llada, seed)
    r = complete(client, seed)
    assert r.choices[0].text == want
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == n_prompt
    assert r.usage.completion_tokens == SETTINGS["max_tokens"]


def test_stream_sends_blocks_that_make_the_text(client, run_llada):
    want, _ = run_text(run_llada, 3)
    chunks = [c.choices[0].text for c in complete(client, 3, stream=True)
              if c.choices and c.choices[0].text]
    assert "".join(chunks) == want
    assert len(chunks) > 1, "the blocks were not streamed as they were committed"


def test_chat_route_serves_the_model(client):
    r = client.chat.completions.create(
        model="llada", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
        seed=1, extra_body={"diffusion_steps": 4, "block_length": 4})
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens <= 8


def test_concurrent_requests_each_get_their_solo_output(client, run_llada):
    want = {seed: run_text(run_llada, seed)[0] for seed in (3, 11)}
    got, errors = {}, []

    def one(seed):
        try:
            got[seed] = complete(client, seed).choices[0].text
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=one, args=(seed,)) for seed in want]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert got == want


@pytest.mark.parametrize("extra, field", [
    ({"diffusion_steps": 0}, "diffusion_steps"),
    ({"diffusion_steps": 7}, "diffusion_steps"),        # not a multiple of 4 blocks
    ({"diffusion_steps": "8"}, "diffusion_steps"),
    ({"block_length": 17}, "block_length"),             # longer than the canvas
    ({"block_length": -1}, "block_length"),
    ({"remasking": "sideways"}, "remasking"),
    ({"remasking": 4}, "remasking"),
    ({"logprobs": 2}, "logprobs"),
    ({"n": 2}, "n"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"grammar": "root ::= \"a\""}, "grammar"),
    ({"max_tokens": 100000}, None),                     # beyond the context
])
def test_malformed_fields_are_400s(client, extra, field):
    body = {"max_tokens": 16, "block_length": 4, "diffusion_steps": 8, **extra}
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="llada", prompt=PROMPT,
                                  max_tokens=body.pop("max_tokens"), extra_body=body)
    msg = e.value.body["message"] if isinstance(e.value.body, dict) else str(e.value)
    assert "\n" not in msg
    if field:
        assert field in msg


def test_chat_tools_are_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="llada", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    assert "tools" in str(e.value)


def test_metrics_count_the_generations(server, client):
    import urllib.request
    def counters():
        text = urllib.request.urlopen(server.base_url + "/metrics", timeout=30).read().decode()
        return {k: float(v) for k, v in (line.split() for line in text.splitlines()
                                         if line.startswith(("spindle_generations_total",
                                                             "spindle_generation_tokens_total")))}
    before = counters()
    complete(client, 5)
    after = counters()
    assert after["spindle_generations_total"] == before["spindle_generations_total"] + 1
    assert after["spindle_generation_tokens_total"] == \
        before["spindle_generation_tokens_total"] + SETTINGS["max_tokens"]


def test_diffusion_fields_on_an_autoregressive_model_are_a_400():
    """The fields belong to a diffusion model: an autoregressive one refuses
    them rather than ignore them."""
    from server_common import model_dir
    s = Server(model_dir(), "--alias", "ar")
    try:
        with openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused",
                           timeout=60, max_retries=0) as c:
            with pytest.raises(openai.BadRequestError) as e:
                c.completions.create(model="ar", prompt="hi", max_tokens=2,
                                     extra_body={"diffusion_steps": 4})
            assert "diffusion_steps" in str(e.value)
    finally:
        s.stop_cleanly()


def test_stop_string_ends_the_reply(client, run_llada):
    """A stop string cuts the canvas's text where it first appears, as it
    does an autoregressive reply (the tiny model's text shows its unnamed
    token 317 as "[tok317]")."""
    stop = "[tok317]"
    for seed in range(3, 40):
        want, _ = run_text(run_llada, seed)
        if stop in want[1:]:
            break
    else:
        pytest.skip("no canvas shows the stop string")
    r = complete(client, seed, stop=[stop])
    assert r.choices[0].text == want[:want.index(stop)]
    assert r.choices[0].finish_reason == "stop"
