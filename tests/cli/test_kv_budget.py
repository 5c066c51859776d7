"""`--kv-budget` on `spindle run`: a budget that holds no block fails the
load, a request that needs more blocks than the pool holds fails with the
limit error, a malformed value is a usage error, and a budget that fits
generates (with cached_tokens in --json)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

SPINDLE_BIN = os.environ.get("SPINDLE_BIN", "/work/main/build/spindle")
MODEL = Path(__file__).resolve().parents[1] / ".work" / "parity" / "qwen3-f32"

pytestmark = pytest.mark.skipif(
    not (os.access(SPINDLE_BIN, os.X_OK) and MODEL.is_dir()),
    reason="spindle binary or the parity model (scripts/setup.sh) missing")

PROMPT = ",".join(str(i % 500) for i in range(100))


def run(*args):
    return subprocess.run([SPINDLE_BIN, "run", "-m", str(MODEL), *args],
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def block_bytes():
    cfg = json.loads((MODEL / "config.json").read_text())
    return (2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"]
            * cfg["head_dim"] * 4 * 32)   # f32 K and V of 32 positions


def test_budget_below_one_block_fails_the_load():
    p = run("--prompt-tokens", "1,2,3", "-n", "2", "--kv-budget", "1K")
    assert p.returncode == 1
    assert f"holds no block of 32 tokens ({block_bytes()} bytes)" in p.stderr


@pytest.mark.parametrize("bad", ["abc", "0", "-5", "12X", "1.5G"])
def test_malformed_budget_is_a_usage_error(bad):
    p = run("--prompt-tokens", "1", "--kv-budget", bad)
    assert p.returncode == 2
    assert "--kv-budget expects a positive byte count" in p.stderr


def test_request_larger_than_the_pool_gets_the_limit_error():
    # 100 prompt + 50 generated positions need 5 blocks; the pool holds 2.
    p = run("--prompt-tokens", PROMPT, "-n", "50", "--ignore-eos",
            "--kv-budget", str(2 * block_bytes()))
    assert p.returncode != 0
    assert "needs 5 KV blocks of 32 tokens; the pool holds 2" in p.stderr


def test_budget_that_fits_generates():
    p = run("--prompt-tokens", PROMPT, "-n", "20", "--ignore-eos", "--json",
            "--kv-budget", str(4 * block_bytes()))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert len(out["tokens"]) == 20
    assert out["stats"]["cached_tokens"] == 0
