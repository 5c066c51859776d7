"""Oracle parity for gpt-oss: Spindle against mlx-lm's gpt_oss.

Models and references come from make_gptoss_models.py (mlx / mlx-lm's own
code: alternating sliding-window and full attention with a window shorter
than the prompt, attention sinks, biases, top-k-then-softmax routing over
biased experts with the clamped SwiGLU, YaRN, and f32 / bf16 / MXFP4-expert
/ MLX 8-bit / mxfp4 weights); the checks are test_parity.py's
(parity_common.py):
  (a) greedy tokens identical to the reference up to a near-tie;
  (b) last-prompt-position logits within a relative tolerance (max abs error
      / std of the reference logits): TOL_F32_REL against the float32
      reference; against the native one max(NATIVE_FACTOR * mlx's own
      native-vs-f32 gap, TOL_F32_REL).

test_gptoss_chat runs `spindle run --chat` on the "-chat" model (the gpt-oss
tokenizer and harmony template): its prompt ids must be transformers'
apply_chat_template ids, and its greedy tokens mlx-lm's on them.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_GPTOSS_PARITY_DIR (default tests/.work/parity-gptoss).
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
import make_gptoss_models as gm  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_GPTOSS_PARITY_DIR", gm.DEFAULT_OUT))
N_TOKENS = gm.MAX_TOKENS
CASES = [(s["name"], p) for s in gm.SPECS for p in gm.PROMPTS]
IDS = [f"{m}-{p}" for m, p in CASES]


@pytest.fixture(scope="session")
def gptoss_models(spindle_bin):  # noqa: F811
    """The model set, rebuilt when its generator or mlx changed."""
    return tp.ensure_models(OUT, gm)


@pytest.fixture
def case(spindle_bin, gptoss_models, tmp_path_factory, model, prompt):  # noqa: F811
    """(reference, prompt entry, Spindle's output, logits dump) of the
    parametrized model and prompt; Spindle runs once per pair."""
    return tp.run_case(spindle_bin, gptoss_models, model, prompt,
                       tmp_path_factory.getbasetemp(), N_TOKENS)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_gptoss_greedy_tokens(case, gptoss_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_gptoss_last_logits(case, gptoss_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, gptoss_models / model, ref, entry,
                          f"{model}/{prompt}", lambda w: w)


CHAT_MESSAGE = "What is the capital of France?"
CHAT_TOKENS = 12


def _greedy_entry(model, prompt):
    """mlx-lm's greedy continuation of `prompt` (EOS ignored) as a
    reference entry for parity_common.check_tokens."""
    toks, _, _, logits = gm.mm.run_reference(model, prompt, set(), CHAT_TOKENS)
    return {"tokens": toks, "eos_token": None,
            "margins": [gm.mm.margin(l) for l in logits],
            "step_std": [float(np.std(l)) for l in logits]}


def test_gptoss_chat(spindle_bin, gptoss_models, tmp_path):  # noqa: F811
    """The harmony format end to end: transformers renders and tokenizes the
    conversation (today's date, as `spindle run` renders it), Spindle must
    feed exactly those ids and continue them as mlx-lm does (float32 and
    native references, near-ties aside)."""
    from transformers import AutoTokenizer
    d = gptoss_models / "gptoss-chat"
    tok = AutoTokenizer.from_pretrained(str(d))
    ids = list(tok.apply_chat_template(
        [{"role": "user", "content": CHAT_MESSAGE}],
        add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"])
    cmd = [str(spindle_bin), "run", "-m", str(d), "--chat", "-p",
           CHAT_MESSAGE, "-n", str(CHAT_TOKENS), "--ignore-eos", "--json"]
    if os.environ.get("SPINDLE_THREADS"):
        cmd += ["-t", os.environ["SPINDLE_THREADS"]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prompt_tokens"] == ids, "the chat prompt differs from " \
        "transformers' apply_chat_template"
    gm.mm._imports()
    gm.mm.mx.set_default_device(gm.mm.mx.cpu)
    model, _ = gm.mm.mlu.load_model(d)
    model32, _ = gm.mm.mlu.load_model(d)
    model32.set_dtype(gm.mm.mx.float32)
    ref = tp.load_ref(gptoss_models, "gptoss-chat")
    got = [int(t) for t in out["tokens"]]
    errors = [e for e in (
        tp.check_tokens(got, _greedy_entry(model32, ids), tp.TOL_F32_REL,
                        "mlx f32-upcast"),
        tp.check_tokens(got, _greedy_entry(model, ids), tp.native_tol(ref),
                        "mlx native"),
    ) if e]
    assert not errors, "\n".join(errors)

