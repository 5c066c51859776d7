"""The soak load that tests/server/test_soak.py runs for a minute and
bench/server_soak.py for longer: N client threads, each sending streaming
(and some non-streaming) chat and text completions back to back until a
deadline, a random share of them hanging up mid-answer. Every request is
one of the mlx-lm references of make_server_model.py, so a greedy answer
that runs to its end is checked against mlx-lm's text.

The loops are bounded: each thread starts no request after the deadline,
and one still unanswered GRACE_S after it is cut (the client hangs up).
A loaded machine can keep a request waiting for long, so a cut one counts
as hung (a failure) only when it ran longer than MAX_REQUEST_S while
OVERTAKEN requests sent after it were answered."""

import http.client
import json
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

GRACE_S = 5.0
MAX_REQUEST_S = 30.0
OVERTAKEN = 32


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@dataclass
class Tally:
    """What the clients saw; every list holds short descriptions of the
    requests that went wrong, for the assertion messages."""
    completed: int = 0
    hung_up: int = 0
    cut: int = 0          # still unanswered GRACE_S after the deadline
    greedy_checked: int = 0
    tokens: int = 0
    started_done: list = field(default_factory=list)     # start times of completed
    server_errors: list = field(default_factory=list)    # 5xx
    client_errors: list = field(default_factory=list)    # 4xx (none expected)
    broken: list = field(default_factory=list)           # malformed or cut answers
    wrong: list = field(default_factory=list)            # greedy text != mlx-lm's
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what, item=None):
        with self.lock:
            if item is None:
                setattr(self, what, getattr(self, what) + 1)
            else:
                getattr(self, what).append(item)

    def failures(self):
        return self.server_errors + self.client_errors + self.broken + self.wrong


def pick_request(rng, reference, alias):
    """(route, body, expected greedy text or None)."""
    kind = rng.random()
    greedy = rng.random() < 0.5
    sampling = {"temperature": 0} if greedy else \
        {"temperature": 0.8, "top_p": 0.95, "seed": rng.randrange(1 << 30)}
    if kind < 0.8:
        name, ref = rng.choice(sorted(reference["chats"].items()))
        body = {"model": alias, "messages": ref["messages"]}
        route = "/v1/chat/completions"
    else:
        name, ref = rng.choice(sorted(reference["texts"].items()))
        body = {"model": alias, "prompt": ref["prompt"]}
        route = "/v1/completions"
    full = len(ref["tokens"])
    body["max_tokens"] = full if rng.random() < 0.6 else rng.randrange(1, full)
    body["stream"] = rng.random() < 0.85
    if body["stream"] and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    body.update(sampling)
    want = ref["text"] if greedy and body["max_tokens"] == full else None
    return route, body, want


def hang_up(conn, rng):
    """Close the socket, half of the time with a reset instead of a FIN."""
    sock = conn.sock
    if sock is not None and rng.random() < 0.5:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def read_stream(conn, resp, route, hang_after, cut_at):
    """The streamed text, the number of content chunks and whether it ended
    with [DONE]; stops early (returns None) after `hang_after` chunks; a
    TimeoutError at `cut_at`."""
    text, chunks = [], 0
    while True:
        left = cut_at - time.monotonic()
        if left <= 0:
            raise TimeoutError("cut at the deadline")
        conn.sock.settimeout(left)
        line = resp.readline()
        if not line:
            return "".join(text), chunks, False
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            return "".join(text), chunks, True
        obj = json.loads(data)
        if "error" in obj:
            raise ValueError(f"error chunk {obj['error']}")
        for choice in obj.get("choices", []):
            piece = (choice.get("delta", {}).get("content") if "chat" in route
                     else choice.get("text"))
            if piece:
                text.append(piece)
                chunks += 1
        if hang_after is not None and chunks >= hang_after:
            return None


