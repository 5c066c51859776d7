"""Bad requests get a 4xx and one OpenAI error object naming what is wrong,
never a 5xx, a crash or a hung connection; the API key, CORS, body limit,
read and idle timeouts, /health while loading, and shutdown on SIGTERM."""
import json
import random
import signal
import socket
import threading
import time

import pytest

from server_common import (ALIAS, Server, assert_api_error, gauge, post_json,
                           read_sse_until_first_content, request, start_raw_chat,
                           wait_running)

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Hello"}]


def chat_body(**kw):
    return {"model": ALIAS, "messages": MSGS, "max_tokens": 2, **kw}


# (route, body, status, param, code): one of each malformed class.
CASES = [
    (CHAT, "{not json", 400, None, None),
    (CHAT, '{"messages": []} trailing', 400, None, None),
    (CHAT, "[1, 2]", 400, None, None),
    (CHAT, {"model": ALIAS}, 400, "messages", None),
    (CHAT, {"messages": "hi"}, 400, "messages", None),
    (CHAT, {"messages": [{"content": "no role"}]}, 400, "messages[0]", None),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0]", None),
    (CHAT, {"messages": [{"role": "user",
                          "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     400, "messages[0].content[0]", None),
    (CHAT, chat_body(model="gpt-4o"), 404, "model", "model_not_found"),
    (CHAT, chat_body(model=7), 400, "model", None),
    (CHAT, chat_body(temperature="hot"), 400, "temperature", None),
    (CHAT, chat_body(temperature=-1), 400, "temperature", None),
    (CHAT, chat_body(top_p=1.5), 400, "top_p", None),
    (CHAT, chat_body(top_k=2.5), 400, "top_k", None),
    (CHAT, chat_body(max_tokens=0), 400, "max_tokens", None),
    (CHAT, chat_body(max_tokens=1e300), 400, "max_tokens", None),
    (CHAT, chat_body(max_completion_tokens=-5), 400, "max_completion_tokens", None),
    (CHAT, chat_body(n=17), 400, "n", None),
    (CHAT, chat_body(n=2, id_slot=0), 400, "n", None),
    (CHAT, chat_body(stream="yes"), 400, "stream", None),
    (CHAT, chat_body(stream_options={"include_usage": True}), 400, "stream_options", None),
    (CHAT, chat_body(stop=["a", "b", "c", "d", "e"]), 400, "stop", None),
    (CHAT, chat_body(stop=[1]), 400, "stop", None),
    (CHAT, chat_body(seed="x"), 400, "seed", None),
    (CHAT, chat_body(logit_bias={"abc": 1}), 400, "logit_bias", None),
    (CHAT, chat_body(logit_bias={"10": 500}), 400, "logit_bias", None),
    (CHAT, chat_body(logit_bias={"99999999": 1}), 400, "logit_bias", None),
    (CHAT, chat_body(logprobs="yes"), 400, "logprobs", None),
    (CHAT, chat_body(top_logprobs=3), 400, "top_logprobs", None),
    (CHAT, chat_body(logprobs=True, top_logprobs=21), 400, "top_logprobs", None),
    (CHAT, chat_body(presence_penalty=1000), 400, "presence_penalty", None),
    (CHAT, chat_body(tools={"not": "an array"}), 400, "tools", None),
    (CHAT, chat_body(chat_template_kwargs=[1]), 400, "chat_template_kwargs", None),
    (CHAT, {"messages": [{"role": "user", "content": "word " * 4200}]}, 400, "messages",
     "context_length_exceeded"),
    ("/v1/completions", {"prompt": 5}, 400, "prompt", None),
    ("/v1/completions", {"prompt": ""}, 400, "prompt", None),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt", None),
    ("/v1/completions", {"prompt": [1, -2]}, 400, "prompt", None),
    ("/v1/completions", {"prompt": [10 ** 9]}, 400, "prompt", None),
    ("/v1/completions", {"prompt": "hi", "logprobs": 9}, 400, "logprobs", None),
    ("/v1/completions", {"prompt": "hi", "echo": True}, 400, "echo", None),
    ("/v1/completions", {"prompt": [5] * 4100}, 400, "prompt", "context_length_exceeded"),
    ("/tokenize", {"content": 3}, 400, "content", None),
    ("/tokenize", {"content": "a", "parse_special": False}, 400, "parse_special", None),
    ("/detokenize", {"tokens": "1 2"}, 400, "tokens", None),
    ("/detokenize", {"tokens": [1, 10 ** 7]}, 400, "tokens", None),
    ("/apply-template", {"messages": {}}, 400, "messages", None),
    # A key given twice (a string body: a dict keeps one): the second
    # content surfaced once the first was rewritten (a fuzz find).
    (CHAT, '{"messages": [{"role": "assistant", "content": null, "tool_calls": [], '
           '"content": 5}], "max_tokens": 2}', 400, "messages[0]", None),
]


@pytest.mark.parametrize("route,body,status,param,code", CASES,
                         ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_malformed_request_is_one_api_error(server, route, body, status, param, code):
    got, _, data = post_json(server.port, route, body)
    assert_api_error(got, data, status, param, code)


def test_sdk_raises_the_documented_errors(client):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=ALIAS, messages=MSGS, temperature=5000)
    assert e.value.status_code == 400 and "temperature" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MSGS)


def test_unknown_route_and_wrong_method(server):
    status, _, data = request(server.port, "GET", "/v1/nothing")
    assert_api_error(status, json.loads(data), 404)
    status, hdrs, data = request(server.port, "GET", CHAT)
    assert_api_error(status, json.loads(data), 405)


def broken_bodies(rng, n):
    """Broken JSON, wrong types, huge numbers, deep nesting, bad bytes."""
    valid = json.dumps(chat_body(temperature=0.5, stop=["x"], logit_bias={"5": 1}))
    fields = ["messages", "model", "max_tokens", "temperature", "top_p", "top_k", "stop",
              "seed", "logit_bias", "logprobs", "top_logprobs", "n", "stream",
              "stream_options", "presence_penalty", "tools", "min_p"]
    weird = [None, True, -1, 0, 1e308, -1e308, 2 ** 63, "", "x" * 1000, [], {}, [[[]]],
             {"a": {"b": []}}, [None], -0.0, 1.5]
    for i in range(n):
        kind = i % 5
        if kind == 0:
            cut = rng.randrange(1, len(valid))
            yield valid[:cut]
        elif kind == 1:
            body = chat_body()
            body[rng.choice(fields)] = rng.choice(weird)
            yield json.dumps(body)
        elif kind == 2:
            depth = rng.randrange(100, 3000)
            yield '{"messages": ' + "[" * depth + "]" * depth + "}"
        elif kind == 3:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        else:
            s = list(valid)
            for _ in range(rng.randrange(1, 6)):
                s[rng.randrange(len(s))] = chr(rng.choice([0, 34, 44, 58, 91, 93, 123, 125, 92]))
            yield "".join(s)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_a_flood_of_malformed_requests(server):
    """300 generated broken requests: each a 4xx with one error object or a
    generation (a mutation can stay valid); the server stays healthy and its
    RSS does not grow by more than a few MiB."""
    rng = random.Random(12)
    before = rss_kb(server.proc.pid)
    for i, body in enumerate(broken_bodies(rng, 300)):
        status, _, data = request(server.port, "POST", CHAT, body, timeout=60)
        assert status < 500, (i, body[:200], status, data[:300])
        if status >= 400:
            assert_api_error(status, json.loads(data), status)
    assert request(server.port, "GET", "/health")[0] == 200
    assert rss_kb(server.proc.pid) - before < 64 * 1024


@pytest.fixture(scope="module")
def guarded(server_model):
    s = Server(server_model, "--alias", ALIAS, "--api-key", "sekret", "--cors",
               "https://chat.example", "--max-body", 4096, "--read-timeout", 2,
               "--idle-timeout", 3)
    try:
        yield s
    finally:
        s.stop_cleanly()


def test_api_key(guarded):
    body = chat_body(max_tokens=1)
    status, hdrs, data = post_json(guarded.port, CHAT, body)
    assert_api_error(status, data, 401, code="invalid_api_key")
    assert hdrs.get("www-authenticate") == "Bearer"
    status, _, data = post_json(guarded.port, CHAT, body, {"Authorization": "Bearer wrong"})
    assert_api_error(status, data, 401)
    status, _, data = post_json(guarded.port, CHAT, body, {"Authorization": "Bearer sekret"})
    assert status == 200, data
    assert request(guarded.port, "GET", "/health")[0] == 200
    assert request(guarded.port, "GET", "/metrics")[0] == 401


def test_cors(guarded, server):
    status, hdrs, _ = request(guarded.port, "OPTIONS", CHAT,
                              headers={"Origin": "https://chat.example",
                                       "Access-Control-Request-Method": "POST"})
    assert status == 204
    assert hdrs["access-control-allow-origin"] == "https://chat.example"
    assert "Authorization" in hdrs["access-control-allow-headers"]
    assert hdrs["access-control-allow-methods"] == "POST, OPTIONS"
    # A path that two rows share allows both rows' methods.
    status, hdrs, _ = request(guarded.port, "OPTIONS", "/v1/responses/resp_1",
                              headers={"Origin": "https://chat.example",
                                       "Access-Control-Request-Method": "DELETE"})
    assert status == 204
    assert hdrs["access-control-allow-methods"] == "GET, HEAD, DELETE, OPTIONS"
    _, hdrs, _ = request(guarded.port, "GET", "/health")
    assert hdrs["access-control-allow-origin"] == "https://chat.example"
    _, hdrs, _ = request(server.port, "GET", "/health")
    assert "access-control-allow-origin" not in hdrs   # off by default


def test_body_limit(guarded):
    auth = {"Authorization": "Bearer sekret"}
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]})
    status, _, data = post_json(guarded.port, CHAT, big, auth)
    assert_api_error(status, data, 413)
    # Chunked (no Content-Length): refused once the limit is passed.
    sock = socket.create_connection(("127.0.0.1", guarded.port), timeout=10)
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer sekret\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 3000
        for _ in range(2):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
        assert b" 413 " in sock.recv(4096).split(b"\r\n")[0] + b" "
    finally:
        sock.close()


