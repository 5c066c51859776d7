"""Images through the Anthropic Messages and OpenAI Responses routes of
`spindle serve`, sent with the real SDKs (anthropic's image blocks,
openai's responses.create with input_image parts) to the tiny Gemma 3
model: the reply equals the chat route's for the same image and prompt,
which test_serve_images.py pins to `spindle run --image`. Bad images get
400s that name the field the client sent."""
import base64

import pytest

from test_serve_images import (N_TOKENS, PROMPT, IMAGE_TOKENS, client, data_url,  # noqa: F401
                               images, server, user_turn)
from vision_common import tiny_vlm  # noqa: F401

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

MODEL = "tiny-gemma3-vlm"


@pytest.fixture(scope="module")
def claude(server):
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0,
                             timeout=300) as c:
        yield c


def chat_reply(client, url):
    return client.chat.completions.create(
        model=MODEL, messages=[user_turn(url)], max_tokens=N_TOKENS, temperature=0)


def image_block(path, media_type="image/png"):
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": base64.b64encode(path.read_bytes()).decode()}}


def claude_turn(*blocks):
    return [{"role": "user", "content": [{"type": "text", "text": PROMPT}, *blocks]}]


def responses_turn(url, **part):
    return [{"role": "user", "content": [{"type": "input_text", "text": PROMPT},
                                         {"type": "input_image", "image_url": url,
                                          "detail": "auto", **part}]}]


@pytest.mark.parametrize("which", [0, 1])
def test_anthropic_image_equals_chat(client, claude, images, which):
    mime = {".png": "image/png", ".jpg": "image/jpeg"}[images[which].suffix]
    want = chat_reply(client, data_url(images[which]))
    got = claude.messages.create(model=MODEL, max_tokens=N_TOKENS, extra_body={"temperature": 0},
                                 messages=claude_turn(image_block(images[which], mime)))
    assert got.content[0].text == want.choices[0].message.content
    assert got.usage.output_tokens == want.usage.completion_tokens
    assert got.usage.input_tokens + got.usage.cache_read_input_tokens == \
        want.usage.prompt_tokens
    counted = claude.messages.count_tokens(model=MODEL,
                                           messages=claude_turn(image_block(images[which], mime)))
    assert counted.input_tokens == want.usage.prompt_tokens


def test_responses_image_equals_chat(client, images):
    want = chat_reply(client, data_url(images[1]))
    got = client.responses.create(model=MODEL, input=responses_turn(data_url(images[1])),
                                  max_output_tokens=N_TOKENS, temperature=0)
    assert got.output_text == want.choices[0].message.content
    assert got.usage.input_tokens == want.usage.prompt_tokens
    assert got.usage.output_tokens == want.usage.completion_tokens


def test_responses_follow_up_keeps_the_image(client, images):
    """previous_response_id's conversation carries the image: the next turn
    sends it again and reuses the first turn's KV, image included."""
    first = client.responses.create(model=MODEL, input=responses_turn(data_url(images[0])),
                                    max_output_tokens=N_TOKENS, temperature=0)
    again = client.responses.create(model=MODEL, previous_response_id=first.id,
                                    input="And its colours?", max_output_tokens=N_TOKENS,
                                    temperature=0)
    assert again.usage.input_tokens > first.usage.input_tokens
    assert again.usage.input_tokens_details.cached_tokens > IMAGE_TOKENS


def claude_error(claude, messages):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=MODEL, max_tokens=N_TOKENS, messages=messages)
    assert e.value.status_code == 400
    return e.value.body["error"]["message"]


def test_anthropic_bad_images_are_400s(claude, images):
    bad = image_block(images[0])
    bad["source"]["data"] = "iVBORw0KGgo!!!!"
    msg = claude_error(claude, claude_turn(bad))
    assert msg.startswith("'messages[0].content[1].source': ") and "invalid character" in msg
    assert "not a JPEG" in claude_error(claude, claude_turn(image_block(images[0],
                                                                        "image/jpeg")))
    assert "'image/tiff'" in claude_error(claude, claude_turn(image_block(images[0],
                                                                          "image/tiff")))
    remote = {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}}
    assert "--allow-remote-media" in claude_error(claude, claude_turn(remote))
    file_source = {"type": "image", "source": {"type": "file", "file_id": "file_1"}}
    assert "source' must be" in claude_error(claude, claude_turn(file_source))
    in_reply = [*claude_turn(), {"role": "assistant", "content": [image_block(images[0])]},
                {"role": "user", "content": "Hi"}]
    assert "'image' are not supported in an assistant" in claude_error(claude, in_reply)
    cut = image_block(images[0])
    cut["source"]["data"] = base64.b64encode(images[0].read_bytes()[:300]).decode()
    assert "image 2: " in claude_error(claude, claude_turn(image_block(images[1], "image/jpeg"),
                                                           cut))


def responses_error(client, input_):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input=input_, max_output_tokens=N_TOKENS)
    assert e.value.status_code == 400
    return e.value.body


@pytest.mark.parametrize("url,part,param,words", [
    ("data:image/png;base64,iVBORw0KGgo!!!!", {}, "input[0].content[1].image_url",
     "invalid character"),
    ("data:image/gif;base64,R0lGODlh", {"detail": "huge"}, "input[0].content[1]",
     "'input[0].content[1].detail' must be"),
    ("https://example.org/a.png", {}, "input[0].content[1].image_url", "--allow-remote-media"),
])
def test_responses_bad_images_are_400s(client, url, part, param, words):
    body = responses_error(client, responses_turn(url, **part))
    assert body["param"] == param and words in body["message"], body


def test_responses_file_id_and_tool_output_images_are_400s(client, images):
    body = responses_error(client, [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-1", "detail": "auto"}]}])
    assert "file inputs are not supported" in body["message"], body
    body = responses_error(client, [
        {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_image", "image_url": data_url(images[0])}]}])
    assert "'input_image' are not supported" in body["message"], body


def image_counters(server):
    from server_common import request
    status, _, body = request(server.port, "GET", "/metrics")
    assert status == 200
    values = dict(line.rsplit(" ", 1) for line in body.decode().splitlines()
                  if line.startswith("spindle_image_"))
    return {k: float(v) for k, v in values.items()}


def test_resent_image_is_not_encoded_again(server, client, tmp_path):
    """A chat's second turn re-sends the first turn's image: the encoded-
    image cache answers it (the encoder runs once), whichever route."""
    from vision_common import save, synthetic
    fresh = save(synthetic("RGB", 123, 77, 42), tmp_path / "fresh.png", "PNG")
    before = image_counters(server)
    first = chat_reply(client, data_url(fresh))
    follow = [user_turn(data_url(fresh)),
              {"role": "assistant", "content": first.choices[0].message.content},
              {"role": "user", "content": "And its colours?"}]
    client.chat.completions.create(model=MODEL, messages=follow, max_tokens=2)
    client.responses.create(model=MODEL, input=responses_turn(data_url(fresh)),
                            max_output_tokens=2)
    after = image_counters(server)
    assert after["spindle_image_encodes_total"] - before["spindle_image_encodes_total"] == 1
    assert after["spindle_image_cache_hits_total"] - \
        before["spindle_image_cache_hits_total"] == 2
    assert 0 < after["spindle_image_cache_bytes"] <= 256 << 20
