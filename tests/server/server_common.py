"""What the server tests share: building the model (make_server_model.py),
starting `spindle serve` on 127.0.0.1 with port 0 (the kernel picks a free
one; the server prints it) and always stopping it, and small HTTP helpers
with bounded waits.

Named server_common (not common) so that it cannot collide with another
test directory's helper module in one pytest session."""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "parity"))
sys.path.insert(0, str(HERE))
import make_server_model as gen  # noqa: E402
from parity_common import ensure_models  # noqa: E402

SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", REPO / "build" / "spindle"))
ALIAS = "tiny-qwen3"   # the shared server's --alias
# Generous for the sanitizer build: loading under ASan is several times slower.
START_TIMEOUT = 120
REQUEST_TIMEOUT = 120


def model_dir():
    if not SPINDLE_BIN.is_file():
        pytest.skip(f"spindle binary not found at {SPINDLE_BIN} (set SPINDLE_BIN)")
    out = ensure_models(gen.DEFAULT_OUT, gen)
    return out / gen.SPECS[0]["name"]


def load_reference(path):
    return json.loads((path / "reference.json").read_text())


class Server:
    """A `spindle serve` child process. Its stderr is drained by a thread
    (kept in .log) so that it can never block on a full pipe."""

    def __init__(self, model, *args, wait_ready=True, binary=None, env=None):
        self.args = [str(binary or SPINDLE_BIN), "serve", "-m", str(model), "--port", "0",
                     "-t", os.environ.get("SPINDLE_THREADS", "2"), *map(str, args)]
        self.log = []
        self.port = None
        self._listening = threading.Event()
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace",
                                     env={**os.environ, **env} if env else None)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        try:
            if not self._listening.wait(START_TIMEOUT) or self.port is None:
                raise AssertionError("server did not start listening:\n" + self.stderr())
            if wait_ready:
                self.wait_status("/health", 200, START_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._listening.set()
        self._listening.set()   # exited before listening

    def stderr(self):
        return "".join(self.log)

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def wait_status(self, path, status, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}:\n" + self.stderr())
            try:
                last = request(self.port, "GET", path, timeout=5)[0]
                if last == status:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"{path} never answered {status} (last {last}):\n" + self.stderr())

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        finally:
            self._reader.join(5)

    def stop(self):
        """Always ends the process: SIGTERM, then SIGKILL after 20 s. Returns
        the exit status (0 for a clean shutdown; the sanitizer build exits
        non-zero on a leak or an error)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)
        return self.proc.returncode

    def stop_cleanly(self):
        """stop(), failing unless the server exited 0."""
        rc = self.stop()
        assert rc == 0, f"server exit status {rc}:\n" + self.stderr()[-6000:]


def request(port, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT):
    """(status, headers dict with lower-case names, body bytes). `body` may
    be bytes, str or a JSON-able object."""
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def post_json(port, path, body, headers=None):
    status, hdrs, data = request(port, "POST", path, body, headers)
    try:
        return status, hdrs, json.loads(data)
    except ValueError:
        raise AssertionError(f"{path}: not JSON ({status}): {data[:500]!r}")


def assert_api_error(status, body, want_status, param=None, code=None):
    """One OpenAI error object: {"error": {"message", "type", "param",
    "code"}} with a non-empty message."""
    assert status == want_status, (status, body)
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def read_sse_until_first_content(resp_sock):
    buf = b""
    while b'"content":"' not in buf.split(b"\n\n", 1)[-1] or buf.count(b"data:") < 2:
        part = resp_sock.recv(4096)
        if not part:
            break
        buf += part
    return buf


def start_raw_chat(server, body, stream):
    """A chat request sent over a raw socket, so that the test can close it
    mid-answer (a client going away); for a stream, read until the first
    content chunk arrived. The open socket."""
    import socket
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    data = json.dumps(dict(body, stream=stream)).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    if stream:
        read_sse_until_first_content(sock)
    return sock


def gauge(server, name):
    metrics = request(server.port, "GET", "/metrics")[2].decode()
    return float(metrics.split(f"\n{name} ", 1)[1].split("\n", 1)[0])


def running(server):
    return gauge(server, "spindle_requests_running")


def wait_running(server, want, timeout=20):
    """Poll /metrics until `want` requests run (the gauge is the engine's
    snapshot at its last step); the last value seen."""
    deadline = time.monotonic() + timeout
    while (now := running(server)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return now
