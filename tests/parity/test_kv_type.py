"""`spindle run --kv-type bf16|f16` against mlx-lm's f32 reference.

The default f32 cache is held to test_parity.py's TOL_F32_REL. A bf16 or f16
cache rounds every stored key and value (relative error up to 2^-9 and
2^-12), which moves the logits by more than that, so here the tolerances are
measured ones with headroom. Measured max|err|/std of the last-prompt-position
logits against the mlx f32 reference (make_models.py's models, three prompts,
qwen3-bf16, llama-f32, qwen2-f16):

    bf16 cache: 7.0e-3 .. 1.65e-2        f16 cache: 9.4e-4 .. 1.54e-3

(the f32 cache: ~3e-6). The tolerances below are 3x the worst measured
value; the bf16/f16 ratio (~10x) is about the 8x of their precisions. The
greedy tokens must equal the reference's, except at a near-tie of that
tolerance (parity_common.check_tokens). A lower bound checks that the option
reaches the cache at all: a rounded cache that still matched the f32 run to
~1e-5 would mean the values were not rounded.

Environment: as test_parity.py (SPINDLE_BIN, SPINDLE_THREADS,
SPINDLE_PARITY_DIR).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
N_TOKENS = 16

TOL_KV = {"bf16": 5e-2, "f16": 5e-3}
# Below this the cache was evidently not rounded (f32 runs give ~3e-6).
MIN_EFFECT = pc.TOL_F32_REL  # 1e-4

MODELS = ["qwen3-bf16", "llama-f32"]
CASES = [(m, p, kv) for m in MODELS for p in mm.PROMPTS for kv in TOL_KV]


@pytest.fixture(scope="session")
def models_dir(spindle_bin):  # noqa: F811
    return pc.ensure_models(OUT, mm)


def run(bin_path, model_dir, prompt, kv, dump):
    cmd = [str(bin_path), "run", "-m", str(model_dir), "--prompt-tokens",
           ",".join(map(str, prompt)), "-n", str(N_TOKENS), "--json",
           "--dump-logits", str(dump), "--kv-type", kv]
    if os.environ.get("SPINDLE_THREADS"):
        cmd += ["-t", os.environ["SPINDLE_THREADS"]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"{' '.join(cmd)}\nexit {r.returncode}\n{r.stderr[-4000:]}")
    return json.loads(r.stdout)


@pytest.mark.parametrize("model,prompt,kv", CASES,
                         ids=[f"{m}-{p}-{kv}" for m, p, kv in CASES])
def test_kv_type_against_f32_reference(spindle_bin, models_dir,  # noqa: F811
                                       tmp_path, model, prompt, kv):
    ref = pc.load_ref(models_dir, model)
    entry = ref["prompts"][prompt]["f32"]
    dump = tmp_path / "logits.npy"
    out = run(spindle_bin, models_dir / model,
              ref["prompts"][prompt]["prompt_tokens"], kv, dump)

    got = np.load(dump)
    want = np.load(models_dir / model / entry["logits_file"])
    err = float(np.max(np.abs(got - want)) / np.std(want))
    print(f"  {model}/{prompt} kv {kv}: max|err|/std = {err:.3g} "
          f"(tolerance {TOL_KV[kv]:.3g})")
    assert err <= TOL_KV[kv], f"logits off by {err:.4g} of their std"
    assert err >= MIN_EFFECT, \
        f"logits within {err:.3g} of f32: the {kv} cache looks unrounded"

    # The reference ran N_TOKENS >= 16 greedy steps; compare the first 16.
    short = dict(entry, tokens=entry["tokens"][:N_TOKENS])
    if len(entry["tokens"]) > N_TOKENS:
        short["eos_token"] = None
    problem = pc.check_tokens([int(t) for t in out["tokens"]], short,
                              TOL_KV[kv], f"mlx f32, {kv} cache")
    assert problem is None, problem
