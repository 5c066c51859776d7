"""GGUF parity for the dense families llama.cpp supports: Spindle against
llama.cpp (llama-cpp-python) on the same tiny GGUF files.

Each file is written by tests/gguf_writer.py (the `gguf` package, with
llama.cpp's converter's tensor names, q/k permutation and metadata keys)
from a float model of make_dense_models.py; both engines run it, llama.cpp
in its f32 configuration (tests/llama_cpp_ref.py). Cases cover each
architecture's own GGUF form:
  smollm3  NoPE every 4th layer (llama.cpp's fixed interval), permuted q/k;
  phi3     attn_qkv and the double-width ffn_up, rope.dimension_count 24 of
           32 (partial rotary);
  olmo2    post_attention_norm / post_ffw_norm, full-width q/k norms;
  olmo3    the same file architecture with attention.sliding_window 8 and
           a per-layer sliding_window_pattern, yarn on the full layers;
  granite  the four *_scale keys;
  mistral3 yarn rope and attention.temperature_scale over
           rope.scaling.original_context_length.
Weights are F32 (llama.cpp's f32 kernels: both sides exact up to summation
order) and, for two models, Q8_0. On Q8_0 llama.cpp rounds the
activations of every product to Q8_0 blocks (measured here: 0.05-0.10 of
the logit std), Spindle's default precision does not (exact-equivalent),
so a Q8_0 file is held to llama.cpp on its exact twin, an F32 file of the
same dequantized values (gguf_writer's `dequantized`), and to llama.cpp on
the Q8_0 file itself only within Q8_0_LOOSE.

Checks, per prompt (make_models.PROMPTS; 32 generated tokens):
  (a) last-prompt logits: max |spindle - llama.cpp| / std(llama.cpp)
      <= TOL (1e-4; measured ~5e-6);
  (b) greedy tokens identical to llama.cpp's greedy continuation, up to a
      step where llama.cpp's own top-1 margin is below
      TIE_FACTOR * TOL * std of the last-prompt logits (a near-tie).
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import make_dense_models as dm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_DENSE_PARITY_DIR", dm.DEFAULT_OUT))
THREADS = int(os.environ.get("SPINDLE_THREADS", "2"))
N_GEN = dm.MAX_TOKENS
N_CTX = 128
TOL = 1e-4
Q8_0_LOOSE = 0.2
TIE_FACTOR = 2.0

CASES = [
    ("smollm3-bf16", "f32"),
    ("phi3-bf16", "f32"),
    ("olmo2-f32", "f32"),
    ("olmo2-f32", "q8_0"),
    ("olmo3-f32-yarn", "f32"),
    ("granite-f32", "f32"),
    ("granite-f32", "q8_0"),
    ("ministral3-f32", "f32"),
]


@pytest.fixture(scope="module")
def dense_models(spindle_bin):  # noqa: F811
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    return pc.ensure_models(OUT, dm)


@pytest.fixture(scope="module", params=CASES,
                ids=[f"{m}-{q}" for m, q in CASES])
def gguf_case(request, dense_models, tmp_path_factory):
    """The GGUF file of one case and llama.cpp contexts on it ("llm") and
    on its exact F32 twin ("exact"; the same one for F32 files)."""
    import gguf_writer
    import llama_cpp
    import llama_cpp_ref
    name, qtype = request.param
    d = tmp_path_factory.mktemp("gguf")
    path = gguf_writer.write_gguf(dense_models / name,
                                  str(d / f"{name}-{qtype}.gguf"), qtype)
    llm = llama_cpp_ref.f32_llama(llama_cpp, path, N_CTX, THREADS)
    exact = llm
    if qtype != "f32":
        twin = gguf_writer.write_gguf(dense_models / name,
                                      str(d / f"{name}-{qtype}-exact.gguf"),
                                      qtype, dequantized=True)
        exact = llama_cpp_ref.f32_llama(llama_cpp, twin, N_CTX, THREADS)
    yield {"path": path, "llm": llm, "exact": exact, "qtype": qtype,
           "name": name}
    llm.close()
    if exact is not llm:
        exact.close()


def spindle_run(bin_path, path, ids, tmp_path):
    npy = tmp_path / "logits.npy"
    r = subprocess.run(
        [str(bin_path), "run", "-m", str(path), "--prompt-tokens",
         ",".join(map(str, ids)), "-n", str(N_GEN), "--ignore-eos", "--json",
         "--dump-logits", str(npy), "-t", str(THREADS)],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return np.load(npy).astype(np.float64), json.loads(r.stdout)["tokens"]


def rel_err(got, ref):
    return float(np.max(np.abs(got - ref)) / np.std(ref))


@pytest.mark.parametrize("prompt", sorted(dm.PROMPTS))
def test_dense_gguf_parity(spindle_bin, gguf_case, prompt,  # noqa: F811
                           tmp_path):
    import llama_cpp_ref
    ids = dm.PROMPTS[prompt]
    label = f"{gguf_case['name']}/{gguf_case['qtype']}/{prompt}"
    ref, ref_tokens, margins = llama_cpp_ref.greedy_reference(
        gguf_case["exact"], ids, N_GEN)
    got, tokens = spindle_run(spindle_bin, gguf_case["path"], ids, tmp_path)
    assert got.shape == ref.shape
    err = rel_err(got, ref)
    print(f"{label}: max|err|/std {err:.3g} vs llama.cpp (exact weights)")
    assert err <= TOL, f"logits off llama.cpp's by {err:.4g} of their std"
    if gguf_case["exact"] is not gguf_case["llm"]:
        llm_ref, _, _ = llama_cpp_ref.greedy_reference(gguf_case["llm"], ids,
                                                       1)
        loose = rel_err(got, llm_ref)
        print(f"{label}: max|err|/std {loose:.3g} vs llama.cpp on the "
              f"{gguf_case['qtype']} file")
        assert loose <= Q8_0_LOOSE, f"off llama.cpp's Q8_0 run by {loose:.4g}"

    std = float(np.std(ref))
    for i, (a, b) in enumerate(zip(tokens, ref_tokens)):
        if a == b:
            continue
        assert margins[i] < TIE_FACTOR * TOL * std, (
            f"token {i}: spindle {a}, llama.cpp {b} with top-1 margin "
            f"{margins[i]:.4g} (no near-tie)\n  spindle   {tokens}\n"
            f"  llama.cpp {ref_tokens}")
        print(f"  diverged at token {i} (near-tie, margin {margins[i]:.3g})")
        break
    assert len(tokens) == N_GEN
