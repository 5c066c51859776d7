"""GGUF parity for the hybrid families: Spindle against llama.cpp
(llama-cpp-python) on the same tiny GGUF files, llama.cpp's "qwen35",
"qwen35moe" and "qwen3next" architectures.

Each file is written by tests/gguf_writer.py from a float model of
make_hybrid_models.py (Qwen3.5 MoE: make_hybrid_moe_models.py), in the form llama.cpp's converter gives it
(conversion/qwen.py): ssm_* tensors, A_log stored as ssm_a = -exp(A_log),
dt_bias as ssm_dt.bias, conv1d as [channels, kernel] in F32, Qwen3.5's
value heads tiled over the key heads (2 key heads for 4 value heads here),
Qwen3-Next's in_proj_qkvz regrouped into attn_qkv and attn_gate and its
experts stacked. Both engines run the file, llama.cpp in its f32
configuration (tests/llama_cpp_ref.py); the checks are test_dense_gguf.py's
(parity_common.assert_gguf_parity): last-prompt logits within TOL of
llama.cpp on the exact F32 twin, greedy tokens up to a near-tie. The
100-token prompt runs both engines' chunked delta rule over two chunks.

On Q8_0 / Q4_0 files llama.cpp also rounds every product's activations to
Q8_0 blocks, which Spindle in precision high (the suite's pin) does not: against llama.cpp
on the quantized file itself Spindle is held to LOOSE only (measured
0.07-0.2 of the logit std; llama.cpp on the quantized file is that far
from mlx-lm too, while Spindle and llama.cpp on the exact twin agree to
~5e-6).
"""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_hybrid_models as hm  # noqa: E402
import make_hybrid_moe_models as qm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_HYBRID_PARITY_DIR", hm.DEFAULT_OUT))
MOE_OUT = Path(os.environ.get("SPINDLE_HYBRID_MOE_PARITY_DIR", qm.DEFAULT_OUT))
THREADS = int(os.environ.get("SPINDLE_THREADS", "2"))
N_GEN = hm.MAX_TOKENS
N_CTX = 256
TOL = 1e-4
LOOSE = 0.5

# (model, GGUF type, bound against llama.cpp on the quantized file itself)
CASES = [
    ("qwen3_5-f32", "f32", None),
    ("qwen3_5-f32", "q8_0", LOOSE),
    ("qwen3_5-f32", "q4_0", LOOSE),
    ("qwen3_next-f32", "f32", None),
    # llama.cpp's Q8_0 activations flip a top-2 expert choice on the
    # 40-token prompt, moving its logits 2.5 std from mlx-lm's and
    # Spindle's alike: only the exact twin is a reference there.
    ("qwen3_next-f32", "q8_0", None),
    # qwen35moe: Qwen3.5's tiled value heads with the experts of every layer
    ("qwen3_5_moe-f32", "f32", None),
    ("qwen3_5_moe-f32", "q8_0", None),
]


@pytest.fixture(scope="module")
def hybrid_models(spindle_bin):  # noqa: F811
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")

    def model_dir(name):
        gen, out = (qm, MOE_OUT) if name.startswith("qwen3_5_moe") else (hm, OUT)
        return pc.ensure_models(out, gen) / name
    return model_dir


@pytest.fixture(scope="module", params=CASES,
                ids=[f"{m}-{q}" for m, q, _ in CASES])
def gguf_case(request, hybrid_models, tmp_path_factory):
    name, qtype, loose = request.param
    case = pc.open_gguf_case(hybrid_models(name), qtype,
                             tmp_path_factory.mktemp("gguf"), N_CTX, THREADS)
    case["loose"] = loose
    yield case
    pc.close_gguf_case(case)


@pytest.mark.parametrize("prompt", sorted(hm.PROMPTS))
def test_hybrid_gguf_parity(spindle_bin, gguf_case, prompt,  # noqa: F811
                            tmp_path):
    pc.assert_gguf_parity(spindle_bin, gguf_case, hm.PROMPTS[prompt], N_GEN,
                          THREADS, tmp_path, TOL, gguf_case["loose"])
