"""Oracle parity for the Llama-like dense families (smollm3, phi3, olmo2,
olmo3, granite, ministral3, mistral3): Spindle against mlx-lm.

Models and references come from make_dense_models.py (mlx / mlx-lm's own
code); the checks and tolerances are test_parity.py's (parity_common.py):
  (a) greedy tokens identical to the reference up to a near-tie;
  (b) last-prompt-position logits within TOL_F32_REL (1e-4 of the logit
      std) of the float32-upcast reference, and within
      max(NATIVE_FACTOR * mlx's own native-vs-f32 gap, TOL_F32_REL) of the
      native-dtype one.
(Malformed values of the families' new config keys: tests/malformed/
test_malformed_configs.py.)

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_DENSE_PARITY_DIR (default tests/.work/parity-dense).
"""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_dense_models as dm  # noqa: E402  (cheap: no mlx at import)
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_DENSE_PARITY_DIR", dm.DEFAULT_OUT))
models, case = pc.parity_fixtures(dm, OUT)
CASES, IDS = pc.parity_cases(dm)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_dense_greedy_tokens(case, model, prompt):
    ref, entry, out, _ = case
    pc.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_dense_last_logits(case, models, model, prompt):
    ref, entry, _, dump = case
    pc.assert_last_logits(dump, models / model, ref, entry,
                          f"{model}/{prompt}")
