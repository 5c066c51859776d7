"""Oracle parity for the GLM-4.5 family (glm4_moe): Spindle against mlx-lm's
glm4_moe.

Models and references come from make_glm4moe_models.py (mlx / mlx-lm's own
code); the checks and tolerances are test_parity.py's (parity_common.py):
  (a) greedy tokens identical to the reference up to a near-tie;
  (b) last-prompt-position logits within a relative tolerance (max abs error
      / std of the reference logits) of mlx upcast to float32 and of mlx in
      the stored dtype.
The 40-token prompt also runs in prefill chunks of 16, whose tokens and
logits must be the same. Malformed configs fail with one line naming the
key.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_GLM4MOE_PARITY_DIR (default tests/.work/parity-glm4moe).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_glm4moe_models as gen  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_GLM4MOE_PARITY_DIR", gen.DEFAULT_OUT))
N_TOKENS = gen.MAX_TOKENS
CASES, IDS = tp.parity_cases(gen)


glm_models, case = tp.parity_fixtures(gen, OUT, "glm_models")


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_glm4moe_greedy_tokens(case, glm_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_glm4moe_last_logits(case, glm_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, glm_models / model, ref, entry,
                          f"{model}/{prompt}")


@pytest.mark.parametrize("model", ["glm4moe-f32", "glm4moe-q4g64"])
def test_glm4moe_prefill_chunks(spindle_bin, glm_models, tmp_path, model):  # noqa: F811
    """The 40-token prompt in chunks of 16: the reference's tokens and
    logits, as in one pass."""
    tp.assert_prefill_chunks(spindle_bin, glm_models, model, N_TOKENS, tmp_path)


BAD_CONFIGS = [
    ({"partial_rotary_factor": None}, "partial_rotary_factor"),
    ({"n_group": 3}, "n_group"),
    ({"topk_group": 5}, "topk_group"),
    ({"topk_method": "greedy"}, "topk_method"),
    ({"scoring_func": "softmax"}, "scoring_func"),
    ({"moe_intermediate_size": None}, "moe_intermediate_size"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
]


@pytest.mark.parametrize("change,key", BAD_CONFIGS,
                         ids=[k for _, k in BAD_CONFIGS])
def test_glm4moe_bad_config(spindle_bin, glm_models, tmp_path, change, key):  # noqa: F811
    """A malformed config fails with one line naming the key, no crash."""
    src = glm_models / "glm4moe-f32"
    d = tmp_path / "bad"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    for k, v in change.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([str(spindle_bin), "run", "-m", str(d),
                        "--prompt-tokens", "1,2,3", "-n", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode > 0, r.stderr  # failed, and not by a signal
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and key in lines[0], r.stderr


@pytest.mark.parametrize("model", ["glm4moe-f32", "glm4moe-plain-f32"])
def test_glm4moe_info(spindle_bin, glm_models, model):  # noqa: F811
    """`spindle info`: every layer keeps full KV, two MoE layers of 8
    experts (one dense layer first unless first_k_dense_replace is 0), and
    the parameters are every tensor's."""
    import test_moe_parity as tmp
    d = glm_models / model
    r = subprocess.run([str(spindle_bin), "info", "-m", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["state"]["full_kv"] == 3
    assert info["experts"]["count"] == 8
    assert info["experts"]["moe_layers"] == (3 if "plain" in model else 2)
    assert info["parameters"] == sum(tmp._safetensors_elements(d).values())
