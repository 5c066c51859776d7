"""Oracle parity: Spindle against mlx-lm on tiny random-weight models.

The models and references come from make_models.py (mlx / mlx-lm's own code).
For every model x prompt, `spindle run` must
  (a) generate the reference's greedy tokens, up to the first position where
      they differ, and there the reference's top-1 - top-2 margin must be a
      near-tie (< TIE_FACTOR * logit tolerance * that step's logit std);
  (b) dump last-prompt-position logits within a relative tolerance
      (max abs error / std of the reference logits).

Two mlx references are checked, both computed by mlx_lm.generate_step:
  * "f32": the same weights upcast to float32 (bf16/f16 values and quantized
    scales/biases convert exactly; the packed codes are untouched).  This is
    what Spindle computes -- f32 activations, f32 accumulation, f32 KV cache --
    so it is held to TOL_F32_REL.
  * "native": the model in its stored dtype, as mlx-lm would run it.  mlx
    keeps activations in bf16/f16 there (and on CPU its bf16 quantized matmul
    also rounds partial sums), so the native result is itself off from the
    f32 one by a gap that make_models.py measures per model
    (gap_rel_native_vs_f32, max over the prompts).  Tolerance:
    max(NATIVE_FACTOR * gap, TOL_F32_REL).  Typical gaps (mlx 0.32 CPU): f16
    ~1e-2, bf16 ~5e-2, bf16-scaled quantized 0.15-0.35 of the logit std.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS (passed as
-t), SPINDLE_PARITY_DIR (default tests/.work/parity).
"""

import fcntl
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)

SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", REPO / "build" / "spindle"))
OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
N_TOKENS = mm.MAX_TOKENS

# Spindle vs mlx, both in f32: only summation order and libm differ.  Those
# are ~1e-6 of the logit std for these 2-3 layer models; 1e-4 leaves two
# orders of magnitude and still catches any real bug (a wrong rope frequency,
# a missing bias or a mis-decoded quantized row moves logits by >1e-2).
TOL_F32_REL = 1e-4
# Headroom over mlx's own native-vs-f32 gap: that gap is a max over three
# prompts' last positions; decode steps and other prompts can exceed it.
NATIVE_FACTOR = 4.0
# Two logits each off by up to tol can swap when they are < 2 tol apart.
TIE_FACTOR = 2.0

CASES = [(s["name"], p) for s in mm.SPECS for p in mm.PROMPTS]


def _stamp_ok():
    try:
        stamp = json.loads((OUT / mm.STAMP_FILE).read_text())
    except (OSError, ValueError):
        return False
    return (stamp.get("source_sha256") == mm.source_hash()
            and stamp.get("mlx") == importlib.metadata.version("mlx")
            and stamp.get("mlx_lm") == importlib.metadata.version("mlx-lm")
            and all((OUT / s["name"] / "reference.json").exists()
                    for s in mm.SPECS))


@pytest.fixture(scope="session")
def spindle_bin():
    # mlx missing is an error even before the binary exists: CI installs it.
    missing = [m for m in ("mlx", "mlx_lm")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"parity references need {', '.join(missing)} "
                    f"(pip install -r tests/requirements.txt)")
    if not SPINDLE_BIN.is_file():
        pytest.skip(f"spindle binary not found at {SPINDLE_BIN} "
                    f"(build it or set SPINDLE_BIN)")
    return SPINDLE_BIN


@pytest.fixture(scope="session")
def models_dir(spindle_bin):
    """The model set, rebuilt when make_models.py or mlx changed."""
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT.parent / f".{OUT.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder among xdist workers
        if not _stamp_ok():
            r = subprocess.run(
                [sys.executable, str(HERE / "make_models.py"), "--out",
                 str(OUT), "--quiet"],
                capture_output=True, text=True, timeout=900)
            if r.returncode != 0 or not _stamp_ok():
                pytest.fail("make_models.py failed:\n" + r.stdout[-3000:]
                            + r.stderr[-3000:])
    return OUT


_runs = {}


def run_spindle(bin_path, model_dir, prompt, tmp_dir):
    key = (str(model_dir), tuple(prompt))
    if key in _runs:
        return _runs[key]
    dump = tmp_dir / f"{model_dir.name}-{len(prompt)}.npy"
    cmd = [str(bin_path), "run", "-m", str(model_dir), "--prompt-tokens",
           ",".join(map(str, prompt)), "-n", str(N_TOKENS), "--json",
           "--dump-logits", str(dump)]
    if os.environ.get("SPINDLE_THREADS"):
        cmd += ["-t", os.environ["SPINDLE_THREADS"]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"{' '.join(cmd)}\nexit {r.returncode}\n{r.stderr[-4000:]}")
    try:
        out = json.loads(r.stdout)
    except ValueError as e:
        pytest.fail(f"stdout is not one JSON object ({e}):\n{r.stdout[:2000]}")
    for k in ("prompt_tokens", "tokens", "stats"):
        assert k in out, f"JSON output lacks '{k}': {sorted(out)}"
    assert out["prompt_tokens"] == prompt, "prompt_tokens echo differs"
    _runs[key] = (out, dump)
    return _runs[key]


