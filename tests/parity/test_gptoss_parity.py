"""Oracle parity for gpt-oss: Spindle against mlx-lm's gpt_oss.

Models and references come from make_gptoss_models.py (mlx / mlx-lm's own
code: alternating sliding-window and full attention with a window shorter
than the prompt, attention sinks, biases, top-k-then-softmax routing over
biased experts with the clamped SwiGLU, YaRN, and f32 / bf16 / MXFP4-expert
/ MLX 8-bit / mxfp4 weights); the checks are test_parity.py's
(parity_common.py):
  (a) greedy tokens identical to the reference up to a near-tie;
  (b) last-prompt-position logits within a relative tolerance (max abs error
      / std of the reference logits): TOL_F32_REL against the float32
      reference; against the native one max(NATIVE_FACTOR * mlx's own
      native-vs-f32 gap, TOL_F32_REL).

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_GPTOSS_PARITY_DIR (default tests/.work/parity-gptoss).
"""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gptoss_models as gm  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_GPTOSS_PARITY_DIR", gm.DEFAULT_OUT))
N_TOKENS = gm.MAX_TOKENS
CASES = [(s["name"], p) for s in gm.SPECS for p in gm.PROMPTS]
IDS = [f"{m}-{p}" for m, p in CASES]


@pytest.fixture(scope="session")
def gptoss_models(spindle_bin):  # noqa: F811
    """The model set, rebuilt when its generator or mlx changed."""
    return tp.ensure_models(OUT, gm)


@pytest.fixture
def case(spindle_bin, gptoss_models, tmp_path_factory, model, prompt):  # noqa: F811
    """(reference, prompt entry, Spindle's output, logits dump) of the
    parametrized model and prompt; Spindle runs once per pair."""
    return tp.run_case(spindle_bin, gptoss_models, model, prompt,
                       tmp_path_factory.getbasetemp(), N_TOKENS)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_gptoss_greedy_tokens(case, gptoss_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_gptoss_last_logits(case, gptoss_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, gptoss_models / model, ref, entry,
                          f"{model}/{prompt}", lambda w: w)
