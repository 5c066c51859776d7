"""`spindle run --prompts FILE --parallel N`: every prompt through one step
engine, N at a time, printed in input order, each equal to the same prompt
run alone (`spindle run` with -p / --prompt-tokens, greedy).

  * token-id lines (JSONL prompt_tokens, a per-line max_tokens) on the tiny
    parity Qwen3 and on the hybrid qwen3_next (recurrent layers; the prompts
    share a prefix, so later ones map blocks and restore a boundary state:
    cached_tokens > 0) and on gemma3 (sliding-window layers, likewise)
    against solo runs;
  * text, {"prompt"} and {"messages"} lines on the tiny chat model with the
    real Qwen3 tokenizer and template against `spindle run -p` (--chat);
  * plain (non --json) output: one line per prompt, in input order;
  * with --spec ngram, each line's spec stats equal its solo run's;
  * a bad line fails before anything runs, naming its line number.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

SPINDLE_BIN = os.environ.get("SPINDLE_BIN", "/work/main/build/spindle")
WORK = Path(__file__).resolve().parents[1] / ".work"
QWEN3 = WORK / "parity" / "qwen3-f32"
HYBRID = WORK / "parity-hybrid" / "qwen3_next-f32"
WINDOW = WORK / "parity-gemma3" / "gemma3-f32"   # window-8 layers
CHAT = WORK / "server" / "qwen3-chat"

pytestmark = pytest.mark.skipif(
    not (os.access(SPINDLE_BIN, os.X_OK) and QWEN3.is_dir()),
    reason="spindle binary or the parity models (scripts/setup.sh) missing")

N = 10
SHARED = [(i * 7919 + 13) % 500 for i in range(70)]
TOKEN_PROMPTS = [
    [5],
    SHARED + [1, 2, 3],
    [(i * 31 + 7) % 500 for i in range(9)],
    SHARED + [9],                 # two blocks shared with the second
    [(i * 17 + 3) % 500 for i in range(40)],
    SHARED[:33],
]


def spindle(*args, stdin=None):
    return subprocess.run([SPINDLE_BIN, *args], capture_output=True,
                          text=True, timeout=300, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def batch(model, lines, tmp_path, *extra):
    f = tmp_path / "prompts.jsonl"
    f.write_text("\n".join(lines) + "\n")
    p = spindle("run", "-m", str(model), "--prompts", str(f), *extra)
    assert p.returncode == 0, p.stderr
    return p.stdout


def solo_tokens(model, prompt, n):
    p = spindle("run", "-m", str(model), "--prompt-tokens",
                ",".join(map(str, prompt)), "-n", str(n), "--ignore-eos",
                "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["tokens"]


@pytest.mark.parametrize("model", [QWEN3, HYBRID, WINDOW],
                         ids=["qwen3", "qwen3_next", "gemma3"])
def test_token_prompts_equal_solo_runs(tmp_path, model):
    if not model.is_dir():
        pytest.skip(f"{model} missing")
    lines = [json.dumps({"prompt_tokens": p}) for p in TOKEN_PROMPTS]
    lines[2] = json.dumps({"prompt_tokens": TOKEN_PROMPTS[2],
                           "max_tokens": 4})
    out = batch(model, lines, tmp_path, "--parallel", "3", "-n", str(N),
                "--ignore-eos", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["index"] for r in rows] == list(range(len(TOKEN_PROMPTS)))
    for i, (row, prompt) in enumerate(zip(rows, TOKEN_PROMPTS)):
        n = 4 if i == 2 else N
        assert row["prompt_tokens"] == prompt, i
        assert row["tokens"] == solo_tokens(model, prompt, n), \
            f"prompt {i}: batched != alone"
        assert row["stats"]["generated_tokens"] == n
        assert row["stats"]["stop_reason"] == "length"
    # the fourth shares two whole blocks with the second, run before it
    assert rows[3]["stats"]["cached_tokens"] == 64, rows[3]["stats"]


def test_plain_output_in_input_order(tmp_path):
    lines = [json.dumps({"prompt_tokens": p}) for p in TOKEN_PROMPTS[:4]]
    out = batch(QWEN3, lines, tmp_path, "--parallel", "2", "-n", "5",
                "--ignore-eos")
    got = [[int(t) for t in line.split()] for line in out.splitlines()]
    assert got == [solo_tokens(QWEN3, p, 5) for p in TOKEN_PROMPTS[:4]]


@pytest.mark.skipif(not CHAT.is_dir(), reason="tiny chat model missing")
def test_text_and_messages_lines_equal_solo_runs(tmp_path):
    texts = ["Hello there", "The capital of France is", "1, 2, 3,"]
    lines = [texts[0],
             json.dumps({"prompt": texts[1]}),
             json.dumps({"messages": [{"role": "user", "content": texts[2]}],
                         "max_tokens": 6})]
    rows = [json.loads(x) for x in batch(
        CHAT, lines, tmp_path, "--parallel", "3", "-n", "8", "--ignore-eos",
        "--json").splitlines()]
    solo = []
    for text, extra in ((texts[0], ["-n", "8"]), (texts[1], ["-n", "8"]),
                        (texts[2], ["-n", "6", "--chat"])):
        p = spindle("run", "-m", str(CHAT), "-p", text, "--ignore-eos",
                    "--json", *extra)
        assert p.returncode == 0, p.stderr
        solo.append(json.loads(p.stdout))
    for i, (row, want) in enumerate(zip(rows, solo)):
        assert row["prompt_tokens"] == want["prompt_tokens"], i
        assert row["tokens"] == want["tokens"], i
        assert row["text"] == want["text"], i


LOOP = [(i % 11) * 37 + 5 for i in range(60)]   # repeats: n-gram drafts hit


def test_speculative_lines_report_their_drafts(tmp_path):
    """With --spec ngram every line is lossless (its tokens are the plain
    solo run's) and carries its own spec stats, equal to the same prompt
    speculating alone (fixed K: the drafts depend on the tokens only)."""
    prompts = [LOOP, LOOP[5:] + [3, 4], TOKEN_PROMPTS[4]]
    spec = ["--spec", "ngram", "--num-draft-tokens", "4", "--spec-fixed-k"]
    rows = [json.loads(x) for x in batch(
        QWEN3, [json.dumps({"prompt_tokens": p}) for p in prompts], tmp_path,
        "--parallel", "3", "-n", str(N), "--ignore-eos", "--json",
        *spec).splitlines()]
    for i, (row, prompt) in enumerate(zip(rows, prompts)):
        assert row["tokens"] == solo_tokens(QWEN3, prompt, N), i
        p = spindle("run", "-m", str(QWEN3), "--prompt-tokens",
                    ",".join(map(str, prompt)), "-n", str(N), "--ignore-eos",
                    "--json", *spec)
        assert p.returncode == 0, p.stderr
        want = json.loads(p.stdout)["stats"]["spec"]
        got = row["stats"]["spec"]
        for k in ("mode", "drafted", "accepted", "target_forwards"):
            assert got[k] == want[k], (i, k, got, want)
    assert any(r["stats"]["spec"]["accepted"] > 0 for r in rows)


@pytest.mark.parametrize("line,why", [
    ('{"prompt_tokens": [1, -2]}', "line 2: prompt_tokens must hold token ids"),
    ('{"prompt_tokens": [1], "prompt": "x"}', "line 2: give exactly one of"),
    ('{"prompt_tokens": [1], "temperature": "hot"}',
     'line 2: "temperature" must be a number'),
    ('{"prompt_tokens": [1]', "line 2: not a JSON object"),
    ('plain text', "line 2: a text prompt needs the model's tokenizer"),
    ('{"prompt_tokens": [100000]}', "line 2:"),
])
def test_bad_line_names_it(tmp_path, line, why):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt_tokens": [1, 2]}\n' + line + "\n")
    p = spindle("run", "-m", str(QWEN3), "--prompts", str(f), "-n", "2")
    assert p.returncode == 1, p.stdout
    assert why in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert p.stdout == ""


def test_usage_errors():
    p = spindle("run", "-m", str(QWEN3), "--parallel", "2", "-p", "x")
    assert p.returncode == 2 and "--parallel needs --prompts" in p.stderr
    p = spindle("run", "-m", str(QWEN3), "--prompts", "f", "-p", "x")
    assert p.returncode == 2 and "--prompts FILE excludes -p" in p.stderr
