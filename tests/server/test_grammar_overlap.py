"""The grammar masks a step samples from are computed on the engine's mask
thread while the step's forward pass runs (SPINDLE_GRAMMAR_OVERLAP=1 here;
by default only when the forward leaves a core free). That must change
nothing: with it on, constrained
decoding writes the same tokens as with it off (greedy, seeded sampling,
speculative n-gram drafts with a grammar, and requests with different
grammars batched in one engine), the text is in the grammar's language
(Python's re), and a constrained request cancelled mid-answer ends alone
while the others go on (the sanitizer pass runs this file under ASan and
UBSan: a gate freed under the mask thread is a heap-use-after-free)."""
import json
import socket
import threading

import pytest

from server_common import ALIAS, Server
from test_errors_and_limits import gauge, read_sse_until_first_content, wait_running
from test_grammar import SCHEMA, chat
from test_grammar_decode import LANGUAGE, run

ON = {"SPINDLE_GRAMMAR_OVERLAP": "1"}
OFF = {"SPINDLE_GRAMMAR_OVERLAP": "0"}

CLI_CASES = {
    "greedy": (0, ("--jump-forward", "off")),
    "greedy-jump-forward": (0, ("--jump-forward", "on")),
    "seeded": (0.8, ("--seed", 5)),
    "seeded-top-p": (1.0, ("--seed", 9, "--top-p", 0.9)),
    "spec-ngram": (0, ("--spec", "ngram", "--num-draft-tokens", 4, "--spec-fixed-k",
                       "--jump-forward", "off")),
    "spec-ngram-seeded": (0.8, ("--spec", "ngram", "--num-draft-tokens", 4, "--seed", 3)),
}


@pytest.mark.parametrize("case", CLI_CASES)
def test_overlap_on_equals_off(server_model, tmp_path, case):
    temp, args = CLI_CASES[case]
    on = run(server_model, tmp_path, *args, temp=temp, env=ON)
    off = run(server_model, tmp_path, *args, temp=temp, env=OFF)
    assert on["tokens"] == off["tokens"]
    assert on["stats"]["stop_reason"] == off["stats"]["stop_reason"]
    if on["stats"]["stop_reason"] == "eos":
        assert LANGUAGE.fullmatch(on["text"]), on["text"]


FMT = {"response_format": {"type": "json_schema",
                           "json_schema": {"name": "pet", "schema": SCHEMA}}}
ANSWER = {"grammar": 'root ::= "answer: " ("yes" | "no") " (" [0-9]{1,3} "%)"\n'}
LIST = {"grammar": 'root ::= "[" [a-z]{1,6} ("," [a-z]{1,6}){3,8} "]"\n'}
# chat() arguments: extra body, max_tokens, temperature, seed
BATCH = [(FMT, 200, 0.0, 1), (ANSWER, 40, 0.0, 2), (LIST, 80, 0.0, 3),
         (FMT, 200, 0.9, 5), (ANSWER, 40, 0.9, 7), (LIST, 80, 0.9, 8)]


def together(server, cases):
    """Every case at once (the engine steps them in shared forwards)."""
    out = [None] * len(cases)

    def one(i):
        status, _, body = chat(server, *cases[i])
        out[i] = (status, body["choices"][0]["message"]["content"] if status == 200 else body)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return out


def overlap_server(server_model, env):
    s = Server(server_model, "--alias", ALIAS, "--parallel", 4, env=env)
    try:
        yield s
    finally:
        s.stop_cleanly()


@pytest.fixture(scope="module")
def server_on(server_model):
    yield from overlap_server(server_model, ON)


@pytest.fixture(scope="module")
def server_off(server_model):
    yield from overlap_server(server_model, OFF)


def test_batched_grammars_overlap_on_equals_off(server_on, server_off):
    on = together(server_on, BATCH)
    assert all(status == 200 for status, _ in on), on
    assert on == together(server_off, BATCH)


# 1290 tokens at temperature 0 (900 items, each at most a few tokens): it
# does not end by itself before the client leaves.
ENDLESS = 'root ::= item{900} "."\nitem ::= [a-z] [a-z] ","\n'


def test_cancelled_constrained_request_ends_alone(server_on):
    solo = together(server_on, BATCH[:3])
    assert wait_running(server_on, 0) == 0
    generated = gauge(server_on, "spindle_generation_tokens_total")
    sock = socket.create_connection(("127.0.0.1", server_on.port), timeout=60)
    body = json.dumps({"messages": [{"role": "user", "content": "Letters."}],
                       "grammar": ENDLESS, "max_tokens": 4000, "stream": True,
                       "temperature": 0}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    read_sse_until_first_content(sock)
    beside = [None]
    t = threading.Thread(target=lambda: beside.__setitem__(0, together(server_on, BATCH[:3])))
    t.start()
    sock.close()   # the server cancels it at its next write
    t.join(timeout=300)
    assert beside[0] == solo
    assert wait_running(server_on, 0) == 0
    more = gauge(server_on, "spindle_generation_tokens_total") - generated
    assert more < 1000, f"{more} tokens generated: the request was not cancelled"
    assert server_on.proc.poll() is None, server_on.stderr()[-6000:]
