"""Remote images: `spindle serve --allow-remote-media HOSTS` fetches
http(s) image URLs on those hosts, here from a local http.server on
loopback, and the reply equals the same image sent as a data URL. A 404,
a redirect, a body over the size limit (declared or streamed), a server
slower than --remote-media-timeout, a host not named and a URL that is
no image are 400s naming the problem, never 5xx. Without the option,
test_serve_images.py shows the 400 naming it."""
import http.server
import threading
import time

import pytest

from test_serve_images import N_TOKENS, PROMPT, data_url, images, user_turn  # noqa: F401
from vision_common import tiny_vlm  # noqa: F401

from server_common import Server  # noqa: E402  (test_serve_images put it on the path)

openai = pytest.importorskip("openai")

MODEL = "tiny-gemma3-vlm"
LIMIT = 20 << 20   # the server's image limit (SP_API_IMAGE_BYTES_DEFAULT)


class Media(http.server.BaseHTTPRequestHandler):
    files = {}

    def log_message(self, *args):
        pass

    def send(self, status, body, length=True):
        self.send_response(status)
        self.send_header("Content-Type", "image/png")
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path in self.files:
            return self.send(200, self.files[path])
        if path == "/big":            # declared too large
            return self.send(200, bytes(LIMIT + 1))
        if path == "/big-streamed":   # no length: the cap counts what arrives
            self.protocol_version = "HTTP/1.0"
            return self.send(200, bytes(LIMIT + 4096), length=False)
        if path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/a.png")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if path == "/slow":
            time.sleep(3)
            return self.send(200, self.files["/a.png"])
        return self.send(404, b"not here")


@pytest.fixture(scope="module")
def media(images):
    Media.files = {"/a.png": images[0].read_bytes(), "/text.png": b"hello, not an image"}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Media)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@pytest.fixture(scope="module")
def client(tiny_vlm, media):
    # --kv-budget: room for the sliding-window boundary states (test_serve_images.py).
    s = Server(tiny_vlm, "--alias", MODEL, "--kv-budget", "64M",
               "--allow-remote-media", "127.0.0.1", "--remote-media-timeout", 1)
    try:
        with openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0,
                           timeout=300) as c:
            yield c
    finally:
        s.stop_cleanly()


def chat(client, url):
    return client.chat.completions.create(model=MODEL, messages=[user_turn(url)],
                                          max_tokens=N_TOKENS, temperature=0)


def test_remote_image_equals_data_url(client, media, images):
    want = chat(client, data_url(images[0]))
    got = chat(client, media + "/a.png")
    assert got.choices[0].message.content == want.choices[0].message.content
    assert got.usage.prompt_tokens == want.usage.prompt_tokens
    # The same bytes are the same digest: the prefix cache has the image.
    assert got.usage.prompt_tokens_details.cached_tokens > 256


@pytest.mark.parametrize("path,words", [
    ("/missing.png", "HTTP 404"),
    ("/moved", "HTTP 302 (redirects are not followed)"),
    ("/big", f"larger than the server's limit of {LIMIT} bytes"),
    ("/big-streamed", f"larger than the server's limit of {LIMIT} bytes"),
    ("/slow", "longer than 1 s"),
    ("/text.png", "image 1: "),
])
def test_remote_failures_are_400s(client, media, path, words):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, media + path)
    assert e.value.status_code == 400
    msg = e.value.body["message"]
    assert words in msg and "\n" not in msg, msg


def test_hosts_not_named_are_400s(client, media):
    port = media.rsplit(":", 1)[1]
    for url in [f"http://localhost:{port}/a.png", "https://example.org/a.png",
                f"http://127.0.0.1@localhost:{port}/a.png"]:
        with pytest.raises(openai.BadRequestError) as e:
            chat(client, url)
        assert "is not among the hosts --allow-remote-media names" in \
            e.value.body["message"], url
