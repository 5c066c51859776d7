"""Fixtures of the diffusion tests: the spindle binary, the tiny LLaDA GGUF
(llada_gguf.py, cached in tests/.work/diffusion) and a runner of
`spindle run` on it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llada_gguf  # noqa: E402

ROOT = HERE.parents[1]
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", ROOT / "build" / "spindle"))
THREADS = os.environ.get("SPINDLE_THREADS", "2")


@pytest.fixture(scope="session")
def spindle_bin():
    if not SPINDLE_BIN.is_file():
        pytest.skip(f"spindle binary not found at {SPINDLE_BIN}")
    return SPINDLE_BIN


@pytest.fixture(scope="session")
def llada(spindle_bin):
    return llada_gguf.ensure()


@pytest.fixture(scope="session")
def run_llada(run_gguf, llada):
    """spindle run -m LLADA ARGS...: the CompletedProcess, and with --json
    its parsed object as .out."""
    return lambda *args, check=True: run_gguf(llada, *args, check=check)


@pytest.fixture(scope="session")
def run_gguf(spindle_bin):
    """spindle run -m MODEL ARGS..., as run_llada."""
    def run(model, *args, check=True):
        r = subprocess.run([str(spindle_bin), "run", "-m", str(model), "-t",
                            THREADS, *map(str, args)], capture_output=True,
                           text=True, timeout=120)
        if check:
            assert r.returncode == 0, r.stderr
        r.out = json.loads(r.stdout) if "--json" in args and r.returncode == 0 else None
        return r
    return run
