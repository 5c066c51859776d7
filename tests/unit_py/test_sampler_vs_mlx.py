"""Spindle's sampler transforms and logits processors against mlx-lm.

tests/tools/sampler_harness (built with the library) applies one transform
per JSON line; the same arrays go through mlx_lm.sample_utils' own functions
(apply_top_p, apply_min_p, apply_xtc, apply_top_k, make_logits_processors,
the chain that make_sampler builds) and the results must agree: the same
entries masked to -inf and the kept values unchanged. Inputs are random
vectors of many sizes, with ties (small integer logits), extreme ranges,
one dominant token and entries already at -inf.

mlx's functions are mx.compile'd with the float parameters baked in, which
recompiles (minutes) for every new value; compilation is turned off for this
module, which runs the same operations eagerly.
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
su = pytest.importorskip("mlx_lm.sample_utils")

ROOT = Path(__file__).resolve().parents[2]
HARNESS = os.environ.get(
    "SPINDLE_SAMPLER_HARNESS",
    str(Path(os.environ.get("SPINDLE_BUILD_DIR", ROOT / "build"))
        / "sampler_harness"),
)

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(HARNESS) and os.access(HARNESS, os.X_OK)),
    reason=f"sampler harness not found at {HARNESS} "
           "(build it, or set SPINDLE_SAMPLER_HARNESS)",
)

N_CASES = 150


@pytest.fixture(scope="module", autouse=True)
def eager_mlx():
    mx.disable_compile()
    yield
    mx.enable_compile()


@pytest.fixture(scope="module")
def harness():
    proc = subprocess.Popen([HARNESS], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)

    def call(req):
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line, "harness exited"
        reply = json.loads(line)
        assert "error" not in reply, reply["error"]
        return reply

    yield call
    proc.stdin.close()
    proc.wait(timeout=10)


def f32(x):
    """A Python float that float32 holds exactly (both sides then read the
    same parameter)."""
    return float(np.float32(x))


def to_json(a):
    return [float(v) if np.isfinite(v) else None for v in np.asarray(a)]


def from_json(values):
    return np.array([-np.inf if v is None else v for v in values],
                    dtype=np.float32)


def random_logits(rng, i):
    """Case i of a deterministic mix of shapes and value patterns."""
    n = int(rng.choice([2, 3, 5, 8, 17, 64, 300, 1000, 4096]))
    kind = i % 6
    if kind == 0:
        x = rng.normal(0, rng.uniform(0.1, 10), n)
    elif kind == 1:  # many ties
        x = rng.integers(-3, 4, n).astype(np.float64)
    elif kind == 2:  # extreme range
        x = rng.normal(0, 40, n)
        x[rng.integers(0, n)] = 80.0
    elif kind == 3:  # one dominant token
        x = rng.normal(0, 1, n)
        x[rng.integers(0, n)] = 30.0
    elif kind == 4:  # some entries already removed
        x = rng.normal(0, 3, n)
        dead = rng.random(n) < 0.3
        dead[rng.integers(0, n)] = False
        x[dead] = -np.inf
    else:  # all equal
        x = np.full(n, float(rng.normal()))
    return x.astype(np.float32)


def mlx_logprobs(logits):
    a = mx.array(logits)
    return np.array(a - mx.logsumexp(a, keepdims=True))


def assert_same(ours, ref, what):
    ours = np.asarray(ours, dtype=np.float32)
    ref = np.asarray(ref, dtype=np.float32)
    assert ours.shape == ref.shape, what
    fin_o, fin_r = np.isfinite(ours), np.isfinite(ref)
    diff = np.nonzero(fin_o != fin_r)[0]
    assert diff.size == 0, (
        f"{what}: kept sets differ at {diff[:10].tolist()} "
        f"(ours kept {int(fin_o.sum())}, mlx kept {int(fin_r.sum())})")
    assert np.array_equal(ours[fin_o], ref[fin_r]), f"{what}: kept values"
    assert np.all(ref[~fin_r] == -np.inf), f"{what}: mlx masks with -inf"


def transform_cases(seed):
    rng = np.random.default_rng(seed)
    for i in range(N_CASES):
        yield i, rng, mlx_logprobs(random_logits(rng, i))


def test_log_softmax(harness):
    rng = np.random.default_rng(0)
    for i in range(N_CASES):
        logits = random_logits(rng, i)
        ours = from_json(harness({"op": "log_softmax",
                                  "logits": to_json(logits)})["values"])
        ref = mlx_logprobs(logits)
        fin = np.isfinite(ref)
        assert np.array_equal(np.isfinite(ours), fin), f"case {i}"
        err = np.abs(ours[fin].astype(np.float64) - ref[fin])
        assert np.all(err <= 1e-6 * np.abs(ref[fin])), (
            f"log_softmax case {i}: worst {err.max()}")


def test_top_p(harness):
    for i, rng, lp in transform_cases(1):
        p = f32(rng.choice([rng.uniform(0.01, 0.999), 0.5, 0.9, 0.95]))
        ours = harness({"op": "top_p", "logits": to_json(lp), "top_p": p})
        ref = np.array(su.apply_top_p(mx.array(lp), p))
        assert_same(from_json(ours["values"]), ref, f"top_p case {i} p={p}")


def test_min_p(harness):
    for i, rng, lp in transform_cases(2):
        n = lp.size
        m = f32(rng.choice([rng.uniform(0.001, 1.0), 0.05, 1.0]))
        keep = int(rng.choice([1, 1, 2, 3, int(rng.integers(1, n + 1))]))
        keep = min(keep, n)
        ours = harness({"op": "min_p", "logits": to_json(lp), "min_p": m,
                        "min_tokens_to_keep": keep})
        ref = np.array(su.apply_min_p(mx.array(lp), m, keep))
        assert_same(from_json(ours["values"]), ref,
                    f"min_p case {i} min_p={m} keep={keep}")


def test_top_k(harness):
    for i, rng, lp in transform_cases(3):
        n = lp.size
        k = int(rng.choice([1, 2, int(rng.integers(1, n))])) if n > 2 else 1
        ours = harness({"op": "top_k", "logits": to_json(lp), "top_k": k})
        ref = np.array(su.apply_top_k(mx.array(lp), k))
        assert_same(from_json(ours["values"]), ref, f"top_k case {i} k={k}")


def test_top_k_at_least_vocab_keeps_everything(harness):
    # mlx raises for k >= vocab; Spindle treats it as "keep all".
    lp = mlx_logprobs(np.array([0.5, 1.0, -2.0], dtype=np.float32))
    ours = harness({"op": "top_k", "logits": to_json(lp), "top_k": 3})
    assert np.array_equal(from_json(ours["values"]), lp)


def test_xtc(harness):
    for i, rng, lp in transform_cases(4):
        n = lp.size
        thr = f32(rng.choice([rng.uniform(0.0, 0.5), 0.1, 0.0, 0.5]))
        special = sorted(set(rng.integers(0, n, int(rng.integers(0, 3)))
                             .tolist()))
        # The largest token is a likely victim; protect it sometimes.
        if i % 3 == 0:
            special = sorted(set(special) | {int(np.argmax(lp))})
        ours = harness({"op": "xtc", "logits": to_json(lp),
                        "xtc_threshold": thr, "xtc_special": special})
        # probability 1: mlx applies the mask whatever the uniform draw.
        ref = np.array(su.apply_xtc(mx.array(lp), 1.0, thr, special))
        assert_same(from_json(ours["values"]), ref,
                    f"xtc case {i} thr={thr} special={special}")


def random_processor_params(rng, n):
    req = {}
    if rng.random() < 0.6:
        ids = rng.choice(n, size=min(n, int(rng.integers(1, 5))),
                         replace=False)
        req["logit_bias"] = [[int(t), f32(rng.normal(0, 5))] for t in ids]
    for name in ("repetition", "presence", "frequency"):
        if rng.random() < 0.7:
            if name == "repetition":
                pen = rng.choice([rng.uniform(0.5, 2.0), 1.0, 1.3])
            else:
                pen = rng.uniform(-1.5, 1.5)
            req[f"{name}_penalty"] = f32(pen)
            req[f"{name}_context_size"] = int(
                rng.choice([0, 1, 3, 20, 20, 100]))
    # Repeats come from drawing the history from a small pool of ids.
    pool = rng.choice(n, size=min(n, 6), replace=False)
    req["history"] = [int(t) for t in
                      rng.choice(pool, size=int(rng.integers(0, 60)))]
    return req


def mlx_processed(logits, req):
    kwargs = {}
    if "logit_bias" in req:
        kwargs["logit_bias"] = {t: b for t, b in req["logit_bias"]}
    for name in ("repetition", "presence", "frequency"):
        if f"{name}_penalty" in req:
            kwargs[f"{name}_penalty"] = req[f"{name}_penalty"]
            kwargs[f"{name}_context_size"] = req[f"{name}_context_size"]
    procs = su.make_logits_processors(**kwargs)
    out = mx.array(logits)[None]
    tokens = mx.array(req["history"], dtype=mx.int32)
    for proc in procs:
        # generate_step hands the processors a non-empty history; with an
        # empty one the penalties are no-ops in both.
        out = proc(tokens, out)
    return np.array(out[0])


def test_logits_processors(harness):
    rng = np.random.default_rng(5)
    for i in range(N_CASES):
        logits = random_logits(rng, i)
        req = random_processor_params(rng, logits.size)
        ours = harness({"op": "processors", "logits": to_json(logits), **req})
        ref = mlx_processed(logits, req)
        assert_same(from_json(ours["values"]), ref,
                    f"processors case {i} {json.dumps(req)[:300]}")


def random_sampler_params(rng, n):
    params = {"temperature": f32(rng.choice([0.3, 0.7, 1.0, 1.5]))}
    if rng.random() < 0.5:
        params["top_p"] = f32(rng.uniform(0.05, 0.99))
    if rng.random() < 0.5:
        params["min_p"] = f32(rng.uniform(0.001, 0.5))
        params["min_tokens_to_keep"] = int(rng.integers(1, min(n, 4) + 1))
    if rng.random() < 0.4:
        params["xtc_probability"] = 1.0
        params["xtc_threshold"] = f32(rng.uniform(0.0, 0.5))
        params["xtc_special"] = [int(rng.integers(0, n))]
    if rng.random() < 0.5 and n > 2:
        params["top_k"] = int(rng.integers(1, n))
    return params


def mlx_chain(logprobs, params):
    sampler = su.make_sampler(
        temp=params["temperature"], top_p=params.get("top_p", 0.0),
        min_p=params.get("min_p", 0.0),
        min_tokens_to_keep=params.get("min_tokens_to_keep", 1),
        top_k=params.get("top_k", 0),
        xtc_probability=params.get("xtc_probability", 0.0),
        xtc_threshold=params.get("xtc_threshold", 0.1),
        xtc_special_tokens=params.get("xtc_special"))
    # The filters make_sampler chained, in its order (the closure holds
    # them); only the final random draw is left out.
    cells = dict(zip(sampler.__code__.co_freevars,
                     (c.cell_contents for c in sampler.__closure__)))
    out = mx.array(logprobs)
    for method in cells["sampling_methods"]:
        out = method(out)
    return np.array(out)


def assert_logprob(ours, ref, what):
    # Spindle repeats mlx's float32 log-softmax (its exp and summation
    # order), so the values agree far inside the 1e-6 relative asked for.
    assert abs(ours - ref) <= 1e-6 * abs(ref), (what, ours, ref)


def test_chain_matches_make_sampler(harness):
    rng = np.random.default_rng(6)
    for i in range(N_CASES):
        logits = random_logits(rng, i)
        req = {**random_processor_params(rng, logits.size),
               **random_sampler_params(rng, logits.size)}
        ours = from_json(harness({"op": "chain", "logits": to_json(logits),
                                  **req})["values"])
        processed = mlx_processed(logits, req)
        ref = mlx_chain(mlx_logprobs(processed), req)
        fin = np.isfinite(ref)
        assert np.array_equal(np.isfinite(ours), fin), (
            f"chain case {i}: kept sets differ {json.dumps(req)[:300]}")
        for o, r in zip(ours[fin], ref[fin]):
            assert_logprob(float(o), float(r), f"chain case {i}")


def test_sampled_logprob_is_mlx_log_softmax(harness):
    rng = np.random.default_rng(7)
    for i in range(N_CASES):
        logits = random_logits(rng, i)
        req = {**random_processor_params(rng, logits.size),
               **random_sampler_params(rng, logits.size)}
        if i % 4 == 0:
            req["temperature"] = 0.0
        req["seed"] = i
        reply = harness({"op": "sample", "logits": to_json(logits),
                         "n_samples": 8, **req})
        processed = mlx_processed(logits, req)
        lp = mlx_logprobs(processed)
        if req["temperature"] == 0.0:
            allowed = np.zeros(lp.size, dtype=bool)
            allowed[int(np.array(mx.argmax(mx.array(lp))))] = True
        else:
            allowed = np.isfinite(mlx_chain(lp, req))
        for tok, val in zip(reply["tokens"], reply["logprobs"]):
            assert allowed[tok], f"case {i}: token {tok} was filtered by mlx"
            assert_logprob(val, float(lp[tok]), f"sample {i} token {tok}")


def test_same_seed_same_tokens_different_seed_differs(harness):
    logits = np.random.default_rng(8).normal(0, 1, 500).astype(np.float32)
    base = {"op": "sample", "logits": to_json(logits), "temperature": 1.0,
            "top_p": f32(0.95), "n_samples": 64}
    a = harness({**base, "seed": 11})["tokens"]
    b = harness({**base, "seed": 11})["tokens"]
    c = harness({**base, "seed": 12})["tokens"]
    assert a == b
    assert a != c
