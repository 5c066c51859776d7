"""Oracle parity for multi-head latent attention: Spindle against mlx-lm's
deepseek_v3 and glm4_moe_lite.

Models and references come from make_mla_models.py (mlx / mlx-lm's own
code); the checks and tolerances are test_parity.py's (parity_common.py):
  (a) greedy tokens identical to the reference up to a near-tie;
  (b) last-prompt-position logits within a relative tolerance (max abs error
      / std of the reference logits) of mlx upcast to float32 and of mlx in
      the stored dtype.
Spindle attends in the absorbed form on every pass (queries projected into
the latent space), mlx-lm expands the keys and values for a prompt: equal
in exact arithmetic, so the float32 tolerance holds. The 40-token prompt
also runs in prefill chunks of 16 (three passes over the latent cache),
whose tokens and logits must be the same.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_MLA_PARITY_DIR (default tests/.work/parity-mla).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_mla_models as gen  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_MLA_PARITY_DIR", gen.DEFAULT_OUT))
N_TOKENS = gen.MAX_TOKENS
CASES, IDS = tp.parity_cases(gen)


mla_models, case = tp.parity_fixtures(gen, OUT, "mla_models")


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_mla_greedy_tokens(case, mla_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_mla_last_logits(case, mla_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, mla_models / model, ref, entry,
                          f"{model}/{prompt}")


@pytest.mark.parametrize("model", ["dsv3-f32", "dsv3-q4g64"])
def test_mla_prefill_chunks(spindle_bin, mla_models, tmp_path, model):  # noqa: F811
    """The 40-token prompt in chunks of 16: the reference's tokens and
    logits, as in one pass."""
    tp.assert_prefill_chunks(spindle_bin, mla_models, model, N_TOKENS, tmp_path)


@pytest.mark.parametrize("model", ["dsv3-f32", "dsv3-plain-yarn-f32",
                                   "dsv3-f32-hf"])
def test_mla_info(spindle_bin, mla_models, model):  # noqa: F811
    """`spindle info`: every layer keeps latent KV, and the parameters are
    every tensor's (the Hugging Face kv_b_proj counted once)."""
    import test_moe_parity as tmp
    d = mla_models / model
    r = subprocess.run([str(spindle_bin), "info", "-m", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["state"]["latent_kv"] == 3 and info["state"]["full_kv"] == 0
    assert info["parameters"] == sum(tmp._safetensors_elements(d).values())