def load_ref(models, name):
    return json.loads((models / name / "reference.json").read_text())


def native_tol(ref):
    return max(NATIVE_FACTOR * ref["gap_rel_native_vs_f32"], TOL_F32_REL)


def check_tokens(got, ref, tol, label):
    """None if `got` agrees with reference `ref` (one kind), else why not."""
    want = list(ref["tokens"])
    if ref["eos_token"] is not None:
        want.append(ref["eos_token"])  # Spindle may report the EOS it hit
    n_ref = len(ref["tokens"])
    # A shorter output without the EOS id means Spindle stopped there, i.e.
    # it picked an EOS where the reference picked something else.
    stop = len(got) if len(got) < n_ref else None
    for i in range(min(len(got), len(want))):
        if got[i] != want[i]:
            stop = i
            break
    if stop is None:
        if len(got) in (n_ref, len(want)):
            return None
        return (f"{label}: {len(got)} tokens, reference stopped on EOS "
                f"{ref['eos_token']} after {n_ref}\n"
                f"  got      {got}\n  expected {want}")
    m, sd = ref["margins"][stop], ref["step_std"][stop]
    thr = TIE_FACTOR * tol * sd
    what = (f"token {stop} is {got[stop]}" if stop < len(got)
            else f"stopped after {stop} tokens")
    if m < thr:
        print(f"  {label}: {what}, reference {want[stop]}: near-tie "
              f"(margin {m:.3g} < {thr:.3g}), accepted")
        return None
    return (f"{label}: {what}, reference {want[stop]}; reference margin "
            f"{m:.4g} is no near-tie (threshold {thr:.3g} = {TIE_FACTOR} * "
            f"{tol:.3g} * std {sd:.3g})\n  got      {got}\n"
            f"  expected {want}")


@pytest.mark.parametrize("model,prompt", CASES,
                         ids=[f"{m}-{p}" for m, p in CASES])
def test_greedy_tokens(spindle_bin, models_dir, tmp_path_factory, model,
                       prompt):
    ref = load_ref(models_dir, model)
    entry = ref["prompts"][prompt]
    out, _ = run_spindle(spindle_bin, models_dir / model,
                         entry["prompt_tokens"],
                         tmp_path_factory.getbasetemp())
    got = [int(t) for t in out["tokens"]]
    errors = [e for e in (
        check_tokens(got, entry["f32"], TOL_F32_REL, "mlx f32-upcast"),
        check_tokens(got, entry["native"], native_tol(ref),
                     f"mlx native {ref['dtype']}"),
    ) if e]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("model,prompt", CASES,
                         ids=[f"{m}-{p}" for m, p in CASES])
def test_last_logits(spindle_bin, models_dir, tmp_path_factory, model,
                     prompt):
    ref = load_ref(models_dir, model)
    entry = ref["prompts"][prompt]
    _, dump = run_spindle(spindle_bin, models_dir / model,
                          entry["prompt_tokens"],
                          tmp_path_factory.getbasetemp())
    assert dump.exists(), f"--dump-logits did not write {dump}"
    got = np.load(dump)
    vocab = json.loads((models_dir / model / "config.json").read_text())[
        "vocab_size"]
    assert got.dtype == np.float32 and got.shape == (vocab,), \
        f"logits dump is {got.dtype} {got.shape}, want float32 ({vocab},)"
    assert np.all(np.isfinite(got)), "non-finite logits"
    errors = []
    for kind, tol in (("f32", TOL_F32_REL), ("native", native_tol(ref))):
        want = np.load(models_dir / model / entry[kind]["logits_file"])
        err = float(np.max(np.abs(got - want)) / np.std(want))
        worst = int(np.argmax(np.abs(got - want)))
        print(f"  {model}/{prompt} vs mlx {kind}: max|err|/std = {err:.3g} "
              f"(tolerance {tol:.3g})")
        if not err <= tol:
            errors.append(f"vs mlx {kind}: max|err|/std {err:.4g} > {tol:.3g}"
                          f" (worst id {worst}: got {got[worst]:.6g}, "
                          f"want {want[worst]:.6g})")
    assert not errors, "; ".join(errors)
