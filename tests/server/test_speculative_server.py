"""Speculative decoding in the server: `--spec ngram` and `--spec draft`
(the tiny model drafting for itself), with the per-request fields of
mlx_lm.server (num_draft_tokens) and llama-server (speculative.n_max,
speculative.n_min). Greedy answers are mlx-lm's non-speculative ones,
token for token (text, count and each token's logprob entry equal the
same server's answer without speculation); /metrics shows the drafts
verified; bad values are a 400 naming the field."""
import pytest

from server_common import ALIAS, Server, assert_api_error, post_json, request

CHAT = "/v1/chat/completions"
PER_REQUEST = [
    {},
    {"num_draft_tokens": 4},
    {"speculative.n_max": 8, "speculative.n_min": 2},
    {"num_draft_tokens": 3, "speculative.n_max": 3, "speculative.n_min": 3},
    {"num_draft_tokens": 1},
]


def counter(server, name):
    metrics = request(server.port, "GET", "/metrics")[2].decode()
    return float(metrics.split(f"\n{name} ", 1)[1].split("\n", 1)[0])


def drafted(server):
    return counter(server, "spindle_spec_draft_tokens_total")


@pytest.fixture(scope="module", params=["ngram", "draft"])
def spec_server(request, server_model):
    """--spec ngram, or --spec draft with the model drafting for itself
    (with a fixed K: a drafter as slow as its target, the adaptive rule
    rightly turns it off, tests/parity/test_spec.py)."""
    extra = (["--draft-model", server_model, "--spec-fixed-k"]
             if request.param == "draft" else [])
    s = Server(server_model, "--alias", ALIAS, "--parallel", 2, "--spec", request.param,
               *extra)
    try:
        yield s
    finally:
        s.stop_cleanly()


def greedy(server, ref, **extra):
    body = {"model": ALIAS, "messages": ref["messages"], "temperature": 0,
            "max_tokens": len(ref["tokens"]), "logprobs": True, "top_logprobs": 1, **extra}
    status, _, r = post_json(server.port, CHAT, body)
    assert status == 200, r
    return r


def tokens_of(r):
    return [(t["token"], t["bytes"]) for t in r["choices"][0]["logprobs"]["content"]]


@pytest.mark.parametrize("extra", PER_REQUEST, ids=lambda e: ",".join(e) or "server-default")
def test_greedy_equals_plain_decoding(spec_server, reference, extra):
    for name, ref in sorted(reference["chats"].items()):
        plain = greedy(spec_server, ref, num_draft_tokens=0)
        before = drafted(spec_server)
        r = greedy(spec_server, ref, **extra)
        assert r["choices"][0]["message"]["content"] == ref["text"], name
        assert r["usage"]["completion_tokens"] == len(ref["tokens"]), name
        assert tokens_of(r) == tokens_of(plain), name
        assert drafted(spec_server) >= before


def test_drafts_are_verified_and_zero_turns_them_off(spec_server, reference):
    ref = reference["chats"]["hello"]
    before = drafted(spec_server)
    greedy(spec_server, ref, num_draft_tokens=0)
    assert drafted(spec_server) == before, "num_draft_tokens 0 still drafted"
    greedy(spec_server, ref, num_draft_tokens=4)
    assert drafted(spec_server) > before, "no draft token was verified"


@pytest.mark.parametrize("extra,param", [
    ({"num_draft_tokens": -1}, "num_draft_tokens"),
    ({"num_draft_tokens": 33}, "num_draft_tokens"),
    ({"num_draft_tokens": 2.5}, "num_draft_tokens"),
    ({"num_draft_tokens": "4"}, "num_draft_tokens"),
    ({"speculative.n_max": 1e9}, "speculative.n_max"),
    ({"speculative.n_min": -2}, "speculative.n_min"),
    ({"speculative.n_max": 3, "speculative.n_min": 5}, "speculative.n_min"),
    ({"num_draft_tokens": 4, "speculative.n_max": 5}, "speculative.n_max"),
    ({"speculative.n_min": 20}, "speculative.n_min"),   # above the server's K of 10
])
def test_bad_values_are_400(spec_server, extra, param):
    status, _, r = post_json(spec_server.port, CHAT,
                             {"messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 2, **extra})
    assert_api_error(status, r, 400, param=param)


def test_fields_ignored_without_spec(server, reference):
    """A server without --spec answers as mlx_lm.server without a draft
    model: the fields are validated, then ignored."""
    ref = reference["chats"]["hello"]
    before = drafted(server)
    r = greedy(server, ref, **{"speculative.n_max": 6, "speculative.n_min": 1})
    assert r["choices"][0]["message"]["content"] == ref["text"]
    assert drafted(server) == before
    status, _, r = post_json(server.port, CHAT, {"messages": ref["messages"],
                                                 "num_draft_tokens": 99})
    assert_api_error(status, r, 400, param="num_draft_tokens")


def test_spec_mtp_needs_a_head(server_model):
    """`serve --spec mtp` on a model without mtp.* weights exits while
    loading, with one line naming it (the MTP drafter itself: tests/parity/
    test_spec.py and test_mtp.py, on a tiny checkpoint carrying a head)."""
    import subprocess
    from server_common import SPINDLE_BIN
    r = subprocess.run([str(SPINDLE_BIN), "serve", "-m", str(server_model),
                        "--host", "127.0.0.1", "--port", "0", "--spec", "mtp"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    errors = [ln for ln in r.stderr.splitlines() if "listening on" not in ln]
    assert len(errors) == 1 and "multi-token-prediction head" in errors[0], r.stderr


def test_mtp_companion_is_checked_at_start(server_model, tmp_path):
    """`serve --mtp DIR` loads the companion before listening: one that
    cannot draft for the model is one line and a non-zero exit (companions
    themselves: tests/parity/test_mtp_companion.py)."""
    import json
    import subprocess
    from server_common import SPINDLE_BIN
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "qwen3_5_mtp", "block_size": 3}))
    r = subprocess.run([str(SPINDLE_BIN), "serve", "-m", str(server_model),
                        "--host", "127.0.0.1", "--port", "0", "--mtp",
                        str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    errors = [ln for ln in r.stderr.splitlines() if "listening on" not in ln]
    assert len(errors) == 1 and "MTP head" in errors[0], r.stderr
