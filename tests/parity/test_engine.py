"""The step engine (spindle_engine_*) on the tiny mlx-lm parity models.

tests/tools/engine_harness drives the public API through a scripted
scenario (staggered submits, a cancel, a submit from a callback, prompts
longer than the per-step token budget, several requests in every forward
pass) and reports every request's tokens, logprobs, stop reason and raw
logits per step.  Checks:
  * batched greedy tokens against mlx-lm's reference (reference.json, the
    parity near-tie rule) and against the same requests run alone (one at a
    time through the engine, and through spindle_generate): identical
    unless the solo run's own logits show a near-tie where they part;
  * every step's logits batched vs alone within the parity tolerance, and
    the last-prompt-position logits against mlx-lm's;
  * seeded sampling: per request the same tokens batched and alone (each
    request owns its random stream);
  * top logprobs against numpy's log-softmax of the step's raw logits;
  * cancel, callback stop, context stop, the limit error at submit, a
    request failing alone, background mode and free cancelling in flight.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
HARNESS = Path(os.environ.get("SPINDLE_BUILD_DIR", pc.SPINDLE_BIN.parent)) \
    / "engine_harness"
MODELS = ["qwen3-f32", "llama-q4g64", "qwen2-bf16", "qwen3-q8g64"]
MAX_TOP = 20           # SPINDLE_MAX_TOP_LOGPROBS
BUDGET = 16            # max_batch_tokens: len40 and LONG take several steps
P = mm.PROMPTS
LONG = [(i * 7919 + 13) % 500 for i in range(100)]
MID = [(i * 104729 + 7) % 500 for i in range(23)]


@pytest.fixture(scope="session")
def models_dir(spindle_bin):  # noqa: F811
    if not HARNESS.is_file():
        pytest.skip(f"engine harness not found at {HARNESS}")
    return pc.ensure_models(OUT, mm)


def run(model_dir, tmp_path, mode, requests, **opts):
    return run_scenario(model_dir, tmp_path, mode, requests, **opts)["requests"]


def run_scenario(model_dir, tmp_path, mode, requests, **opts):
    """The harness's whole answer: requests (with their logits), steps,
    max_running/max_queued and the KV pool's counts (pool_end, pool_final).
    """
    logits_dir = tmp_path / f"logits-{mode}-{opts.get('max_seqs', 0)}"
    logits_dir.mkdir(exist_ok=True)
    scenario = dict(model=str(model_dir), mode=mode, requests=requests,
                    logits_dir=str(logits_dir), **opts)
    if os.environ.get("SPINDLE_THREADS"):
        scenario["threads"] = int(os.environ["SPINDLE_THREADS"])
    path = logits_dir / "scenario.json"
    path.write_text(json.dumps(scenario))
    r = subprocess.run([str(HARNESS), str(path)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"engine_harness failed:\n{r.stderr[-4000:]}"
    answer = json.loads(r.stdout)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    for q in answer["requests"]:
        if "logits_file" in q:
            q["logits"] = np.fromfile(q["logits_file"], np.float32).reshape(
                -1, vocab)
    return answer


def solo(model_dir, tmp_path, requests):
    """Each request alone: one at a time through an engine with one slot
    and the default budget (what spindle_generate does), with the cancels,
    staggering and chaining removed."""
    plain = [{k: v for k, v in q.items()
              if k not in ("submit_at", "cancel_at", "after")}
             for q in requests]
    return run(model_dir, tmp_path, "step", plain, max_seqs=1)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def assert_same_tokens(got, alone, label):
    """Batched tokens equal the solo run's, unless they part where the solo
    logits are a near-tie (the parity rule, with the f32 tolerance)."""
    i = first_difference(got["tokens"], alone["tokens"])
    if i is None:
        return
    assert i < len(alone["logits"]), \
        f"{label}: lengths differ ({len(got['tokens'])} vs " \
        f"{len(alone['tokens'])}) with equal tokens"
    row = alone["logits"][i]
    top = np.sort(row)[-2:]
    thr = pc.TIE_FACTOR * pc.TOL_F32_REL * np.std(row)
    assert top[1] - top[0] < thr, (
        f"{label}: token {i} batched {got['tokens'][i:i + 1]} vs alone "
        f"{alone['tokens'][i:i + 1]}, no near-tie (margin "
        f"{top[1] - top[0]:.4g} >= {thr:.3g})\n  batched {got['tokens']}\n"
        f"  alone   {alone['tokens']}")
    print(f"  {label}: near-tie at token {i}, accepted")


def assert_close_logits(got, alone, label):
    n = min(len(got["logits"]), len(alone["logits"]),
            (first_difference(got["tokens"], alone["tokens"]) or 10**9) + 1)
    for i in range(n):
        want = alone["logits"][i]
        err = float(np.max(np.abs(got["logits"][i] - want)) / np.std(want))
        assert err <= pc.TOL_F32_REL, \
            f"{label}: step {i} logits off by {err:.3g} of the std"


def check_finished_once(out):
    for i, q in enumerate(out):
        if "submit_status" in q:
            continue
        assert q["finish_calls"] == 1, f"request {i}: {q['finish_calls']} on_finish calls"
        assert q["stream_matches"], f"request {i}: on_token stream != on_finish tokens"


def greedy_requests():
    """Lengths 1, 7, 40 (mlx references), 23 and 100 (> BUDGET); staggered
    submits, one cancelled mid-decode, one submitted from a callback."""
    def q(prompt, **kw):
        return dict(prompt=prompt, max_tokens=mm.MAX_TOKENS, logits=True, **kw)
    return [
        q(P["len40"]),
        q(P["len1"]),
        q(P["len7"], submit_at=0),
        q(LONG, submit_at=1),
        q(P["len7"], submit_at=5),        # arrives mid-decode
        q(P["len40"], submit_at=9),       # waits for a free slot (6 run)
        q(MID, submit_at=3, cancel_at=14),
        q(P["len1"], after=1),            # submitted from on_finish
    ]


REF_PROMPT = {tuple(v): k for k, v in P.items()}


@pytest.mark.parametrize("model", MODELS)
def test_batched_greedy_equals_alone_and_mlx(models_dir, tmp_path, model):
    mdir = models_dir / model
    reqs = greedy_requests()
    batched = run(mdir, tmp_path, "step", reqs, max_seqs=6,
                  max_batch_tokens=BUDGET)
    alone = solo(mdir, tmp_path, reqs)
    via_generate = run(mdir, tmp_path, "generate", reqs)
    check_finished_once(batched)
    ref = pc.load_ref(models_dir, model)
    for i, (got, want, gen) in enumerate(zip(batched, alone, via_generate)):
        label = f"{model} request {i} (prompt {len(reqs[i]['prompt'])})"
        # spindle_generate is the one-request engine: bit-identical.
        assert gen["tokens"] == want["tokens"], label
        assert np.array_equal(gen["logits"][0], want["logits"][0]), label
        if reqs[i].get("cancel_at") is not None:
            assert got["stop_reason"] == "cancelled" and got["cancel_result"]
            assert got["tokens"] == want["tokens"][:len(got["tokens"])], label
            assert 0 < len(got["tokens"]) < len(want["tokens"]), label
            continue
        assert got["stop_reason"] == want["stop_reason"], label
        assert_same_tokens(got, want, label)
        assert_close_logits(got, want, label)
        name = REF_PROMPT.get(tuple(reqs[i]["prompt"]))
        if name:
            entry = ref["prompts"][name]
            pc.assert_greedy_tokens(got, ref, entry)
            dump = tmp_path / f"req{i}.npy"
            np.save(dump, got["logits"][0])
            pc.assert_last_logits(dump, mdir, ref, entry, label)


@pytest.mark.parametrize("model", ["qwen3-f32", "llama-q4g64"])
def test_seeded_sampling_independent_of_batch(models_dir, tmp_path, model):
    mdir = models_dir / model

    def q(prompt, seed, **kw):
        return dict(prompt=prompt, max_tokens=24, temperature=1.0, top_p=0.95,
                    seed=seed, ignore_eos=True, logits=True, **kw)
    reqs = [
        q(P["len7"], 1),
        q(P["len7"], 1, submit_at=2),      # same seed and prompt, later
        q(P["len7"], 2),
        q(LONG, 3, submit_at=1),
        q(P["len40"], 4, repetition_penalty=1.3, submit_at=4),
        dict(prompt=P["len1"], max_tokens=24, logits=True),  # greedy beside
    ]
    batched = run(mdir, tmp_path, "step", reqs, max_seqs=4,
                  max_batch_tokens=BUDGET)
    alone = solo(mdir, tmp_path, reqs)
    check_finished_once(batched)
    for i, (got, want) in enumerate(zip(batched, alone)):
        # A draw flips only if the uniform lands within summation-order
        # noise of a CDF boundary: exact equality.
        assert got["tokens"] == want["tokens"], f"{model} request {i}"
    assert batched[0]["tokens"] == batched[1]["tokens"]
    assert batched[0]["tokens"] != batched[2]["tokens"], \
        "different seeds gave the same 24 sampled tokens"


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.sum(np.exp(x - m)))


def test_top_logprobs(models_dir, tmp_path):
    mdir = models_dir / "qwen3-f32"
    reqs = [dict(prompt=P["len7"], max_tokens=8, top_logprobs=5, logits=True),
            dict(prompt=P["len1"], max_tokens=8, top_logprobs=MAX_TOP,
                 logits=True, temperature=0.7, seed=5),
            dict(prompt=P["len1"], max_tokens=8, top_logprobs=MAX_TOP + 1)]
    out = run(mdir, tmp_path, "step", reqs, max_seqs=4)
    for q, r in zip(out[:2], reqs):
        assert len(q["top"]) == len(q["tokens"]) == 8
        for step, (tok, lp, top) in enumerate(
                zip(q["tokens"], q["logprobs"], q["top"])):
            want = log_softmax(q["logits"][step])
            ids = [t for t, _ in top]
            vals = [v for _, v in top]
            assert len(ids) == r["top_logprobs"] == len(set(ids))
            assert vals == sorted(vals, reverse=True), f"step {step}"
            assert np.allclose(vals, want[ids], atol=2e-5), f"step {step}"
            rest = np.delete(want, ids)
            assert rest.max() <= vals[-1] + 2e-5, \
                f"step {step}: a token outside the top list is more likely"
            assert abs(lp - want[tok]) < 2e-5
    assert out[0]["tokens"] == [t[0][0] for t in out[0]["top"]]  # greedy
    assert out[2]["submit_status"] == "invalid argument", out[2]


def test_context_limit_callback_stop_and_failing_request(models_dir, tmp_path):
    mdir = models_dir / "qwen3-f32"
    reqs = [
        dict(prompt=P["len40"], max_tokens=32, logits=True),   # context at 48
        dict(prompt=P["len7"], max_tokens=32, logits=True, stop_after=5),
        dict(prompt=LONG[:49], max_tokens=4),                  # never fits
        dict(prompt=P["len7"], max_tokens=6, foreign_seq=True),
        dict(prompt=P["len1"], max_tokens=32, logits=True, submit_at=2),
    ]
    out = run(mdir, tmp_path, "step", reqs, max_seqs=4,
              max_batch_tokens=BUDGET, max_context=48)
    alone = run(mdir, tmp_path, "generate", reqs, max_context=48)
    check_finished_once(out)
    assert out[0]["stop_reason"] == "context"
    assert len(out[0]["tokens"]) == 48 - 40 + 1
    assert alone[0]["stop_reason"] == "context"
    assert out[1]["stop_reason"] == "callback" and len(out[1]["tokens"]) == 5
    assert alone[1]["stop_reason"] == "callback"
    assert out[2]["submit_status"] == "limit exceeded", out[2]
    assert out[3]["stop_reason"] == "error" and "another model" in out[3]["error"]
    for i in (0, 1, 4):
        assert out[i]["tokens"] == alone[i]["tokens"], f"request {i}"


def test_background_mode(models_dir, tmp_path):
    mdir = models_dir / "qwen3-f32"
    reqs = greedy_requests()
    for q in reqs:   # in background mode, submit_at / cancel_at count tokens
        for k in ("submit_at", "cancel_at"):
            if k in q:
                q[k] *= 3
    out = run(mdir, tmp_path, "background", reqs, max_seqs=4,
              max_batch_tokens=BUDGET)
    alone = solo(mdir, tmp_path, reqs)
    check_finished_once(out)
    for i, (got, want) in enumerate(zip(out, alone)):
        if "cancel_at" in reqs[i]:
            assert got["tokens"] == want["tokens"][:len(got["tokens"])]
            continue
        assert got["stop_reason"] == want["stop_reason"]
        assert_same_tokens(got, want, f"background request {i}")


def test_free_cancels_in_flight(models_dir, tmp_path):
    mdir = models_dir / "qwen3-f32"
    reqs = [dict(prompt=P["len7"], max_tokens=400, ignore_eos=True)
            for _ in range(6)]
    out = run(mdir, tmp_path, "background", reqs, max_seqs=4,
              max_batch_tokens=BUDGET, free_after_tokens=20)
    check_finished_once(out)
    assert all(q["stop_reason"] == "cancelled" for q in out), \
        [q["stop_reason"] for q in out]
    assert sum(len(q["tokens"]) == 0 for q in out) >= 2  # still queued
