"""Qwen3-MoE GGUF files: Spindle against llama.cpp (llama-cpp-python).

The GGUFs are written from make_moe_models.py's qmoe-f32 model (every layer
MoE, norm_topk_prob true: what llama.cpp's qwen3moe computes) by
tests/gguf_writer.py (its qwen3_moe entry), with the gguf package: architecture
qwen3moe, stacked experts as ffn_{gate,up,down}_exps (3-D), the router
ffn_gate_inp in F32, every other matrix F32, F16, Q8_0 or Q4_0. llama.cpp
runs in its f32 configuration (tests/llama_cpp_ref.py).

Per file and prompt (the parity suite's 1/7/40-token prompts, so prefill
groups several rows per expert): the last-prompt-position logits, centered,
max |error| / std of llama.cpp's within the tolerance, and 32 greedy tokens
(EOS ignored) identical to llama.cpp's up to a near-tie (llama.cpp's top-1
margin below TIE_FACTOR * tolerance * std). Tolerances:
  * F32: 1e-4 (summation order only; measured 1-5e-6);
  * F16: 1e-2 (llama.cpp rounds the activations to f16 before every F16
    product, Spindle keeps them in f32; measured 2-4e-3);
  * Q8_0 / Q4_0: Spindle in SPINDLE_PRECISION=fast, which quantizes the
    activations exactly as llama.cpp does (q8_0 blocks, integer dots):
    1e-4 (measured 2-5e-7). In Spindle's default mode (activations split
    into three int8 parts, near-exact) the difference is llama.cpp's own
    q8 rounding, 0.05-0.35 of the std here, so only the logits are checked
    there, against the realmodels suite's 0.45.

And `spindle convert --dtype f32` of the Q8_0 / Q4_0 files (2-D Q8_0
matrices become MLX 8-bit g32 losslessly, everything else, the 3-D
experts included, its exact dequantization; config.json gets the expert
keys llama.cpp implies) must load in mlx-lm's qwen3_moe and give, in f32,
the logits Spindle computes on the GGUF itself in SPINDLE_PRECISION=exact:
1e-4 (measured 2-4e-6). Exact math on both sides, independent of
llama.cpp's rounding.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS (2).
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "realmodels"))
sys.path.insert(0, str(ROOT / "tests"))
import make_moe_models as mo  # noqa: E402
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from llama_cpp_ref import f32_llama, greedy_reference  # noqa: E402
from test_convert import TOL_REL, convert, load_f32  # noqa: E402

SOURCE = "qmoe-f32"
N_GEN = mo.MAX_TOKENS
N_CTX = 128
THREADS = os.environ.get("SPINDLE_THREADS", "2")
# type -> (SPINDLE_PRECISION or None for the environment's, tolerance,
# whether greedy tokens are compared)
CHECKS = {
    "f32": [(None, 1e-4, True)],
    "f16": [(None, 1e-2, True)],
    "q8_0": [("fast", 1e-4, True), (None, 0.45, False)],
    "q4_0": [("fast", 1e-4, True), (None, 0.45, False)],
}
CASES = [(t, p) for t in CHECKS for p in mo.PROMPTS]


@pytest.fixture(scope="session")
def ggufs(spindle_bin, tmp_path_factory):  # noqa: F811
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    import gguf_writer
    src = tp.ensure_models(Path(os.environ.get("SPINDLE_MOE_PARITY_DIR",
                                               mo.DEFAULT_OUT)), mo) / SOURCE
    out = tmp_path_factory.mktemp("moe-gguf")
    return {t: gguf_writer.write_gguf(str(src), str(out / f"{t}.gguf"), t)
            for t in CHECKS}


@pytest.fixture(scope="session")
def llama_runs(ggufs):
    """llama.cpp's (logits, tokens, margins) per (type, prompt name)."""
    import llama_cpp
    runs = {}
    for t, path in ggufs.items():
        llm = f32_llama(llama_cpp, path, N_CTX, int(THREADS))
        for name, ids in mo.PROMPTS.items():
            runs[t, name] = greedy_reference(llm, ids, N_GEN)
        llm.close()
    return runs


def spindle_run(path, ids, precision, tmp_path):
    npy = tmp_path / "logits.npy"
    env = dict(os.environ)
    if precision:
        env["SPINDLE_PRECISION"] = precision
    r = subprocess.run(
        [str(tp.SPINDLE_BIN), "run", "-m", str(path), "--prompt-tokens",
         ",".join(map(str, ids)), "-n", str(N_GEN), "--ignore-eos", "--json",
         "--dump-logits", str(npy), "-t", THREADS],
        capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    return np.load(npy).astype(np.float64), json.loads(r.stdout)["tokens"]


@pytest.mark.parametrize("qtype,prompt", CASES,
                         ids=[f"{t}-{p}" for t, p in CASES])
def test_moe_gguf_vs_llama_cpp(ggufs, llama_runs, qtype, prompt, tmp_path):
    ref_logits, ref_tokens, margins = llama_runs[qtype, prompt]
    sd = float(np.std(ref_logits))
    errors = []
    for precision, tol, tokens_too in CHECKS[qtype]:
        label = f"{qtype}/{prompt} precision {precision or 'default'}"
        logits, tokens = spindle_run(ggufs[qtype], mo.PROMPTS[prompt],
                                     precision, tmp_path)
        diff = (logits - logits.mean()) - (ref_logits - ref_logits.mean())
        rel = float(np.max(np.abs(diff))) / sd
        print(f"  {label}: centered logit err/std {rel:.3g} (tol {tol})")
        if not rel <= tol:
            errors.append(f"{label}: logit err/std {rel:.4g} > {tol}")
        if not tokens_too:
            continue
        stop = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens))
                     if a != b), None)
        if len(tokens) != N_GEN:
            errors.append(f"{label}: {len(tokens)} tokens, want {N_GEN}")
        elif stop is not None and \
                margins[stop] >= tp.TIE_FACTOR * tol * sd:
            errors.append(f"{label}: token {stop} is {tokens[stop]}, "
                          f"llama.cpp {ref_tokens[stop]} with margin "
                          f"{margins[stop]:.4g} (no near-tie)\n"
                          f"  got      {tokens}\n  expected {ref_tokens}")
        elif stop is not None:
            print(f"  {label}: near-tie at token {stop} "
                  f"(margin {margins[stop]:.3g}), accepted")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0"])
def test_moe_gguf_convert_vs_mlx(ggufs, qtype, tmp_path):
    import mlx.core as mx
    model = load_f32(convert(tp.SPINDLE_BIN, ggufs[qtype], tmp_path / "hf",
                             "--dtype", "f32"))
    for name, ids in mo.PROMPTS.items():
        want = np.array(model(mx.array([ids]))[0, -1].astype(mx.float32),
                        dtype=np.float64)
        got, _ = spindle_run(ggufs[qtype], ids, "exact", tmp_path)
        rel = float(np.max(np.abs(got - want)) / np.std(want))
        print(f"  {qtype}/{name}: spindle exact vs mlx-lm on the converted "
              f"dir: err/std {rel:.3g}")
        assert rel <= TOL_REL, f"{qtype}/{name}: err/std {rel:.4g}"
