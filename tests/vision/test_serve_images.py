"""Images through `spindle serve`: OpenAI image_url parts (base64 data
URLs) sent with the openai Python SDK to the tiny Gemma 3 model
(make_gemma3_vlm.py).

The greedy reply equals `spindle run --image` on the same image and
prompt, which test_generate.py pins to mlx-vlm. The image's span digest
keys the prefix cache: a second turn with the same image reuses the first
turn's KV (usage.prompt_tokens_details.cached_tokens), and the same turn
with a different image reuses nothing from the image on. Malformed data
URLs, remote URLs and undecodable images get 400s naming the problem, and
a model without a vision tower says it takes no images."""
import base64
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vision_common import SPINDLE_BIN, save, synthetic, tiny_vlm  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_common import Server, model_dir, post_json  # noqa: E402

openai = pytest.importorskip("openai")

N_TOKENS = 12
PROMPT = "What is in this picture?"
IMAGE_TOKENS = 256


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-images")
    return [save(synthetic("RGB", 300, 200, 1), d / "a.png", "PNG"),
            save(synthetic("RGB", 640, 480, 3), d / "c.jpg", "JPEG")]


@pytest.fixture(scope="module")
def server(tiny_vlm):
    # The default pool of this tiny model (4 MiB) leaves its sliding-window
    # boundary states no room, and without them no prefix is reused.
    s = Server(tiny_vlm, "--alias", "tiny-gemma3-vlm", "--parallel", 2, "--kv-budget", "64M")
    try:
        yield s
    finally:
        s.stop_cleanly()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                       max_retries=0, timeout=300) as c:
        yield c


def data_url(path, mime=None):
    mime = mime or {"png": "image/png", "jpg": "image/jpeg"}[path.suffix[1:]]
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode()


def user_turn(url, text=PROMPT):
    """As OpenAI's vision guide writes it: the text, then the image."""
    return {"role": "user", "content": [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": url}}]}


def chat(client, messages, **kw):
    return client.chat.completions.create(
        model="tiny-gemma3-vlm", messages=messages, max_tokens=N_TOKENS, temperature=0,
        extra_body={"ignore_eos": True}, **kw)


def cli_reply(mdir, image, tmp_path):
    """spindle run --image's tokens and its first step's log-probabilities
    (the last prompt position's logits, log-softmaxed)."""
    logits = tmp_path / "logits.npy"
    r = subprocess.run([str(SPINDLE_BIN), "run", "-m", str(mdir), "--chat", "-p", PROMPT,
                        "--image", str(image), "-n", str(N_TOKENS), "--temp", "0",
                        "--ignore-eos", "--json", "--dump-logits", str(logits)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    x = np.load(logits).astype(np.float64).reshape(-1)
    return json.loads(r.stdout), x - x.max() - np.log(np.exp(x - x.max()).sum())


def test_reply_equals_spindle_run(client, tiny_vlm, images, tmp_path):
    """The tiny model's text is mostly bytes that are no UTF-8, so beyond
    the text the first step's top log-probabilities pin the image's rows."""
    want, logprobs = cli_reply(tiny_vlm, images[0], tmp_path)
    got = chat(client, [user_turn(data_url(images[0]))], logprobs=True, top_logprobs=5)
    assert got.usage.prompt_tokens == len(want["prompt_tokens"])
    assert got.usage.completion_tokens == len(want["tokens"])
    assert got.choices[0].message.content == want["text"]
    first = got.choices[0].logprobs.content[0]
    assert first.logprob == pytest.approx(logprobs[want["tokens"][0]], abs=1e-4)
    assert sorted(t.logprob for t in first.top_logprobs) == \
        pytest.approx(np.sort(logprobs)[-5:].tolist(), abs=1e-4)


def test_same_image_reuses_prefix_different_image_does_not(client, images):
    first = chat(client, [user_turn(data_url(images[0]))])
    follow = [{"role": "assistant", "content": first.choices[0].message.content},
              {"role": "user", "content": "And its colours?"}]
    same = chat(client, [user_turn(data_url(images[0])), *follow])
    other = chat(client, [user_turn(data_url(images[1])), *follow])
    assert same.usage.prompt_tokens == other.usage.prompt_tokens
    # The whole first turn's full blocks, the image's 256 positions among them.
    assert same.usage.prompt_tokens_details.cached_tokens > IMAGE_TOKENS
    # Another image behind the same tokens: nothing from the image on.
    assert other.usage.prompt_tokens_details.cached_tokens < 32


def bad_request(client, messages):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages)
    assert e.value.status_code == 400
    return e.value.body["message"] if isinstance(e.value.body, dict) else str(e.value)


@pytest.mark.parametrize("url,words", [
    ("data:image/png;base64,iVBORw0KGgo!!!!", "invalid character"),
    ("data:image/png;base64,iVBORw0KGgoAA", "truncated"),
    ("data:image/tiff;base64,SUkqAA==", "media type 'image/tiff'"),
    ("data:image/png,plain", "not base64"),
    ("data:image/jpeg;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(40)).decode(),
     "not a JPEG"),
    ("ftp://example.org/cat.png", "not a data URL"),
    ("https://example.org/cat.png", "--allow-remote-media"),
])
def test_malformed_urls_are_400s(client, url, words):
    assert words in bad_request(client, [user_turn(url)])


def test_truncated_image_is_400(client, images):
    data = images[0].read_bytes()
    cut = "data:image/png;base64," + base64.b64encode(data[: len(data) // 2]).decode()
    assert "image 1" in bad_request(client, [user_turn(cut)])


def test_marker_typed_in_text_is_400(client, images):
    msg = user_turn(data_url(images[0]), text="<start_of_image> twice?")
    assert "image markers" in bad_request(client, [msg])


def test_apply_template_refuses_image_parts(server, images):
    status, _, out = post_json(server.port, "/apply-template",
                               {"messages": [user_turn(data_url(images[0]))]})
    assert status == 400 and "not taken by this route" in out["error"]["message"], out


def test_model_without_vision_refuses_images(images):
    srv = Server(model_dir(), "--alias", "tiny-gemma3-vlm")
    try:
        with openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused",
                           max_retries=0) as c:
            assert "takes no images" in bad_request(c, [user_turn(data_url(images[0]))])
    finally:
        srv.stop_cleanly()


def test_render_gives_spindle_runs_prompt_ids(server, tiny_vlm, images, tmp_path):
    """vLLM's render route (what a cache-aware router places requests by):
    a chat with an image answers the prompt ids of `spindle run --image`
    (pinned to mlx-vlm), the image's placeholder tokens among them."""
    want, _ = cli_reply(tiny_vlm, images[0], tmp_path)
    status, _, body = post_json(server.port, "/v1/chat/completions/render",
                                {"messages": [user_turn(data_url(images[0]))]})
    assert status == 200, body
    assert body["token_ids"] == want["prompt_tokens"]
