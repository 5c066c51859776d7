"""Oracle parity: Spindle against mlx-lm on tiny random-weight models.

The models and references come from make_models.py (mlx / mlx-lm's own code).
For every model x prompt, `spindle run` must
  (a) generate the reference's greedy tokens, up to the first position where
      they differ, and there the reference's top-1 - top-2 margin must be a
      near-tie (< TIE_FACTOR * logit tolerance * that step's logit std);
  (b) dump last-prompt-position logits within a relative tolerance
      (max abs error / std of the reference logits).

Two mlx references are checked, both computed by mlx_lm.generate_step:
  * "f32": the same weights upcast to float32 (bf16/f16 values and quantized
    scales/biases convert exactly; the packed codes are untouched).  This is
    what Spindle computes -- f32 activations, f32 accumulation, f32 KV cache --
    so it is held to TOL_F32_REL.
  * "native": the model in its stored dtype, as mlx-lm would run it.  mlx
    keeps activations in bf16/f16 there (and on CPU its bf16 quantized matmul
    also rounds partial sums), so the native result is itself off from the
    f32 one by a gap that make_models.py measures per model
    (gap_rel_native_vs_f32, max over the prompts).  Tolerance:
    max(NATIVE_FACTOR * gap, TOL_F32_REL).  Typical gaps (mlx 0.32 CPU): f16
    ~1e-2, bf16 ~5e-2, bf16-scaled quantized 0.15-0.35 of the logit std.

The tolerances and checks live in parity_common.py (shared with
test_gemma3_parity.py).

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS (passed as
-t), SPINDLE_PARITY_DIR (default tests/.work/parity).
"""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
models, case = pc.parity_fixtures(mm, OUT)
CASES, IDS = pc.parity_cases(mm)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_greedy_tokens(case, model, prompt):
    ref, entry, out, _ = case
    pc.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_last_logits(case, models, model, prompt):
    ref, entry, _, dump = case
    pc.assert_last_logits(dump, models / model, ref, entry,
                          f"{model}/{prompt}")
