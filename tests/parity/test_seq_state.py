"""Sequence state on the parity models: rollback, snapshot/restore, failed
forwards and the bounded memory of sliding-window layers.

tests/tools/seq_state_harness drives the public API (its docstring lists
the checks).  Every comparison is between two sequences of the same model
that must be in the same state, so their next logits must agree bit for
bit: a sequence that saw N tokens plus j discarded ones, truncated to N,
against one that saw only N (llama/qwen3: full KV, any j; Gemma 3: window
KV of window 8, j up to max_rollback guaranteed, and a refusal naming
"window KV" once a sequence is far past N); a snapshot restored and
continued against the continuation it was taken before; a sequence whose
batch failed against its twin.  The outputs of these models are checked
against mlx-lm by test_parity.py and test_gemma3_parity.py.

Memory: a Gemma 3 config whose layers are all local must keep the same
state size at 120 and at 480 tokens, while the mixed model's global layer
grows.

Environment: SPINDLE_BIN (the harness is taken from the same build
directory, or SPINDLE_BUILD_DIR), SPINDLE_PARITY_DIR,
SPINDLE_GEMMA3_PARITY_DIR.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gemma3_models as gm  # noqa: E402
import make_models as mm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
GEMMA_OUT = Path(os.environ.get("SPINDLE_GEMMA3_PARITY_DIR", gm.DEFAULT_OUT))
WINDOW = 8  # make_gemma3_models.py's sliding_window

# (model set, model, window of its local layers or 0, max_rollback or 0)
CASES = [
    ("main", "llama-f32", 0, 0),
    ("main", "qwen3-f32", 0, 0),
    ("main", "qwen3-q4g64", 0, 3),
    ("gemma3", "gemma3-f32", WINDOW, 0),
    ("gemma3", "gemma3-f32", WINDOW, 2),
    pytest.param("gemma3", "gemma3-wide-q4g64", WINDOW, 0,
                 marks=pytest.mark.slow),
]


def harness_path(spindle_bin):  # noqa: F811
    build = Path(os.environ.get("SPINDLE_BUILD_DIR", spindle_bin.parent))
    path = build / "seq_state_harness"
    if not path.is_file():
        pytest.skip(f"seq_state_harness not found at {path}")
    return path


@pytest.fixture(scope="session")
def sets(spindle_bin):  # noqa: F811
    return {"main": lambda: pc.ensure_models(OUT, mm),
            "gemma3": lambda: pc.ensure_models(GEMMA_OUT, gm)}


def run_harness(spindle_bin, model_dir, *args):  # noqa: F811
    cmd = [str(harness_path(spindle_bin)), str(model_dir), *map(str, args)]
    if os.environ.get("SPINDLE_THREADS"):
        cmd += ["--threads", os.environ["SPINDLE_THREADS"]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode not in (0, 1):
        pytest.fail(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
    return json.loads(r.stdout), r.returncode


@pytest.mark.parametrize("which,model,window,k", CASES,
                         ids=["llama-f32", "qwen3-f32", "qwen3-q4g64-k3",
                              "gemma3-f32", "gemma3-f32-k2",
                              "gemma3-wide-q4g64"])
def test_rollback_snapshot_failed_forward(spindle_bin, sets,  # noqa: F811
                                          which, model, window, k):
    args = ["--max-rollback", k] if k else []
    if window:
        args += ["--window", window]
    out, rc = run_harness(spindle_bin, sets[which]() / model, *args)
    print(f"  {model}: {out}")
    assert out["failures"] == [] and rc == 0, out["failures"]
    assert out["max_rollback"] == (k or 8)
    assert out["checks"] > 100
    if window:
        assert out["window_refused"], "a window layer rolled back too far"
    else:
        # Full KV reaches every length: every j past K was accepted too.
        assert out["beyond_k_accepted"] > 0


def _all_local(src, dst):
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix in (".safetensors", ".json"):
            (dst / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((src / "config.json").read_text())
    cfg["sliding_window_pattern"] = cfg["num_hidden_layers"] + 1
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _bytes(spindle_bin, model_dir, lengths):  # noqa: F811
    out, rc = run_harness(spindle_bin, model_dir, "--bytes",
                          ",".join(map(str, lengths)))
    assert rc == 0
    return dict(out["bytes"])


def test_window_memory_is_bounded(spindle_bin, sets, tmp_path):  # noqa: F811
    mixed = sets["gemma3"]() / "gemma3-f32"
    local = _all_local(mixed, tmp_path / "all-local")
    b = _bytes(spindle_bin, local, [120, 480])
    assert b[120] == b[480], f"all-local state grew: {b}"
    m = _bytes(spindle_bin, mixed, [120, 480])
    # The one global layer keeps every position (its capacity doubles from
    # 256 to 512 rows of 2 (k, v) x 2 heads x 32 dims x 4 bytes).
    assert m[480] - m[120] >= 256 * 2 * 2 * 32 * 4, m


def test_info_lists_state_kinds(spindle_bin, sets, tmp_path):  # noqa: F811
    def info(d, *extra):
        r = subprocess.run([str(spindle_bin), "info", "-m", str(d), *extra],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["state"]

    gemma = sets["gemma3"]() / "gemma3-f32"   # 5 layers, every third global
    assert info(gemma) == {"full_kv": 1, "window_kv": 4, "recurrent": 0,
                           "max_rollback": 8}
    local = _all_local(gemma, tmp_path / "all-local")
    assert info(local)["window_kv"] == 5
    llama = sets["main"]() / "llama-f32"
    assert info(llama) == {"full_kv": 2, "window_kv": 0, "recurrent": 0,
                           "max_rollback": 8}
