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
order) and, for one model per kind of layer, Q8_0 (llama.cpp quantizes
activations to Q8_0 for those products, as Spindle's decode does; its
prefill keeps them exact).

Checks, per prompt (make_models.PROMPTS; 32 generated tokens):
  (a) last-prompt logits: max |spindle - llama.cpp| / std(llama.cpp) within
      TOL[type];
  (b) greedy tokens identical to llama.cpp's greedy continuation, up to a
      step where llama.cpp's own top-1 margin is below
      TIE_FACTOR * TOL[type] * std of that step (a near-tie).
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
# Measured max|err|/std: F32 up to ~2e-6, Q8_0 up to ~1e-2 (see the module
# docstring for why Q8_0 is not exact on llama.cpp's side).
TOL = {"f32": 1e-4, "q8_0": 5e-2}
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
    """(GGUF path, llama.cpp context) of one case, written once."""
    import gguf_writer
    import llama_cpp
    import llama_cpp_ref
    name, qtype = request.param
    path = tmp_path_factory.mktemp("gguf") / f"{name}-{qtype}.gguf"
    gguf_writer.write_gguf(dense_models / name, str(path), qtype)
    llm = llama_cpp_ref.f32_llama(llama_cpp, path, N_CTX, THREADS)
    yield {"path": path, "llm": llm, "qtype": qtype, "name": name}
    llm.close()


def spindle_run(bin_path, path, ids, tmp_path):
    npy = tmp_path / "logits.npy"
    r = subprocess.run(
        [str(bin_path), "run", "-m", str(path), "--prompt-tokens",
         ",".join(map(str, ids)), "-n", str(N_GEN), "--ignore-eos", "--json",
         "--dump-logits", str(npy), "-t", str(THREADS)],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return np.load(npy).astype(np.float64), json.loads(r.stdout)["tokens"]


@pytest.mark.parametrize("prompt", sorted(dm.PROMPTS))
def test_dense_gguf_parity(spindle_bin, gguf_case, prompt,  # noqa: F811
                           tmp_path):
    import llama_cpp_ref
    ids = dm.PROMPTS[prompt]
    tol = TOL[gguf_case["qtype"]]
    ref, ref_tokens, margins = llama_cpp_ref.greedy_reference(
        gguf_case["llm"], ids, N_GEN)
    got, tokens = spindle_run(spindle_bin, gguf_case["path"], ids, tmp_path)
    assert got.shape == ref.shape
    err = float(np.max(np.abs(got - ref)) / np.std(ref))
    print(f"{gguf_case['name']}/{gguf_case['qtype']}/{prompt}: "
          f"max|err|/std {err:.3g} (tolerance {tol:.3g})")
    assert err <= tol, f"logits off llama.cpp's by {err:.4g} of their std"

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
    assert len(tokens) == N_GEN
