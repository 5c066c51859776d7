"""Every `spindle` subcommand answers --help and -h (and `spindle help CMD`)
with its usage on stdout and exit status 0; an unknown option still fails
with one line on stderr naming it."""
import os
import re
import subprocess

import pytest

SPINDLE_BIN = os.environ.get("SPINDLE_BIN", "/work/main/build/spindle")

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(SPINDLE_BIN) and os.access(SPINDLE_BIN, os.X_OK)),
    reason=f"spindle binary not found at {SPINDLE_BIN} (set SPINDLE_BIN)",
)

# The subcommands README.md documents; the list `spindle --help` prints must
# hold at least these (and every one it prints is tested below).
DOCUMENTED = {"run", "chat", "info", "bench", "batched-bench", "convert", "tokenize",
              "detokenize", "template"}


def spindle(*args):
    return subprocess.run([SPINDLE_BIN, *args], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)


def listed_commands():
    out = spindle("--help").stdout
    block = out.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


COMMANDS = sorted(DOCUMENTED | (set(listed_commands()) if os.access(SPINDLE_BIN, os.X_OK)
                                else set()))


def test_the_command_list_names_every_documented_subcommand():
    assert set(listed_commands()) >= DOCUMENTED


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"]])
def test_top_level_help(args):
    p = spindle(*args)
    assert p.returncode == 0, p.stderr
    assert "usage: spindle <command>" in p.stdout
    assert p.stderr == ""


def test_no_arguments_is_a_usage_error():
    p = spindle()
    assert p.returncode == 2
    assert "usage: spindle <command>" in p.stderr and p.stdout == ""


@pytest.mark.parametrize("how", ["--help", "-h", "help"])
@pytest.mark.parametrize("cmd", COMMANDS)
def test_subcommand_help(cmd, how):
    p = spindle("help", cmd) if how == "help" else spindle(cmd, how)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"usage: spindle {cmd} "), p.stdout
    assert p.stderr == ""


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("extra", [[], ["value"]])
def test_unknown_option_fails_with_one_line(cmd, extra):
    p = spindle(cmd, "--no-such-option", *extra)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.endswith("\n"), p.stderr
    assert re.search(rf"^spindle {cmd}: .*'--no-such-option'", p.stderr), p.stderr


def test_unknown_command_fails_with_one_line():
    p = spindle("no-such-command")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "no-such-command" in p.stderr
