"""A misspelt SPINDLE_PRECISION or SPINDLE_SIMD stops every command with one
line naming the variable, its value and the accepted values (exit status 2),
instead of silently running in the default mode; valid values, and a level
above the CPU's (SPINDLE_SIMD is a cap), still run."""
import os
import subprocess

import pytest

SPINDLE_BIN = os.environ.get("SPINDLE_BIN", "/work/main/build/spindle")

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(SPINDLE_BIN) and os.access(SPINDLE_BIN, os.X_OK)),
    reason=f"spindle binary not found at {SPINDLE_BIN} (set SPINDLE_BIN)",
)


def spindle_with(env_overrides, *args):
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPINDLE_PRECISION", "SPINDLE_SIMD")}
    env.update(env_overrides)
    return subprocess.run([SPINDLE_BIN, *args], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL, env=env)


@pytest.mark.parametrize("variable,value,accepted", [
    ("SPINDLE_PRECISION", "fsat", "fast, high or exact"),
    ("SPINDLE_PRECISION", "FAST", "fast, high or exact"),
    ("SPINDLE_SIMD", "avx3", "avx2"),
])
def test_an_unknown_value_is_one_line_naming_it(variable, value, accepted):
    result = spindle_with({variable: value}, "tokenize", "--help")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert variable in lines[0] and f"'{value}'" in lines[0] and accepted in lines[0]


@pytest.mark.parametrize("overrides", [
    {}, {"SPINDLE_PRECISION": "exact"}, {"SPINDLE_PRECISION": "high"},
    {"SPINDLE_SIMD": "scalar"}, {"SPINDLE_SIMD": "avx512"},
    {"SPINDLE_SIMD": "i8mm", "SPINDLE_PRECISION": "fast"},
])
def test_valid_values_run(overrides):
    result = spindle_with(overrides, "tokenize", "--help")
    assert result.returncode == 0, result.stderr