def one_request(port, rng, reference, alias, tally, hangup_share, cut_at):
    route, body, want = pick_request(rng, reference, alias)
    t0 = time.monotonic()
    hang = rng.random() < hangup_share
    # Where a hanging-up client leaves: before reading anything, after the
    # headers, or after a few content chunks.
    where = rng.choice(["sent", "headers", "chunks"]) if hang else None
    if where == "chunks" and not body["stream"]:
        where = "headers"
    conn = http.client.HTTPConnection("127.0.0.1", port,
                                      timeout=max(0.5, cut_at - t0))
    desc = f"{route} {json.dumps(body)[:160]}"
    try:
        conn.request("POST", route, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        if where == "sent":
            time.sleep(rng.random() * 0.2)
            tally.add("hung_up")
            return
        resp = conn.getresponse()
        if resp.status >= 500:
            tally.add("server_errors", f"{resp.status} {desc}: {resp.read()[:300]!r}")
            return
        if resp.status != 200:
            tally.add("client_errors", f"{resp.status} {desc}: {resp.read()[:300]!r}")
            return
        if where == "headers":
            tally.add("hung_up")
            return
        if body["stream"]:
            got = read_stream(conn, resp, route, rng.randrange(1, 8) if where else None,
                              cut_at)
            if got is None:
                tally.add("hung_up")
                return
            text, chunks, done = got
            if not done:
                tally.add("broken", f"no [DONE] after {chunks} chunks: {desc}")
                return
        else:
            obj = json.loads(resp.read())
            choice = obj["choices"][0]
            text = choice["message"]["content"] if "chat" in route else choice["text"]
            chunks = obj["usage"]["completion_tokens"]
        tally.add("completed")
        tally.add("started_done", t0)
        with tally.lock:
            tally.tokens += chunks
        if want is not None:
            tally.add("greedy_checked")
            if text != want:
                tally.add("wrong", f"{desc}: {text!r} != {want!r}")
    except TimeoutError as e:
        ran = time.monotonic() - t0
        with tally.lock:
            overtaken = sum(1 for t in tally.started_done if t > t0)
        if time.monotonic() < cut_at - 0.2 or (ran > MAX_REQUEST_S and overtaken >= OVERTAKEN):
            tally.add("broken", f"{e} after {ran:.1f} s, {overtaken} later requests "
                                f"answered meanwhile: {desc}")
        else:
            tally.add("cut")
        hang = True
    except (OSError, ValueError, KeyError, http.client.HTTPException) as e:
        if not hang:
            tally.add("broken", f"{type(e).__name__}: {e}: {desc}")
    finally:
        if hang:
            hang_up(conn, rng)
        else:
            conn.close()


def run_soak(port, pid, reference, alias, clients=16, seconds=60.0,
             warmup_s=None, hangup_share=0.3, seed=0, progress=None):
    """Run the load; returns (tally, rss samples [(t, kB)], rss at the end
    of the warm-up). `progress(tally, t)` is called about every 10 s."""
    tally = Tally()
    t0 = time.monotonic()
    deadline = t0 + seconds
    warmup_s = min(15.0, seconds / 4) if warmup_s is None else warmup_s

    def client(i):
        rng = random.Random(seed * 1000 + i)
        while time.monotonic() < deadline:
            one_request(port, rng, reference, alias, tally, hangup_share,
                        deadline + GRACE_S)

    threads = [threading.Thread(target=client, args=(i,), daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()
    samples, warm_rss, next_report = [], None, 10.0
    while any(t.is_alive() for t in threads) and \
            time.monotonic() < deadline + GRACE_S + 10:
        now = time.monotonic() - t0
        samples.append((now, rss_kb(pid)))
        if warm_rss is None and now >= warmup_s:
            warm_rss = samples[-1][1]
        if progress and now >= next_report:
            progress(tally, now)
            next_report += 10.0
        time.sleep(0.5)
    for t in threads:
        t.join(GRACE_S + 10)
        if t.is_alive():
            tally.add("broken", "a client thread did not finish")
    return tally, samples, warm_rss
