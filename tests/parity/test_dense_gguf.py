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
the logit std), Spindle's precision high (this suite's conftest pins it) does not (exact-equivalent),
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
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_dense_models as dm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_DENSE_PARITY_DIR", dm.DEFAULT_OUT))
THREADS = int(os.environ.get("SPINDLE_THREADS", "2"))
N_GEN = dm.MAX_TOKENS
N_CTX = 128
TOL = 1e-4
Q8_0_LOOSE = 0.2


def _yarn_mscale_all_dim(cfg):
    """Ministral 3's real yarn: mscale_all_dim 1 (rope.scaling.
    yarn_log_multiplier), which cancels yarn's attention factor."""
    cfg["rope_parameters"]["mscale_all_dim"] = 1.0


# (model, weight type, config edit before writing the GGUF or None): the
# edited files have no mlx-lm reference, only llama.cpp's.
CASES = [
    ("smollm3-bf16", "f32", None),
    ("phi3-bf16", "f32", None),
    ("olmo2-f32", "f32", None),
    ("olmo2-f32", "q8_0", None),
    ("olmo3-f32-yarn", "f32", None),
    ("granite-f32", "f32", None),
    ("granite-f32", "q8_0", None),
    ("ministral3-f32", "f32", None),
    ("ministral3-f32", "f32", _yarn_mscale_all_dim),
]


@pytest.fixture(scope="module")
def dense_models(spindle_bin):  # noqa: F811
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    return pc.ensure_models(OUT, dm)


@pytest.fixture(scope="module", params=CASES,
                ids=[f"{m}-{q}" + (f"-{e.__name__[1:]}" if e else "")
                     for m, q, e in CASES])
def gguf_case(request, dense_models, tmp_path_factory):
    """The GGUF file of one case (its config edited first where the case
    says) and llama.cpp contexts on it and on its exact F32 twin
    (parity_common.open_gguf_case)."""
    name, qtype, edit = request.param
    d = tmp_path_factory.mktemp("gguf")
    src = dense_models / name
    if edit:
        src = d / name
        shutil.copytree(dense_models / name, src)
        cfg = json.loads((src / "config.json").read_text())
        edit(cfg)
        (src / "config.json").write_text(json.dumps(cfg))
    case = pc.open_gguf_case(src, qtype, d, N_CTX, THREADS)
    yield case
    pc.close_gguf_case(case)


@pytest.mark.parametrize("prompt", sorted(dm.PROMPTS))
def test_dense_gguf_parity(spindle_bin, gguf_case, prompt,  # noqa: F811
                           tmp_path):
    pc.assert_gguf_parity(spindle_bin, gguf_case, dm.PROMPTS[prompt], N_GEN,
                          THREADS, tmp_path, TOL, Q8_0_LOOSE)
