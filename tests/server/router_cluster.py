"""Spindle replicas behind vLLM's router (the `vllm-router` package's Rust
router): what tests/server/test_vllm_router.py and bench/router_compare.py
share. Replicas are `spindle serve` on fixed loopback ports (so that one
can be restarted where the router expects it), the router a child process
whose log goes to a file; both are always stopped, and every wait is
bounded.

The workload is multi-tenant chat: each tenant has its own long system
prompt (several 32-token KV blocks) shared by its conversations, and each
conversation goes on for some turns, every turn resending the whole
history (as a chat client does)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from server_common import Server, request

ROUTER_START_TIMEOUT = 60


def router_binary():
    """The launcher installed beside this Python (the test venv), else on
    PATH; None when the package is not installed."""
    local = Path(sys.executable).parent / "vllm-router"
    return str(local) if local.is_file() else shutil.which("vllm-router")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_replica(model, port, alias, *extra, threads=1, wait_ready=True):
    # Server's own "--port 0" and -t come first: the later flags win.
    return Server(model, "--alias", alias, "--port", port, "-t", threads, *extra,
                  wait_ready=wait_ready)


class Router:
    """`vllm-router` over `worker_urls` with `policy`, on a free loopback
    port; ready once it answers /v1/models through a worker."""

    def __init__(self, worker_urls, policy, log_path, *extra):
        binary = router_binary()
        if binary is None:
            raise RuntimeError("vllm-router is not installed (tests/requirements.txt)")
        self.port = free_port()
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(self.port), "--policy", policy,
             "--worker-urls", *worker_urls, "--worker-startup-check-interval", "1",
             "--log-level", "info", *map(str, extra)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"})
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def log(self, tail=6000):
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-tail:]

    def _wait_ready(self):
        deadline = time.monotonic() + ROUTER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"vllm-router exited {self.proc.returncode}:\n" + self.log())
            try:
                if request(self.port, "GET", "/v1/models", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("vllm-router never became ready:\n" + self.log())

    def workers(self):
        """{url: is_healthy} as the router sees its workers."""
        status, _, data = request(self.port, "GET", "/workers", timeout=10)
        assert status == 200, data
        return {w["url"]: w["is_healthy"] for w in json.loads(data)["workers"]}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def wait_until(predicate, timeout, what, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# ---- the workload

TOPICS = ["lighthouse keepers", "tide tables", "rope knots", "harbour pilots",
          "sea charts", "fog signals", "ship bells", "anchor chains"]
QUESTIONS = ["Say hello.", "What is the first rule?", "Tell me more.",
             "Name one tool.", "Why does that matter?", "Summarise briefly."]


def system_prompt(tenant, sentences):
    topic = TOPICS[tenant % len(TOPICS)]
    lines = [f"You are the assistant of tenant {tenant}, an expert on {topic}."]
    lines += [f"Rule {i + 1}: answer questions about {topic} plainly, rule {i + 1} of "
              f"tenant {tenant}." for i in range(sentences)]
    return " ".join(lines)


@dataclass
class Conversation:
    tenant: int
    system: str
    questions: list
    answers: list = field(default_factory=list)

    def messages(self, turn):
        """The request of turn `turn`: the system prompt, the history so
        far (this conversation's own answers) and the turn's question."""
        msgs = [{"role": "system", "content": self.system}]
        for q, a in zip(self.questions[:turn], self.answers[:turn]):
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        return msgs + [{"role": "user", "content": self.questions[turn]}]


def workload(tenants, conversations_per_tenant, turns, sentences=12):
    convs = []
    for t in range(tenants):
        system = system_prompt(t, sentences)
        for c in range(conversations_per_tenant):
            qs = [f"(conversation {t}.{c}) " + QUESTIONS[(c + k) % len(QUESTIONS)]
                  for k in range(turns)]
            convs.append(Conversation(t, system, qs))
    return convs


def chat_turn(client, alias, conv, turn, max_tokens, stream=False):
    """Send turn `turn` of `conv` (greedy) and append the answer. Returns
    (answer, seconds to the first token or None, completion tokens)."""
    msgs = conv.messages(turn)
    t0 = time.monotonic()
    if not stream:
        r = client.chat.completions.create(model=alias, messages=msgs, max_tokens=max_tokens,
                                           temperature=0)
        answer, ttft, tokens = r.choices[0].message.content, None, r.usage.completion_tokens
    else:
        parts, ttft, tokens = [], None, 0
        for chunk in client.chat.completions.create(
                model=alias, messages=msgs, max_tokens=max_tokens, temperature=0,
                stream=True, stream_options={"include_usage": True}):
            if chunk.usage:
                tokens = chunk.usage.completion_tokens
            if chunk.choices and chunk.choices[0].delta.content:
                if ttft is None:
                    ttft = time.monotonic() - t0
                parts.append(chunk.choices[0].delta.content)
        answer = "".join(parts)
    conv.answers.append(answer)
    return answer, ttft, tokens


def prompt_cache_counts(port):
    """(prompt tokens, of them from the prefix index) a replica counted."""
    data = request(port, "GET", "/metrics", timeout=10)[2].decode()
    values = {}
    for line in data.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return (values.get("spindle_prompt_tokens_total", 0.0),
            values.get("spindle_prompt_cached_tokens_total", 0.0))