def closed_within(sock, seconds, trickle):
    """Seconds until the server closes `sock` (sending a byte every 0.25 s
    when `trickle`), or None if it stays open that long."""
    t0 = time.monotonic()
    sock.settimeout(0.25)
    while time.monotonic() - t0 < seconds:
        try:
            if trickle:
                sock.sendall(b" ")
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            pass
        except OSError:
            return time.monotonic() - t0
    return None


def test_slow_and_silent_clients_are_dropped(guarded):
    # A body trickling in past --read-timeout (2 s) is dropped, although
    # bytes keep arriving (the idle timeout alone would not end it).
    sock = socket.create_connection(("127.0.0.1", guarded.port), timeout=15)
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer sekret\r\nContent-Length: 400\r\n\r\n{")
        took = closed_within(sock, 10, trickle=True)
        assert took is not None and 1.5 <= took < 6, took
    finally:
        sock.close()
    # A connection that sends nothing is closed after --idle-timeout (3 s).
    sock = socket.create_connection(("127.0.0.1", guarded.port), timeout=15)
    try:
        t0 = time.monotonic()
        assert sock.recv(10) == b""
        assert 2 <= time.monotonic() - t0 < 10
    finally:
        sock.close()
    assert request(guarded.port, "GET", "/health")[0] == 200


def test_health_is_503_while_loading(server_model):
    # The server listens before it loads (the 11 MB tokenizer.json alone
    # takes ~1 s here), so the first answers come while loading.
    s = Server(server_model, wait_ready=False)
    try:
        status, _, data = request(s.port, "GET", "/health")
        assert status == 503
        assert json.loads(data) == {"error": {"code": 503, "message": "Loading model",
                                              "type": "unavailable_error"}}
        status, hdrs, data = post_json(s.port, CHAT, {"messages": MSGS})
        assert_api_error(status, data, 503)
        s.wait_status("/health", 200, 120)
    finally:
        s.stop_cleanly()


def test_sigterm_drains_then_cancels_and_exits_0(server_model):
    s = Server(server_model, "--shutdown-timeout", 1)
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        body = json.dumps({"messages": MSGS, "max_tokens": 2000, "stream": True,
                           "temperature": 0}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))
        read_sse_until_first_content(sock)
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        rest = b""
        while True:
            part = sock.recv(65536)
            if not part:
                break
            rest += part
            if b"data: [DONE]" in rest:
                break
        sock.close()
        assert b"shutting down" in rest and b"data: [DONE]" in rest, rest[-500:]
        assert s.wait_exit(30) == 0, s.stderr()
        assert time.monotonic() - t0 < 15
        assert "cancelling 1 request" in s.stderr()
    finally:
        s.stop()


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_frees_the_slot(server, stream):
    """A client that goes away mid-answer cancels its request: streaming
    (noticed at the next write) and not (the socket is watched while the
    answer is computed). Left alone it would run for 4000 tokens;
    cancelled, it stops within a few steps."""
    assert wait_running(server, 0) == 0   # an earlier test's request ending
    generated = gauge(server, "spindle_generation_tokens_total")
    sock = start_raw_chat(server, {"messages": MSGS, "max_tokens": 4000}, stream)
    assert wait_running(server, 1) == 1, "the request did not start:\n" + server.stderr()[-3000:]
    sock.close()
    left = wait_running(server, 0)
    metrics = request(server.port, "GET", "/metrics")[2].decode()
    assert left == 0, "the request still runs:\n" + metrics
    more = gauge(server, "spindle_generation_tokens_total") - generated
    assert more < 2000, f"{more} tokens generated: the request was not cancelled"


