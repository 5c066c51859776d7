"""What test_parity.py and test_gemma3_parity.py share: the tolerances, the
`spindle_bin` fixture, building a model set under a lock when its generator
changed, running `spindle run`, and the token / logit checks against an mlx
reference (see test_parity.py's docstring for the method).

Named parity_common (not common) so that it cannot collide with another
test directory's helper module in one pytest session.
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

REPO = Path(__file__).resolve().parents[2]
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", REPO / "build" / "spindle"))

# Spindle vs mlx, both in f32: only summation order and libm differ.  Those
# are ~1e-6 of the logit std for these 2-5 layer models; 1e-4 leaves two
# orders of magnitude and still catches any real bug (a wrong rope frequency,
# a missing bias or a mis-decoded quantized row moves logits by >1e-2).
TOL_F32_REL = 1e-4
# Headroom over mlx's own native-vs-f32 gap: that gap is a max over three
# prompts' last positions; decode steps and other prompts can exceed it.
NATIVE_FACTOR = 4.0
# Two logits each off by up to tol can swap when they are < 2 tol apart.
TIE_FACTOR = 2.0


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


def _stamp_ok(out, gen):
    try:
        stamp = json.loads((out / gen.STAMP_FILE).read_text())
    except (OSError, ValueError):
        return False
    return (stamp.get("source_sha256") == gen.source_hash()
            and stamp.get("mlx") == importlib.metadata.version("mlx")
            and stamp.get("mlx_lm") == importlib.metadata.version("mlx-lm")
            and all((out / s["name"] / "reference.json").exists()
                    for s in gen.SPECS))


def ensure_models(out, gen):
    """The model set of generator module `gen` (make_models or
    make_gemma3_models) in `out`, rebuilt when the generator or mlx
    changed."""
    out.mkdir(parents=True, exist_ok=True)
    script = Path(gen.__file__)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder among xdist workers
        if not _stamp_ok(out, gen):
            r = subprocess.run(
                [sys.executable, str(script), "--out", str(out), "--quiet"],
                capture_output=True, text=True, timeout=900)
            if r.returncode != 0 or not _stamp_ok(out, gen):
                pytest.fail(f"{script.name} failed:\n" + r.stdout[-3000:]
                            + r.stderr[-3000:])
    return out


def parity_fixtures(gen, out, models_name="models"):
    """The fixtures of a parity test module over generator module `gen`
    (make_models, make_gemma3_models...) and its model set in `out`: the
    set's directory (named `models_name`; rebuilt when the generator or mlx
    changed) and `case` ((reference, its prompt entry, Spindle's output,
    logits dump) of the parametrized `model` and `prompt`; Spindle runs
    once per pair). Assign both to module names of the same spelling."""
    @pytest.fixture(scope="session", name=models_name)
    def models(spindle_bin):  # noqa: F811
        return ensure_models(out, gen)

    @pytest.fixture(name="case")
    def case(request, spindle_bin, tmp_path_factory, model, prompt):  # noqa: F811
        return run_case(spindle_bin, request.getfixturevalue(models_name),
                        model, prompt, tmp_path_factory.getbasetemp(),
                        gen.MAX_TOKENS)
    return models, case


def parity_cases(gen):
    """(model, prompt) pairs of every model and prompt of `gen`, and ids."""
    cases = [(s["name"], p) for s in gen.SPECS for p in gen.PROMPTS]
    return cases, [f"{m}-{p}" for m, p in cases]


_runs = {}


def run_spindle(bin_path, model_dir, prompt, tmp_dir, n_tokens):
    """`spindle run` greedy on token ids, with the last-position logits
    dumped; (parsed JSON output, dump path), cached per model and prompt."""
    key = (str(model_dir), tuple(prompt))
    if key in _runs:
        return _runs[key]
    dump = tmp_dir / f"{model_dir.name}-{len(prompt)}.npy"
    cmd = [str(bin_path), "run", "-m", str(model_dir), "--prompt-tokens",
           ",".join(map(str, prompt)), "-n", str(n_tokens), "--json",
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


def run_case(bin_path, models, model, prompt, tmp_dir, n_tokens):
    """(reference, its entry for prompt name `prompt`, Spindle's output,
    dump path) of one parametrized case."""
    ref = load_ref(models, model)
    entry = ref["prompts"][prompt]
    out, dump = run_spindle(bin_path, models / model, entry["prompt_tokens"],
                            tmp_dir, n_tokens)
    return ref, entry, out, dump


def assert_prefill_chunks(bin_path, models, model, n_tokens, tmp_dir, chunk=16,
                          prompt="len40"):
    """Prompt `prompt` of `model` in prefill chunks of `chunk` tokens: the
    reference's tokens and last logits, as in one pass."""
    ref = load_ref(models, model)
    entry = ref["prompts"][prompt]
    dump = tmp_dir / "chunked.npy"
    cmd = [str(bin_path), "run", "-m", str(models / model),
           "--prompt-tokens", ",".join(map(str, entry["prompt_tokens"])),
           "-n", str(n_tokens), "--json", "--prefill-chunk", str(chunk),
           "--dump-logits", str(dump)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert_greedy_tokens(json.loads(r.stdout), ref, entry)
    assert_last_logits(dump, models / model, ref, entry, f"{model}/{prompt} chunked")


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


def assert_greedy_tokens(out, ref, entry):
    """Spindle's tokens against both references of one prompt."""
    got = [int(t) for t in out["tokens"]]
    errors = [e for e in (
        check_tokens(got, entry["f32"], TOL_F32_REL, "mlx f32-upcast"),
        check_tokens(got, entry["native"], native_tol(ref),
                     f"mlx native {ref['dtype']}"),
    ) if e]
    assert not errors, "\n".join(errors)


def assert_last_logits(dump, model_dir, ref, entry, label,
                       transform=lambda x: x):
    """Spindle's dumped last-position logits against both references of one
    prompt; `transform` maps a reference's logits to what Spindle must
    give."""
    assert dump.exists(), f"--dump-logits did not write {dump}"
    got = np.load(dump)
    cfg = json.loads((model_dir / "config.json").read_text())
    vocab = cfg.get("text_config", cfg)["vocab_size"]  # multimodal: nested
    assert got.dtype == np.float32 and got.shape == (vocab,), \
        f"logits dump is {got.dtype} {got.shape}, want float32 ({vocab},)"
    assert np.all(np.isfinite(got)), "non-finite logits"
    errors = []
    for kind, tol in (("f32", TOL_F32_REL), ("native", native_tol(ref))):
        want = transform(np.load(model_dir / entry[kind]["logits_file"]))
        err = float(np.max(np.abs(got - want)) / np.std(want))
        worst = int(np.argmax(np.abs(got - want)))
        print(f"  {label} vs mlx {kind}: max|err|/std = {err:.3g} "
              f"(tolerance {tol:.3g})")
        if not err <= tol:
            errors.append(f"vs mlx {kind}: max|err|/std {err:.4g} > {tol:.3g}"
                          f" (worst id {worst}: got {got[worst]:.6g}, "
                          f"want {want[worst]:.6g})")
    assert not errors, "; ".join(errors)


# ---- GGUF parity: Spindle against llama.cpp on the same tiny GGUF file ----
# (test_dense_gguf.py, test_hybrid_gguf.py; the method is described there)

def open_gguf_case(model_dir, qtype, tmp_dir, n_ctx, threads):
    """Write float model directory `model_dir` as a `qtype` GGUF file
    (tests/gguf_writer.py) and open llama.cpp on it ("llm") and on its
    exact F32 twin ("exact": the same dequantized values; the same context
    for an F32 file). Close with close_gguf_case."""
    sys.path.insert(0, str(REPO / "tests"))
    import gguf_writer
    import llama_cpp
    import llama_cpp_ref
    name = Path(model_dir).name
    path = gguf_writer.write_gguf(model_dir, str(tmp_dir / f"{name}-{qtype}.gguf"),
                                  qtype)
    llm = llama_cpp_ref.f32_llama(llama_cpp, path, n_ctx, threads)
    exact = llm
    if qtype != "f32":
        twin = gguf_writer.write_gguf(
            model_dir, str(tmp_dir / f"{name}-{qtype}-exact.gguf"), qtype,
            dequantized=True)
        exact = llama_cpp_ref.f32_llama(llama_cpp, twin, n_ctx, threads)
    return {"path": path, "llm": llm, "exact": exact, "qtype": qtype,
            "name": name}


def close_gguf_case(case):
    case["llm"].close()
    if case["exact"] is not case["llm"]:
        case["exact"].close()


def rel_err(got, ref):
    return float(np.max(np.abs(got - ref)) / np.std(ref))


def assert_gguf_parity(bin_path, case, ids, n_gen, threads, tmp_path, tol,
                       loose, extra_args=()):
    """Spindle on the case's file against llama.cpp: last-prompt logits
    within `tol` of llama.cpp on the exact twin (and within `loose`, unless
    None, of llama.cpp on a quantized file itself, which rounds its
    activations), greedy tokens equal up to a near-tie of llama.cpp's own
    margins. `extra_args` go to `spindle run` (--lora FILE). Returns
    Spindle's last-prompt logits."""
    sys.path.insert(0, str(REPO / "tests"))
    import llama_cpp_ref
    label = f"{case['name']}/{case['qtype']}/{len(ids)} tokens"
    ref, ref_tokens, margins = llama_cpp_ref.greedy_reference(
        case["exact"], ids, n_gen)
    npy = tmp_path / "logits.npy"
    r = subprocess.run(
        [str(bin_path), "run", "-m", str(case["path"]), "--prompt-tokens",
         ",".join(map(str, ids)), "-n", str(n_gen), "--ignore-eos", "--json",
         "--dump-logits", str(npy), "-t", str(threads), *extra_args],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = np.load(npy).astype(np.float64)
    tokens = json.loads(r.stdout)["tokens"]
    assert got.shape == ref.shape
    err = rel_err(got, ref)
    print(f"{label}: max|err|/std {err:.3g} vs llama.cpp (exact weights)")
    assert err <= tol, f"logits off llama.cpp's by {err:.4g} of their std"
    if case["exact"] is not case["llm"] and loose is not None:
        llm_ref, _, _ = llama_cpp_ref.greedy_reference(case["llm"], ids, 1)
        off = rel_err(got, llm_ref)
        print(f"{label}: max|err|/std {off:.3g} vs llama.cpp on the "
              f"{case['qtype']} file")
        assert off <= loose, f"off llama.cpp's {case['qtype']} run by {off:.4g}"
    std = float(np.std(ref))
    for i, (a, b) in enumerate(zip(tokens, ref_tokens)):
        if a == b:
            continue
        assert margins[i] < TIE_FACTOR * tol * std, (
            f"token {i}: spindle {a}, llama.cpp {b} with top-1 margin "
            f"{margins[i]:.4g} (no near-tie)\n  spindle   {tokens}\n"
            f"  llama.cpp {ref_tokens}")
        print(f"  diverged at token {i} (near-tie, margin {margins[i]:.3g})")
        break
    assert len(tokens) == n_gen
    return got
