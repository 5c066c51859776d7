"""The chat page's attach-image button in headless Chromium (the harness
of tests/server/test_chat_page_browser.py): a file picked in the page's
file input goes with the next message as an image_url data URL, shows in
the user's bubble, and the streamed answer equals the chat route's reply
(openai SDK) for the same image and prompt on the tiny Gemma 3 model.
Skipped, with the reason, where no Chromium can start."""
import sys
from pathlib import Path

import pytest

from test_serve_images import PROMPT, data_url, images, user_turn  # noqa: F401
from vision_common import tiny_vlm  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_common import Server  # noqa: E402
from test_chat_page_browser import browser, open_page  # noqa: E402,F401

openai = pytest.importorskip("openai")

MODEL = "tiny-gemma3-vlm"
N_TOKENS = 8
ANSWER_TIMEOUT = 120


@pytest.fixture(scope="module")
def server(tiny_vlm):
    s = Server(tiny_vlm, "--alias", MODEL)
    try:
        yield s
    finally:
        s.stop_cleanly()


def attach(browser, path):
    """Picks `path` in the page's file input, as a user's file dialog does."""
    root = browser.send("DOM.getDocument")["root"]["nodeId"]
    node = browser.send("DOM.querySelector", {"nodeId": root, "selector": "#image"})["nodeId"]
    browser.send("DOM.setFileInputFiles", {"nodeId": node, "files": [str(path)]})
    browser.wait_for(f"$('attached').textContent === {path.name!r}", 30)


def test_attached_image_goes_with_the_message(browser, server, images):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                       max_retries=0, timeout=300) as c:
        want = c.chat.completions.create(model=MODEL, messages=[user_turn(data_url(images[0]))],
                                         max_tokens=N_TOKENS, temperature=0)
    open_page(browser, server)
    attach(browser, images[0])
    browser.evaluate("$('temperature').value = '0';"
                     f"$('max_tokens').value = '{N_TOKENS}';"
                     f"$('input').value = {PROMPT!r};"
                     "$('form').requestSubmit(); true")
    browser.wait_for("(document.querySelector('.msg.assistant') || {dataset: {}})"
                     ".dataset.done === '1'", ANSWER_TIMEOUT)
    assert browser.evaluate("document.querySelector('.msg.assistant').className") == \
        "msg assistant", browser.evaluate("document.querySelector('.msg.assistant').textContent")
    assert browser.evaluate("document.querySelector('.msg.assistant').textContent") == \
        want.choices[0].message.content
    assert browser.evaluate("document.querySelector('.msg.user img').src") == \
        data_url(images[0])
    # The image went with that message only.
    assert browser.evaluate("$('attached').textContent") == ""
    assert browser.evaluate("history[0].content[1].image_url.url") == data_url(images[0])