def test_queue_full_is_429(server_model):
    s = Server(server_model, "--parallel", 1, "--queue", 0)
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        body = json.dumps({"messages": MSGS, "max_tokens": 4000, "stream": True}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        read_sse_until_first_content(sock)
        status, hdrs, data = post_json(s.port, CHAT, {"messages": MSGS, "max_tokens": 1})
        assert_api_error(status, data, 429)
        assert hdrs.get("retry-after") == "1"
        sock.close()
    finally:
        s.stop_cleanly()


def test_a_queued_stream_outlives_the_idle_timeout(server_model):
    """A streaming request that waits in the queue longer than
    --idle-timeout is kept open by SSE comments and then answered (it was
    closed as idle once its first token came)."""
    s = Server(server_model, "--parallel", 1, "--idle-timeout", 2)
    try:
        hog = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        body = json.dumps({"messages": MSGS, "max_tokens": 4000, "stream": True}).encode()
        hog.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        read_sse_until_first_content(hog)
        waiter = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        body = json.dumps({"messages": MSGS, "max_tokens": 3, "stream": True}).encode()
        waiter.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(5)   # queued behind the hog for 2.5 idle timeouts
        hog.close()
        got = b""
        deadline = time.monotonic() + 60
        while b"data: [DONE]" not in got and time.monotonic() < deadline:
            part = waiter.recv(4096)
            if not part:
                break
            got += part
        waiter.close()
        assert b": keep-alive" in got and b"data: [DONE]" in got, got[-600:]
        assert b'"finish_reason":"length"' in got
    finally:
        s.stop_cleanly()
