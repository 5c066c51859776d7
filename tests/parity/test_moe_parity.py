"""Oracle parity for Qwen3-MoE: Spindle against mlx-lm's qwen3_moe.

Models and references come from make_moe_models.py (mlx / mlx-lm's own
code); the checks and tolerances are test_parity.py's (parity_common.py):
  (a) greedy tokens identical to the reference up to a near-tie;
  (b) last-prompt-position logits within a relative tolerance (max abs error
      / std of the reference logits): TOL_F32_REL against mlx upcast to
      float32, which is what Spindle computes (routing included: float32
      router logits and softmax), and the native tolerance against mlx in
      the stored dtype, whose bf16 router and experts route some rows
      elsewhere (gaps of 0.6 of the logit std for the bf16-scaled 4/8-bit
      models, hence their wide native tolerance; the float32 check is the
      tight one).

A wrong routing (another tie order, softmax over the chosen k instead of
all experts, a missing renormalization) or a mis-sliced expert moves the
logits by far more than 1e-4 of their std.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_MOE_PARITY_DIR (default tests/.work/parity-moe).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_moe_models as mo  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_MOE_PARITY_DIR", mo.DEFAULT_OUT))
N_TOKENS = mo.MAX_TOKENS
CASES = [(s["name"], p) for s in mo.SPECS for p in mo.PROMPTS]
IDS = [f"{m}-{p}" for m, p in CASES]


@pytest.fixture(scope="session")
def moe_models(spindle_bin):  # noqa: F811
    """The model set, rebuilt when its generator or mlx changed."""
    return tp.ensure_models(OUT, mo)


@pytest.fixture
def case(spindle_bin, moe_models, tmp_path_factory, model, prompt):  # noqa: F811
    """(reference, prompt entry, Spindle's output, logits dump) of the
    parametrized model and prompt; Spindle runs once per pair."""
    return tp.run_case(spindle_bin, moe_models, model, prompt,
                       tmp_path_factory.getbasetemp(), N_TOKENS)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_moe_greedy_tokens(case, moe_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_moe_last_logits(case, moe_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, moe_models / model, ref, entry,
                          f"{model}/{prompt}")


def _safetensors_elements(model_dir):
    """name -> element count, from the safetensors headers."""
    import json
    import struct
    out = {}
    for f in model_dir.glob("*.safetensors"):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                count = 1
                for d in info["shape"]:
                    count *= d
                out[name] = count
    return out


@pytest.mark.parametrize("model", ["qmoe-f32", "qmoe-sparse-f32",
                                   "qmoe-f32-hf"])
def test_moe_info(spindle_bin, moe_models, model):  # noqa: F811
    """`spindle info`: the expert counts of config.json, every tensor's
    parameters, and per token all but the (E - k) / E of the expert
    parameters a token skips."""
    import json
    d = moe_models / model
    cfg = json.loads((d / "config.json").read_text())
    r = subprocess.run([str(spindle_bin), "info", "-m", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    elems = _safetensors_elements(d)
    experts = sum(v for k, v in elems.items()
                  if ".switch_mlp." in k or ".mlp.experts." in k)
    n_moe = len({k.split(".mlp.")[0] for k in elems if ".mlp.gate." in k})
    e, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    assert info["experts"] == {"count": e, "used_per_token": k,
                               "intermediate_size":
                                   cfg["moe_intermediate_size"],
                               "moe_layers": n_moe}
    assert info["parameters"] == sum(elems.values())
    assert info["active_parameters"] == \
        sum(elems.values()) - experts * (e - k) // e
