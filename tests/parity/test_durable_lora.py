"""Durable generations under a LoRA adapter: a checkpoint records which
adapter (its identity: a hash of its scale, shapes and values) and scale the
generation ran with. Resumed under the same ones, the run continues exactly
as the uninterrupted one (seeded sampling, so every token depends on the
adapter); resumed without it, under another adapter or another scale, or
with an adapter where the checkpoint had none, it is refused with one line
and exit 1, never continued as a different generation."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_lora_models as gen  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import ensure_models, spindle_bin  # noqa: E402,F401

N_TOKENS = 32


@pytest.fixture(scope="module")
def model(spindle_bin):  # noqa: F811
    return ensure_models(gen.DEFAULT_OUT, gen) / "qwen3-f32"


def run(model, *args):
    return subprocess.run([str(pc.SPINDLE_BIN), "run", "-m", str(model), *args],
                          capture_output=True, text=True, timeout=120)


def generate(model, lora, *extra):
    ref = json.loads((model / "reference.json").read_text())
    prompt = ref["prompts"]["len7"]["prompt_tokens"]
    args = ["--prompt-tokens", ",".join(map(str, prompt)), "-n", str(N_TOKENS),
            "--ignore-eos", "--temp", "0.8", "--seed", "7", *extra]
    if lora:
        args += ["--lora", lora]
    r = run(model, *args)
    assert r.returncode == 0, r.stderr
    return [int(t) for t in r.stdout.split()]


def test_resume_continues_under_the_same_adapter(model, tmp_path):
    lora = str(model / "all8")
    full = generate(model, lora)
    assert full != generate(model, None), "the adapter changes nothing here"
    ckpt = tmp_path / "run.spck"
    assert generate(model, lora, "--checkpoint", str(ckpt), "--checkpoint-every", "8") == full
    r = run(model, "--lora", lora, "--resume", str(ckpt))
    assert r.returncode == 0, r.stderr
    resumed = [int(t) for t in r.stdout.split()]
    assert 0 < len(resumed) < N_TOKENS and full[N_TOKENS - len(resumed):] == resumed


@pytest.mark.parametrize("made_with,resumed_with,needle", [
    ("all8", None, "made with a LoRA adapter"),
    ("all8", "qvd4", "another LoRA adapter or scale"),
    ("all8", "all8:0.5", "another LoRA adapter or scale"),
    (None, "all8", "made without a LoRA adapter"),
])
def test_resume_under_another_adapter_refused(model, tmp_path, made_with,
                                              resumed_with, needle):
    ckpt = tmp_path / "run.spck"
    generate(model, made_with and str(model / made_with), "--checkpoint", str(ckpt),
             "--checkpoint-every", "8")
    args = ["--resume", str(ckpt)]
    if resumed_with:
        args += ["--lora", str(model / resumed_with)]
    r = run(model, *args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert len(lines) == 1 and needle in lines[0], r.stderr
