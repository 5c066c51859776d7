"""The chat page (GET /) in a real browser: Debian's headless Chromium,
driven through the DevTools protocol over --remote-debugging-pipe (no
extra Python package). The page loads, fills the model from /v1/models,
sends a message at temperature 0, and the streamed answer that lands in the
DOM must be mlx-lm's greedy reference text; a screenshot is saved. A
reasoning reply (scripted, through spindle_scripted) shows its
reasoning_content in a bubble of its own.

Skipped, with the reason, when no Chromium is installed (scripts/setup.sh
installs Debian's `chromium`) or when it cannot start here."""
import base64
import json
import os
import select
import shutil
import subprocess
import time

import pytest

from server_common import REPO, Server
from scripted_calls import SCRIPTED_BIN
from test_tool_calls_server import SCRIPT

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
STEP_TIMEOUT = 30     # seconds for one DevTools answer
ANSWER_TIMEOUT = 60   # seconds for the streamed answer
SCREENSHOT = REPO / "tests" / ".work" / "chat_page.png"


class Browser:
    """Chromium with its DevTools endpoint on fds 3 (commands in) and 4
    (answers and events out), messages separated by NUL."""

    def __init__(self, exe, profile):
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()

        def wire():
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", "--disable-extensions", "--remote-debugging-pipe",
                f"--user-data-dir={profile}", "--window-size=1000,700", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, pass_fds=(3, 4), preexec_fn=wire)
        os.close(to_child_r)
        os.close(from_child_w)
        self.buf = b""
        self.next_id = 0
        self.session = None

    def send(self, method, params=None, session=True, timeout=STEP_TIMEOUT):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.from_child], [], [], left)[0]:
                    raise TimeoutError(f"no answer to {method}")
                part = os.read(self.from_child, 1 << 20)
                if not part:
                    raise ConnectionError("chromium closed its DevTools pipe")
                self.buf += part
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def evaluate(self, js):
        r = self.send("Runtime.evaluate", {"expression": js, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{js}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, js, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(js)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"never true: {js}")

    def close(self):
        for fd in (self.to_child, self.from_child):
            os.close(fd)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def browser(tmp_path):
    exe = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not exe:
        pytest.skip("no Chromium installed (scripts/setup.sh installs Debian's chromium)")
    b = Browser(exe, tmp_path / "profile")
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        b.session = b.send("Target.attachToTarget",
                           {"targetId": target, "flatten": True})["sessionId"]
    except (TimeoutError, ConnectionError, RuntimeError) as e:
        err = b.proc.stderr.read1(4000).decode("utf-8", "replace") if b.proc.poll() else ""
        b.close()
        pytest.skip(f"chromium could not start here: {e} {err}")
    try:
        yield b
    finally:
        b.close()


def open_page(browser, server):
    browser.send("Page.enable")
    browser.send("Page.navigate", {"url": server.base_url + "/"})
    browser.wait_for("document.readyState === 'complete' && "
                     "document.getElementById('model').value", STEP_TIMEOUT)
    assert browser.evaluate("document.title") == "Spindle chat"


def send_message(browser, message, max_tokens):
    browser.evaluate(
        "$('temperature').value = '0';"   # the page's own $
        f"$('max_tokens').value = '{max_tokens}';"
        f"$('input').value = {json.dumps(message)};"
        "$('form').requestSubmit(); true")
    browser.wait_for("(document.querySelector('.msg.assistant') || {dataset: {}})"
                     ".dataset.done === '1'", ANSWER_TIMEOUT)


def test_chat_page_streams_the_greedy_answer(browser, server, reference):
    ref = reference["chats"]["hello"]
    open_page(browser, server)
    assert browser.evaluate("document.getElementById('model').value") == "tiny-qwen3"
    message = ref["messages"][-1]["content"]
    send_message(browser, message, reference["max_tokens"])
    assert browser.evaluate("document.querySelector('.msg.user').textContent") == message
    assert browser.evaluate("document.querySelector('.msg.assistant').className") == \
        "msg assistant"   # not an error bubble
    assert browser.evaluate("document.querySelector('.msg.assistant').textContent") == \
        ref["text"]
    assert browser.evaluate("document.getElementById('send').disabled") is False
    png = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"})["data"])
    assert png.startswith(b"\x89PNG")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.write_bytes(png)


def test_chat_page_shows_reasoning_apart(browser, server_model):
    if not os.access(SCRIPTED_BIN, os.X_OK):
        pytest.skip(f"{SCRIPTED_BIN} not built")
    s = Server(server_model, binary=SCRIPTED_BIN, env={"SPINDLE_TEST_SCRIPT": json.dumps(SCRIPT)})
    try:
        open_page(browser, s)
        send_message(browser, "Think aloud, please.", 64)
        assert browser.evaluate("document.querySelector('.msg.reasoning').textContent") == \
            "Pondering."
        assert browser.evaluate("document.querySelector('.msg.assistant').textContent") == "Done."
    finally:
        s.stop_cleanly()
